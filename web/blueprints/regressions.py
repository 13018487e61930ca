"""Regressions: the list, and one regression with its kernels, table and bisect."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request

from stackbench.resultsdb import regressions_q
from stackbench.web import dbsession

bp = Blueprint("regressions", __name__)


@bp.route("/regressions")
def index():
    s = dbsession.get()
    state = request.args.get("state", "")
    regs = regressions_q.listing(s, state=state, newest_first=True, limit=200)
    jobs, mets, builds, trees = regressions_q.names(s, regs)
    return render_template(
        "regressions.html",
        regs=regs,
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
    )
