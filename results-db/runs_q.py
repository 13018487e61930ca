"""Runs: of some kernels, as the API pages them, one with its logs and samples, those still
queued or running, and how many each job has."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Job, KernelBuild, Metric, Run, RunLog, Sample

ACTIVE = ("queued", "running")


def get(s: Session, run_id: int) -> Run | None:
    return s.get(Run, run_id)


def of_builds(s: Session, build_ids: list[int]) -> list[Run]:
    """Every run of the kernels, by iteration and then id."""
    if not build_ids:
        return []
    q = select(Run).where(Run.build_id.in_(build_ids))
    return list(s.scalars(q.order_by(Run.iteration, Run.id)))


def listing(
    s: Session,
    *,
    build_id: int | None = None,
    job_id: int | None = None,
    machine_id: int | None = None,
    status: str = "",
    offset: int = 0,
    limit: int = 100,
) -> list[Run]:
    """Runs newest first, optionally of one kernel, job, machine or status."""
    q = select(Run).order_by(Run.id.desc())
    for col, v in ((Run.build_id, build_id), (Run.job_id, job_id), (Run.machine_id, machine_id)):
        if v is not None:
            q = q.where(col == v)
    if status:
        q = q.where(Run.status == status)
    return list(s.scalars(q.offset(offset).limit(limit)))


def id_for_key(s: Session, idempotency_key: str) -> int | None:
    return s.scalar(select(Run.id).where(Run.idempotency_key == idempotency_key))


def log_names(s: Session, run_id: int, *, ordered: bool = True) -> list[str]:
    """The names of a run's stored logs (by name when ``ordered``, else as stored)."""
    q = select(RunLog.name).where(RunLog.run_id == run_id)
    if ordered:
        q = q.order_by(RunLog.name)
    return list(s.scalars(q))


def log(s: Session, run_id: int, name: str) -> RunLog | None:
    return s.scalars(
        select(RunLog).where(RunLog.run_id == run_id, RunLog.name == name)
    ).one_or_none()


def samples_by_metric(s: Session, run_id: int) -> dict[str, list[float]]:
    """{metric name: the run's samples of it in seq order}, metrics by name."""
    out: dict[str, list[float]] = {}
    rows = s.execute(
        select(Metric.name, Sample.value)
        .join(Metric, Metric.id == Sample.metric_id)
        .where(Sample.run_id == run_id)
        .order_by(Metric.name, Sample.seq)
    )
    for name, value in rows:
        out.setdefault(name, []).append(value)
    return out


def active(s: Session) -> dict[int | None, list[dict[str, Any]]]:
    """Queued and running runs per machine id, oldest first: {"run", "job", "build"} (an
    idle machine's list is empty)."""
    out: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    rows = s.execute(
        select(Run, Job, KernelBuild)
        .join(Job, Job.id == Run.job_id)
        .join(KernelBuild, KernelBuild.id == Run.build_id)
        .where(Run.status.in_(ACTIVE))
        .order_by(Run.id)
    ).all()
    for run, job, build in rows:
        out[run.machine_id].append({"run": run, "job": job, "build": build})
    return out


def count_by_job(s: Session) -> dict[int, int]:
    """{job id: its runs, any status}."""
    return dict(s.execute(select(Run.job_id, func.count()).group_by(Run.job_id)).all())


def count_of_job(s: Session, job_id: int) -> int:
    return s.scalar(select(func.count()).select_from(Run).where(Run.job_id == job_id)) or 0


def stored_keys(s: Session, keys: list[str]) -> set[str]:
    """The subset of the idempotency ``keys`` whose runs are stored."""
    if not keys:
        return set()
    return set(s.scalars(select(Run.idempotency_key).where(Run.idempotency_key.in_(keys))))


def first_of_suite(s: Session, commit: str, suite: str) -> tuple[Job, KernelBuild, Any] | None:
    """A finished run of ``suite`` on the kernel built from ``commit``: its job, build and
    machine (what a reproducer sets up again), or None."""
    from stackbench.resultsdb.models import Machine

    row = s.execute(
        select(Job, KernelBuild, Machine)
        .join(Run, Run.job_id == Job.id)
        .join(KernelBuild, KernelBuild.id == Run.build_id)
        .join(Machine, Machine.id == Run.machine_id, isouter=True)
        .where(KernelBuild.commit == commit, Job.suite == suite, Run.status == "done")
        .order_by(Run.id)
        .limit(1)
    ).first()
    return (row[0], row[1], row[2]) if row else None
