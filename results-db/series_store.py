"""Series, their patches and events as the jobs (the pipeline, the dispatcher, the front
doors' creation, the watching CLI) read and write them. Every function takes the caller's
session (:func:`stackbench.resultsdb.db.session`) and leaves committing to it; what a state
means and when an event is due is the caller's business, these only store it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Event, Machine, Patch, Run, Series, SeriesAttempt


def get(s: Session, series_id: int, *, lock: bool = False) -> Series | None:
    """The series; ``lock``: its row locked until the transaction ends (a read-modify-write
    that concurrent writers must not interleave with)."""
    return s.get(Series, series_id, with_for_update=lock or None)


def by_key(s: Session, idempotency_key: str) -> Series | None:
    """The series stored under this submission key."""
    return s.scalars(select(Series).where(Series.idempotency_key == idempotency_key)).one_or_none()


def add_series(s: Session, *, patches: list[dict[str, Any]], **columns: Any) -> tuple[Series, bool]:
    """A new series with these columns and its patches (their columns, in stack order),
    flushed, and True. When a concurrent writer stored the same ``idempotency_key`` first,
    that series and False; a savepoint keeps the caller's transaction usable."""
    series = Series(**columns)
    for p in patches:
        series.patches.append(Patch(**p))
    try:
        with s.begin_nested():
            s.add(series)
            s.flush()
    except IntegrityError:
        winner = by_key(s, columns["idempotency_key"])
        if winner is None:
            raise
        return winner, False
    return series, True


def tree_id(s: Session, series_id: int) -> int | None:
    return s.scalars(select(Series.tree_id).where(Series.id == series_id)).one_or_none()


def patch_for_commit(s: Session, series_id: int, commit: str) -> Patch | None:
    """The series' patch applied as this commit."""
    return s.scalars(
        select(Patch).where(Patch.series_id == series_id, Patch.commit_sha == commit)
    ).first()


def patch_subjects(s: Session, series_id: int) -> dict[str | None, str]:
    """{commit: subject} of the series' patches."""
    return {
        p.commit_sha: p.subject
        for p in s.scalars(select(Patch).where(Patch.series_id == series_id))
    }


def unreported(s: Session) -> list[int]:
    """Finished series (done or failed) whose latest attempt owes a report mail and has
    none noted yet."""
    latest = (
        select(SeriesAttempt.series_id, func.max(SeriesAttempt.number).label("number"))
        .group_by(SeriesAttempt.series_id)
        .subquery()
    )
    return list(
        s.scalars(
            select(Series.id)
            .join(SeriesAttempt, SeriesAttempt.series_id == Series.id)
            .join(
                latest,
                (latest.c.series_id == SeriesAttempt.series_id)
                & (latest.c.number == SeriesAttempt.number),
            )
            .where(Series.state.in_(("done", "failed")))
            .where(SeriesAttempt.report_due, SeriesAttempt.report_mail.is_(None))
            .order_by(Series.id)
        )
    )


def state_of(s: Session, series_id: int) -> str:
    """The series' state (it must exist)."""
    return s.execute(select(Series.state).where(Series.id == series_id)).scalar_one()


def save(
    row: Series,
    *,
    error: str | None = None,
    meta: dict[str, Any] | None = None,
    base_commit: str | None = None,
) -> None:
    """Set the fields given; ``meta`` replaces the series' meta as a whole. The state is
    not one of them: stackbench.jobs.driver.lifecycle is its one writer, through its table
    of moves."""
    if base_commit is not None:
        row.base_commit = base_commit
    if error is not None:
        row.error = error
    if meta is not None:
        row.meta = meta


def save_patch(
    p: Patch,
    *,
    commit_sha: str | None,
    state: str,
    error: str,
    committed: dict[str, str] | None = None,
) -> None:
    """A patch's apply outcome: its commit (None when not applied), state and git's error;
    ``committed``: the commit's author, author_email, date and subject."""
    p.commit_sha = commit_sha
    p.state = state
    p.error = error
    facts = committed or {}
    p.commit_author = facts.get("author")
    p.commit_author_email = facts.get("author_email")
    p.commit_date = facts.get("date")
    p.commit_subject = facts.get("subject")


def merge_meta(row: Series, **values: Any) -> dict[str, Any]:
    """Merge VALUES into the series' meta (a new dict, so the change is seen and stored);
    the merged meta."""
    row.meta = {**(row.meta or {}), **values}
    return dict(row.meta)


def add_event(s: Session, series_id: int | None, subject: str, state: str, message: str) -> None:
    s.add(Event(series_id=series_id, subject=subject, state=state, message=message))


def events_after(s: Session, series_id: int, after: int) -> list[tuple[int, str]]:
    """(id, message) of the series' events after event id ``after``, oldest first."""
    rows = s.execute(
        select(Event.id, Event.message)
        .where(Event.series_id == series_id, Event.id > after)
        .order_by(Event.id)
    ).all()
    return [(e.id, e.message) for e in rows]


def last_event_id(s: Session, series_id: int) -> int:
    """The series' newest event id, 0 when it has none."""
    return int(
        s.scalar(select(Event.id).where(Event.series_id == series_id).order_by(Event.id.desc()))
        or 0
    )


def latest_machine(s: Session, series_id: int) -> str | None:
    """The machine the series' latest boot ran on (of the in-process pipeline or of a
    Buildbot step), None before any run."""
    return s.scalars(
        select(Machine.name)
        .join(Run, Run.machine_id == Machine.id)
        .where(Run.series_id == series_id)
        .order_by(Run.id.desc())
        .limit(1)
    ).first()


def subjob_job_specs(s: Session, series_id: int) -> dict[str, str]:
    """{sub-job: the job spec it came from} of the series' runs (an executor records the
    spec it ran in each run's meta)."""
    rows = s.execute(
        select(Run.meta["subjob"].astext, Run.meta["job_spec"].astext)
        .where(Run.series_id == series_id, Run.meta.has_key("job_spec"))
        .distinct()
    ).all()
    return {str(sj): str(spec) for sj, spec in rows if sj and spec}
