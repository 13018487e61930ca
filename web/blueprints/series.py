"""Series list and series page (cover letter, patches, commit x job matrix), logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

from stackbench.resultsdb import kernels_q, runs_q, series_q, trees_q
from stackbench.web import dbsession, filters, progress

if TYPE_CHECKING:
    from stackbench.resultsdb.models import Series

bp = Blueprint("series", __name__)

STATES = ["new", "applying", "applied", "apply-failed", "building", "running", "done", "failed"]


def filtered_series(tree: str, submitter: str, state: str, page: int, size: int):
    # one more than a page: whether there is a next page
    rows = series_q.listing(
        dbsession.get(),
        tree=tree,
        submitter=submitter,
        state=state,
        offset=(page - 1) * size,
        limit=size + 1,
    )
    return rows[:size], len(rows) > size


@bp.route("/")
def index():
    f = {k: request.args.get(k, "").strip() for k in ("tree", "submitter", "state")}
    page = max(1, request.args.get("page", 1, type=int) or 1)
    series, more = filtered_series(**f, page=page, size=current_app.config["PAGE_SIZE"])
    s = dbsession.get()
    commits = progress.commits_of(s, series)
    trees = trees_q.trees(s)
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
    x = series_q.get(dbsession.get(), series_id)
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
    events = series_q.events(s, x.id, limit=50)
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
    b = kernels_q.get(dbsession.get(), build_id)
    if b is None:
        abort(404, f"no kernel build {build_id}")
    return Response(b.log or "(no build log stored)\n", mimetype="text/plain")


@bp.route("/runs/<int:run_id>")
def run(run_id: int):
    s = dbsession.get()
    r = runs_q.get(s, run_id)
    if r is None:
        abort(404, f"no run {run_id}")
    logs = runs_q.log_names(s, run_id)
    build = kernels_q.get(s, r.build_id)
    return render_template("run.html", run=r, logs=logs, build=build)


@bp.route("/runs/<int:run_id>/logs/<path:name>")
def run_log(run_id: int, name: str):
    row = runs_q.log(dbsession.get(), run_id, name)
    if row is None:
        abort(404, f"run {run_id} has no log '{name}'")
    # always text/plain: a log's content must never be interpreted as HTML
    return Response(row.content, mimetype="text/plain", headers={"Content-Disposition": "inline"})
