"""Regressions and their bisects as pages, the API and the report mails read them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Bisect, Job, KernelBuild, Metric, Regression, Tree


def get(s: Session, reg_id: int) -> Regression | None:
    return s.get(Regression, reg_id)


def listing(
    s: Session,
    *,
    state: str = "",
    newest_first: bool = False,
    offset: int = 0,
    limit: int = 100,
) -> list[Regression]:
    """Regressions, optionally in one state: by id, newest first; or (``newest_first``) by
    creation time, then id."""
    q = select(Regression)
    if newest_first:
        q = q.order_by(Regression.created_at.desc(), Regression.id.desc())
    else:
        q = q.order_by(Regression.id.desc())
    if state:
        q = q.where(Regression.state == state)
    return list(s.scalars(q.offset(offset).limit(limit)))


def bisects_of(s: Session, reg_id: int, *, ordered: bool = True) -> list[Bisect]:
    """The bisects of a regression, oldest first (as stored when not ``ordered``)."""
    q = select(Bisect).where(Bisect.regression_id == reg_id)
    if ordered:
        q = q.order_by(Bisect.id)
    return list(s.scalars(q))


def latest_bisect(s: Session, reg_id: int) -> Bisect | None:
    return s.scalars(
        select(Bisect).where(Bisect.regression_id == reg_id).order_by(Bisect.id.desc())
    ).first()


def names(
    s: Session, regs: list[Regression]
) -> tuple[dict[int, Job], dict[int, Metric], dict[int, KernelBuild], dict[int, Tree]]:
    """What the regressions name, by id: their jobs, metrics, good and bad kernels, and
    every tree."""
    jobs = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_({r.job_id for r in regs})))}
    mets = {
        m.id: m for m in s.scalars(select(Metric).where(Metric.id.in_({r.metric_id for r in regs})))
    }
    bids = {r.good_build_id for r in regs} | {r.bad_build_id for r in regs}
    builds = {b.id: b for b in s.scalars(select(KernelBuild).where(KernelBuild.id.in_(bids)))}
    trees = {t.id: t for t in s.scalars(select(Tree))}
    return jobs, mets, builds, trees
