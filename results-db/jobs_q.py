"""Job and metric rows: the benchmarks with the parameters runs were stored under, and
what their samples measure."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Job, Metric


def get(s: Session, job_id: int) -> Job | None:
    return s.get(Job, job_id)


def listing(s: Session, *, by_test: bool = True) -> list[Job]:
    """Every job by suite, then (``by_test``) test, then parameters."""
    order = (Job.suite, Job.test, Job.params_key) if by_test else (Job.suite, Job.params_key)
    return list(s.scalars(select(Job).order_by(*order)))


def by_ids(s: Session, ids: list[int]) -> list[Job]:
    """The jobs of ``ids`` by suite, then parameters."""
    if not ids:
        return []
    return list(s.scalars(select(Job).where(Job.id.in_(ids)).order_by(Job.suite, Job.params_key)))


def suites(s: Session) -> list[str]:
    """The suites that have job rows, sorted."""
    return sorted(set(s.scalars(select(Job.suite).distinct())))


def metric(s: Session, metric_id: int) -> Metric | None:
    return s.get(Metric, metric_id)
