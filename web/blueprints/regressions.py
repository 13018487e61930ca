"""Regressions: the list, and one regression with its kernels, table and bisect."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request
from sqlalchemy import select

from stackbench.resultsdb.models import Bisect, Job, KernelBuild, Metric, Regression, Tree
from stackbench.web import dbsession

bp = Blueprint("regressions", __name__)


def _names(s, regs):
    jobs = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_({r.job_id for r in regs})))}
    mets = {
        m.id: m for m in s.scalars(select(Metric).where(Metric.id.in_({r.metric_id for r in regs})))
    }
    bids = {r.good_build_id for r in regs} | {r.bad_build_id for r in regs}
    builds = {b.id: b for b in s.scalars(select(KernelBuild).where(KernelBuild.id.in_(bids)))}
    trees = {t.id: t for t in s.scalars(select(Tree))}
    return jobs, mets, builds, trees


@bp.route("/regressions")
def index():
    s = dbsession.get()
    q = select(Regression).order_by(Regression.created_at.desc(), Regression.id.desc())
    state = request.args.get("state", "")
    if state:
        q = q.where(Regression.state == state)
    regs = list(s.scalars(q.limit(200)))
    jobs, mets, builds, trees = _names(s, regs)
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
    r = s.get(Regression, reg_id)
    if r is None:
        abort(404, f"no regression {reg_id}")
    jobs, mets, builds, trees = _names(s, [r])
    bisects = list(
        s.scalars(select(Bisect).where(Bisect.regression_id == r.id).order_by(Bisect.id))
    )
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
