"""Series list and series page (cover letter, patches, commit x job matrix), logs."""

from __future__ import annotations

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from sqlalchemy import select
from sqlalchemy.orm import defer, selectinload

from stackbench.resultsdb.models import Event, KernelBuild, Patch, Run, RunLog, Series, Tree
from stackbench.web import dbsession, filters, progress

bp = Blueprint("series", __name__)

STATES = ["new", "applying", "applied", "apply-failed", "building", "running", "done", "failed"]


def filtered_series(tree: str, submitter: str, state: str, page: int, size: int):
    s = dbsession.get()
    # the list shows titles and states: a patch's body and diff (megabytes for a big
    # series) and the cover letter stay in the database
    q = select(Series).options(
        defer(Series.cover_letter),
        selectinload(Series.patches).load_only(
            Patch.id,
            Patch.series_id,
            Patch.idx,
            Patch.total,
            Patch.subject,
            Patch.commit_sha,
            Patch.state,
        ),  # fmt: skip
        selectinload(Series.tree),
    )
    if tree:
        q = q.join(Tree, Tree.id == Series.tree_id).where(Tree.name == tree)
    if submitter:
        pat = "%" + submitter.replace("%", r"\%").replace("_", r"\_") + "%"
        q = q.where(Series.submitter.ilike(pat) | Series.submitter_email.ilike(pat))
    if state:
        q = q.where(Series.state == state)
    q = q.order_by(Series.created_at.desc(), Series.id.desc())
    rows = list(s.scalars(q.offset((page - 1) * size).limit(size + 1)))
    return rows[:size], len(rows) > size


@bp.route("/")
def index():
    f = {k: request.args.get(k, "").strip() for k in ("tree", "submitter", "state")}
    page = max(1, request.args.get("page", 1, type=int) or 1)
    series, more = filtered_series(**f, page=page, size=current_app.config["PAGE_SIZE"])
    s = dbsession.get()
    commits = progress.commits_of(s, series)
    trees = list(s.scalars(select(Tree).order_by(Tree.name)))
    return render_template(
        "series_list.html",
        series=series,
        commits=commits,
        trees=trees,
        states=STATES,
        f={k: v for k, v in f.items() if v},
        page=page,
        more=more,
    )


def load_series(series_id: int) -> Series:
    s = dbsession.get()
    x = s.scalars(
        select(Series)
        .where(Series.id == series_id)
        .options(selectinload(Series.patches), selectinload(Series.tree))
    ).one_or_none()
    if x is None:
        abort(404, f"no series {series_id}")
    return x


def state_key(x: Series, commits: list[progress.Commit]) -> str:
    """Changes whenever anything shown on the series page changes state."""
    parts = [x.state, str((x.meta or {}).get("progress", "")), str("report_mail" in (x.meta or {}))]
    parts += [
        c.state + "".join(f"{j}:{cell.state}:{len(cell.runs)}" for j, cell in c.cells.items())
        for c in commits
    ]
    return "|".join(parts)


@bp.route("/series/<int:series_id>")
def show(series_id: int):
    s = dbsession.get()
    x = load_series(series_id)
    commits = progress.commits_of(s, [x])[x.id]
    jobs = progress.jobs_for(s, commits)
    events = list(
        s.scalars(select(Event).where(Event.series_id == x.id).order_by(Event.id.desc()).limit(50))
    )
    return render_template(
        "series.html",
        series=x,
        commits=commits,
        jobs=jobs,
        events=events,
        pending=progress.is_pending(x),
        state_key=state_key(x, commits),
        buildbot_url=filters.httpurl(current_app.config.get("BUILDBOT_URL") or ""),
    )


@bp.route("/series/<int:series_id>/state.json")
def state(series_id: int):
    x = load_series(series_id)
    commits = progress.commits_of(dbsession.get(), [x])[x.id]
    return {
        "id": x.id,
        "state": x.state,
        "state_key": state_key(x, commits),
        "commits": [{"label": c.label, "sha": c.sha, "state": c.state} for c in commits],
    }


@bp.route("/series/<int:series_id>/compare")
def compare(series_id: int):
    """The default comparison: the base and every commit of the series that has a kernel."""
    x = load_series(series_id)
    commits = progress.commits_of(dbsession.get(), [x], with_runs=False)[x.id]
    refs = [f"#{c.build.id}" for c in commits if c.build is not None]
    if not refs:
        abort(404, "this series has no kernels yet: nothing to compare")
    return redirect(url_for("compare.create", k=refs))


@bp.route("/builds/<int:build_id>/log")
def build_log(build_id: int):
    b = dbsession.get().get(KernelBuild, build_id)
    if b is None:
        abort(404, f"no kernel build {build_id}")
    return Response(b.log or "(no build log stored)\n", mimetype="text/plain")


@bp.route("/runs/<int:run_id>")
def run(run_id: int):
    s = dbsession.get()
    r = s.get(Run, run_id)
    if r is None:
        abort(404, f"no run {run_id}")
    logs = list(s.scalars(select(RunLog.name).where(RunLog.run_id == run_id).order_by(RunLog.name)))
    build = s.get(KernelBuild, r.build_id)
    return render_template("run.html", run=r, logs=logs, build=build)


@bp.route("/runs/<int:run_id>/logs/<path:name>")
def run_log(run_id: int, name: str):
    row = (
        dbsession.get()
        .scalars(select(RunLog).where(RunLog.run_id == run_id, RunLog.name == name))
        .one_or_none()
    )
    if row is None:
        abort(404, f"run {run_id} has no log '{name}'")
    # always text/plain: a log's content must never be interpreted as HTML
    return Response(row.content, mimetype="text/plain", headers={"Content-Disposition": "inline"})
