"""Regressions: the list, one regression with its kernels, table and bisect, and the
history of the tracked branch it was found on (its nights, change points and segments)."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request

from stackbench.jobs.tracking import history
from stackbench.resultsdb import jobs_q, regressions_q, trees_q
from stackbench.web import dbsession, plots

bp = Blueprint("regressions", __name__)


@bp.route("/regressions")
def index():
    s = dbsession.get()
    state = request.args.get("state", "")
    regs = regressions_q.listing(s, state=state, newest_first=True, limit=200)
    jobs, mets, builds, trees = regressions_q.names(s, regs)
    eng = dbsession.engine()
    tracked = {
        (r.tree_id, r.branch): history.tracked_of(eng, r.tree_id, r.branch)
        for r in regs
        if r.branch
    }
    return render_template(
        "regressions.html",
        regs=regs,
        tracked=tracked,
        jobs=jobs,
        mets=mets,
        builds=builds,
        trees=trees,
        state=state,
    )


@bp.route("/regressions/<int:reg_id>")
def show(reg_id: int):
    s = dbsession.get()
    r = regressions_q.get(s, reg_id)
    if r is None:
        abort(404, f"no regression {reg_id}")
    jobs, mets, builds, trees = regressions_q.names(s, [r])
    bisects = regressions_q.bisects_of(s, r.id)
    table = (r.meta or {}).get("table")
    return render_template(
        "regression.html",
        r=r,
        job=jobs.get(r.job_id),
        metric=mets.get(r.metric_id),
        good=builds.get(r.good_build_id),
        bad=builds.get(r.bad_build_id),
        tree=trees.get(r.tree_id),
        bisects=bisects,
        table=table,
        tracked=history.tracked_of(dbsession.engine(), r.tree_id, r.branch) if r.branch else None,
    )


@bp.route("/branches/<int:tracked_id>/history")
def branch_history(tracked_id: int):
    """One plot per job, headline metric and machine kind over the branch's nights."""
    s = dbsession.get()
    row = trees_q.branch(s, tracked_id)
    if row is None:
        abort(404, f"no tracked branch {tracked_id}")
    tree = trees_q.get(s, row.tree_id)
    shown = []
    for p in history.plots(dbsession.engine(), tracked_id):
        job = jobs_q.get(s, p.job_id)
        labels = [f"{n.index + 1} {n.head[:10]}" for n in p.nights]
        marks = [
            (night, f"regression {rid} opened at night {night + 1}") for rid, night in p.regressions
        ]
        svg = plots.history_plot(
            f"{p.metric}" + (f" on {p.kind}" if p.kind else ""),
            labels,
            p.boots,
            [(g.start, g.stop, g.mean) for g in p.segments],
            marks,
        )
        shown.append({"plot": p, "job": job, "svg": svg})
    return render_template(
        "history.html",
        row=row,
        tree=tree,
        shown=shown,
        nights=history.nights(dbsession.engine(), tracked_id),
    )
