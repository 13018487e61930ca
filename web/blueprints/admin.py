"""Administration: trees, machines, tracked branches, mailing lists and users (admins
only)."""

from __future__ import annotations

import re
from pathlib import Path

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from sqlalchemy.exc import IntegrityError

from stackbench.errors import InputError
from stackbench.resultsdb import accounts_q, lists_q, machines_q, storable, trees_q
from stackbench.web import dbsession, inputs
from stackbench.web.auth import admin_required

bp = Blueprint("admin", __name__, url_prefix="/admin")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,99}$")
_BRANCH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,199}$")


@bp.before_request
@admin_required
def _only_admins():
    return None


@bp.route("/")
def index():
    s = dbsession.get()
    return render_template(
        "admin.html",
        trees=trees_q.trees(s),
        machines=machines_q.listing(s),
        branches=trees_q.branches(s),
        users=accounts_q.users(s),
        lists=[r for r in lists_q.all_lists(s) if (r.meta or {}).get("definition")],
    )


def _commit(what: str):
    s = dbsession.get()
    try:
        s.commit()
    except IntegrityError:
        s.rollback()
        flash(f"{what}: already exists or still in use")
    else:
        flash(f"{what}: saved")
    return redirect(url_for("admin.index"), code=303)


@bp.route("/trees", methods=["POST"])
def add_tree():
    f = request.form
    name = f.get("name", "").strip()
    why = storable.tree_name_problem(name)
    if why:
        abort(400, why)
    url = f.get("url", "").strip()
    if url and not re.match(r"^(https?|git|ssh|file)://|^/", url):
        abort(400, "tree url: http(s)://, git://, ssh://, file:// or an absolute path")
    # a new tree only: a name in use is refused at commit, never overwritten
    trees_q.save_tree(
        dbsession.get(),
        name,
        url=url,
        default_base=f.get("default_base", "").strip(),
        exists_ok=False,
    )
    return _commit(f"tree {name}")


@bp.route("/trees/<int:tree_id>/delete", methods=["POST"])
def delete_tree(tree_id: int):
    s = dbsession.get()
    t = trees_q.get(s, tree_id) or abort(404)
    trees_q.delete_tree(s, t)
    return _commit(f"tree {t.name} deleted")


@bp.route("/machines", methods=["POST"])
def add_machine():
    f = request.form
    name = f.get("name", "").strip()
    if not _NAME_RE.match(name):
        abort(400, "machine name: letters, digits, . _ - (up to 100)")
    kind = f.get("kind", "qemu")
    if kind not in ("qemu", "baremetal"):
        abort(400, "machine kind: qemu or baremetal")

    def num(key: str) -> int | None:
        raw = f.get(key, "").strip()
        return inputs.whole_number(key, raw) if raw else None

    machines_q.add(
        dbsession.get(),
        name,
        kind=kind,
        cpus=num("cpus"),
        memory_mb=num("memory_mb"),
        nodes=num("nodes"),
    )
    return _commit(f"machine {name}")


@bp.route("/machines/<int:machine_id>/delete", methods=["POST"])
def delete_machine(machine_id: int):
    s = dbsession.get()
    m = machines_q.get(s, machine_id) or abort(404)
    machines_q.delete(s, m)
    return _commit(f"machine {m.name} deleted")


@bp.route("/branches", methods=["POST"])
def add_branch():
    f = request.form
    s = dbsession.get()
    tree = trees_q.get(s, f.get("tree_id", type=int) or 0)
    if tree is None:
        abort(400, "pick a tree")
    branch = f.get("branch", "").strip()
    if not _BRANCH_RE.match(branch):
        abort(400, "branch: a git ref name")
    from stackbench.jobs.executors.jobspecs import split_job_specs

    jobs = split_job_specs(f.get("jobs", ""), spaces=True)
    # checked as a tracked-branch file is, so the nightly run never meets a branch it
    # cannot measure (no jobs, an unknown job)
    from stackbench.jobs.tracking.tracked_branches import clean_tracked

    try:
        clean_tracked(
            {"tree": tree.name, "branch": branch, "jobs": jobs},
            Path(f"tracked branch {tree.name}:{branch}"),
        )
    except InputError as exc:
        abort(400, str(exc))
    # a new tracked branch only: one tracked already is refused at commit, not changed
    trees_q.save_branch(s, tree.id, branch, jobs=jobs, enabled=True, exists_ok=False)
    return _commit(f"tracked branch {tree.name}:{branch}")


@bp.route("/branches/<int:branch_id>/toggle", methods=["POST"])
def toggle_branch(branch_id: int):
    s = dbsession.get()
    b = trees_q.branch(s, branch_id) or abort(404)
    trees_q.set_branch_enabled(b, not b.enabled)
    return _commit(f"tracked branch {b.branch} {'enabled' if b.enabled else 'disabled'}")


@bp.route("/branches/<int:branch_id>/delete", methods=["POST"])
def delete_branch(branch_id: int):
    s = dbsession.get()
    b = trees_q.branch(s, branch_id) or abort(404)
    trees_q.delete_branch(s, b)
    return _commit(f"tracked branch {b.branch} deleted")


def _words(raw: str) -> list[str]:
    return [w for w in re.split(r"[\s,]+", raw) if w]


@bp.route("/lists", methods=["POST"])
def add_list():
    f = request.form
    name = f.get("name", "").strip()
    definition: dict = {
        "name": name,
        "archive": f.get("archive", "").strip(),
        "tree": f.get("tree", "").strip(),
        "filters": {
            k: v
            for k, v in (("to", _words(f.get("to", ""))), ("paths", _words(f.get("paths", ""))))
            if v
        },
        "reports": {"to": _words(f.get("report_to", ""))},
    }
    # checked as a list file is, so the watcher never meets a list it cannot read
    from stackbench.kernels.lists import clean_list

    try:
        lst = clean_list(definition, Path(f"list {name[:100]}"))
    except InputError as exc:
        abort(400, str(exc))
    if not lst.is_url and not lst.archive.startswith("/"):
        abort(400, "list archive: an http(s):// URL or an absolute path")
    lists_q.declare(dbsession.get(), lst.name, lst.archive, definition)
    return _commit(f"list {name}")


@bp.route("/lists/<int:list_id>/toggle", methods=["POST"])
def toggle_list(list_id: int):
    row = lists_q.get(dbsession.get(), list_id) or abort(404)
    enabled = not row.meta["definition"].get("enabled", True)
    lists_q.set_enabled(row, enabled)
    return _commit(f"list {row.name} {'enabled' if enabled else 'disabled'}")


@bp.route("/lists/<int:list_id>/delete", methods=["POST"])
def delete_list(list_id: int):
    s = dbsession.get()
    row = lists_q.get(s, list_id) or abort(404)
    lists_q.delete(s, row)
    return _commit(f"list {row.name} deleted")
