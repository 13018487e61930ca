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

from stackbench.errors import StackbenchError
from stackbench.resultsdb import kernels_q, runs_q, series_q, series_runs_store, trees_q
from stackbench.web import comparisons, dbsession, filters, progress, verdicts

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from stackbench.jobs.driver.claims_map import MappedClaim
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


def runs_of(s: Session, series_id: int) -> tuple[str, list, list[series_runs_store.RoundTry]]:
    """The running attempt's k/N, every attempt, and the round tries of the latest one (a
    round whose worker was lost shows beside its next try)."""
    attempts = series_runs_store.attempts(s, series_id)
    step = series_runs_store.progress(s, [series_id]).get(series_id, "")
    last = attempts[-1].number if attempts else 0
    tries = [r for r in series_runs_store.rounds(s, series_id) if r.attempt == last]
    return step, attempts, tries


def state_key(
    x: Series,
    commits: list[progress.Commit],
    warnings: list[str],
    step: str,
    tries: list[series_runs_store.RoundTry],
) -> str:
    """Changes whenever anything shown on the series page changes state (``step``: the
    running attempt's k/N; ``tries``: its rounds)."""
    meta = x.meta or {}
    # the public comparison is made a moment after the series ends: the page refreshes for it
    last = series_runs_store.current(dbsession.get(), x.id)
    parts = [x.state, step, str(last is not None and last.report_mail is not None)]
    parts.append(str("comparison" in meta))
    parts += warnings
    parts += [f"{r.round}.{r.try_}:{r.state}:{r.worker}" for r in tries]
    parts += [
        c.state + "".join(f"{j}:{cell.state}:{len(cell.runs)}" for j, cell in c.cells.items())
        for c in commits
    ]
    return "|".join(parts)


def cover_claims(x: Series) -> list[MappedClaim]:
    """The cover letter's claims against this series' kernels: base, then each patch."""
    from stackbench.jobs.driver import claims_map

    kernels = [(x.base_commit or "", x.base_ref)]
    kernels += [(p.commit_sha or "", p.subject) for p in sorted(x.patches, key=lambda p: p.idx)]
    return claims_map.cover_claims(x.cover_letter or "", kernels)


@bp.route("/series/<int:series_id>")
def show(series_id: int):
    s = dbsession.get()
    x = load_series(series_id)
    commits = progress.commits_of(s, [x])[x.id]
    jobs = progress.jobs_for(s, commits)
    # enough rows that a series' hundreds of progress lines fold around its state changes
    events = progress.fold_events(series_q.events(s, x.id, limit=500))
    comparison, judged, covered = verdicts_of(x, commits)
    profiled = profile_of(x, commits)
    warnings = progress.service_warnings(s, x)
    step, attempts, tries = runs_of(s, x.id)
    return render_template(
        "series.html",
        cover_claims=cover_claims(x),
        series=x,
        series_progress=step,
        attempts=attempts,
        round_tries=tries,
        commits=commits,
        jobs=jobs,
        events=events,
        comparison=comparison,
        judged=judged,
        coverage=covered,
        profile=profiled,
        pending=progress.is_pending(x),
        state_key=state_key(x, commits, warnings, step, tries),
        service_warnings=warnings,
        buildbot_url=filters.httpurl(current_app.config.get("BUILDBOT_URL") or ""),
        claims=claims_of(x),
    )


def claims_of(x: Series):
    """The series' claims section (None when it kept no claims)."""
    from stackbench.resultsdb import claims_check

    return claims_check.check(dbsession.engine(), x)


@bp.route("/series/<int:series_id>/state.json")
def state(series_id: int):
    x = load_series(series_id)
    s = dbsession.get()
    commits = progress.commits_of(s, [x])[x.id]
    warnings = progress.service_warnings(s, x)
    step, _attempts, tries = runs_of(s, x.id)
    return {
        "id": x.id,
        "state": x.state,
        "state_key": state_key(x, commits, warnings, step, tries),
        "warnings": warnings,
        "commits": [{"label": c.label, "sha": c.sha, "state": c.state} for c in commits],
    }


def verdicts_of(
    x: Series, commits: list[progress.Commit]
) -> tuple[str | None, list[dict], list[dict]]:
    """The key of the series' own comparison, its verdicts per commit, labelled as the
    series labels them, each with its coverage flag (none before the series ended, or when
    its comparison cannot be computed: the page says so), and its coverage rows."""
    key = ((x.meta or {}).get("comparison") or {}).get("key")
    if not key:
        return None, [], []
    try:
        found = comparisons.lookup(dbsession.engine(), key)
    except StackbenchError:
        return key, [], []
    labels = {c.sha: c.label for c in commits if c.sha}
    judged = verdicts.by_commit(found.result)
    # copies: the result is the comparison's cached one, whose JSON names kernels its way
    covered = [dict(r) for r in found.result.get("coverage") or []]
    commit_of = {k["id"]: k["commit"] for k in found.result.get("kernels", [])}
    flags = {commit_of.get(r["kernel_id"]): r["flag"] for r in covered if r.get("flag")}
    for k in judged:
        k["label"] = labels.get(k["commit"], k["label"])
        k["coverage_flag"] = flags.get(k["commit"])
    for r in covered:
        r["kernel"] = labels.get(commit_of.get(r["kernel_id"], ""), r["kernel"])
    return key, judged, covered


def profile_of(x: Series, commits: list[progress.Commit]) -> list[dict]:
    """The profile rows of the series' own comparison, labelled as the series labels its
    commits ([] before it has one)."""
    key = ((x.meta or {}).get("comparison") or {}).get("key")
    if not key:
        return []
    try:
        found = comparisons.lookup(dbsession.engine(), key)
    except StackbenchError:
        return []
    labels = {c.sha: c.label for c in commits if c.sha}
    commit_of = {k["id"]: k["commit"] for k in found.result.get("kernels", [])}
    rows = found.result.get("profile") or []
    for r in rows:
        r["kernel"] = labels.get(commit_of.get(r["kernel_id"], ""), r["kernel"])
    return rows


@bp.route("/series/<int:series_id>/compare")
def compare(series_id: int):
    """The default comparison: the base and every commit of the series with results. A
    series that ended has its own, public (made once, see lifecycle.publish_comparison);
    before that, a comparison of the kernels so far is a new one and needs an account."""
    x = load_series(series_id)
    key = ((x.meta or {}).get("comparison") or {}).get("key")
    if not key and x.state in ("done", "failed"):
        from stackbench.jobs.driver import lifecycle

        # a series that ended before the service published comparisons
        key = lifecycle.publish_comparison(dbsession.engine(), x.id)
    if key:
        return redirect(url_for("compare.show", key=key))
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
