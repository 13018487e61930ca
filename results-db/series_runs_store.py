"""A series' attempts, their batches of rounds and each round's tries: the typed bookkeeping
of who runs a series and how far it got. The driver (the dispatcher, the pipeline and
``lifecycle``) writes it through these functions and nothing else does; the series page,
``demo`` and the tests read it through the query functions at the end. Every function takes
the caller's session and leaves committing to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Series, SeriesAttempt, SeriesBatch, SeriesRound

# an executor that is not the dispatcher's: a `demo` or `submit` running the series itself
FOREGROUND = "foreground"
# a series stored for a client that runs it or hands it over itself: not the dispatcher's
WAITING = "waiting"
NOT_DISPATCHED = (FOREGROUND, WAITING)
# the plan's columns: a new attempt starts with the one before's (stackbench.jobs.driver.
# intake.Options checks them; None is the default)
PLAN = ("jobs", "runs", "max_boots", "adaptive", "cpus", "mem_mb", "accel", "check_claims")


def current(s: Session, series_id: int) -> SeriesAttempt | None:
    """The series' latest attempt (open or ended), None before its first hand-over."""
    return s.scalars(
        select(SeriesAttempt)
        .where(SeriesAttempt.series_id == series_id)
        .order_by(SeriesAttempt.number.desc())
        .limit(1)
    ).first()


def begin(
    s: Session,
    series_id: int,
    *,
    source: str,
    executor: str = "",
    report: bool = False,
    **plan: Any,
) -> SeriesAttempt:
    """A new attempt numbered after the last, with the last one's plan and these ``plan``
    columns over it (a value of None keeps the last one's); ``report``: a report mail is
    due when it ends. An attempt still open is ended ``superseded`` (a series handed over
    again before it finished), except one ``waiting`` for its client: that one is taken."""
    last = current(s, series_id)
    if last is not None and last.ended is None and last.executor == WAITING:
        row = last
        row.source, row.executor = source[:32], executor
    else:
        if last is not None and last.ended is None:
            last.ended, last.outcome = _now(), "superseded"
        row = SeriesAttempt(
            series_id=series_id,
            number=(last.number if last is not None else 0) + 1,
            source=source[:32],
            executor=executor,
            **{k: getattr(last, k) for k in PLAN if last is not None},
        )
        s.add(row)
    for name, value in plan.items():
        if name not in PLAN:
            raise TypeError(f"{name}: not a column of the plan ({', '.join(PLAN)})")
        if value is not None:
            setattr(row, name, list(value) if name == "jobs" else value)
    row.report_due = row.report_due or report
    row.report_mail = None if report else row.report_mail
    s.flush()
    return row


def note(s: Session, series_id: int, **flags: Any) -> SeriesAttempt | None:
    """Set the dispatcher's flags (``report_mail``, ``host_fault``, ``fetched``) on the
    series' latest attempt; the attempt (None when the series has none)."""
    row = current(s, series_id)
    if row is None:
        return None
    for name, value in flags.items():
        if name not in ("report_mail", "host_fault", "fetched"):
            raise TypeError(f"series_attempt has no flag {name}")
        setattr(row, name, value)
    return row


def take(s: Session, series_id: int, executor: str, **dispatch: Any) -> SeriesAttempt:
    """The open attempt taken by ``executor`` with what the dispatcher follows it by
    (``submission``, ``buildset``, ``buildbot``, ``since_build``, ``first_run``, ``kernels``,
    ``benchmarks``); a series run with no hand-over (a foreground client) gets one here."""
    row = current(s, series_id)
    if row is None or row.ended is not None:
        row = begin(s, series_id, source=executor)
    row.executor = executor
    for name, value in dispatch.items():
        if not hasattr(SeriesAttempt, name):
            raise TypeError(f"series_attempt has no column {name}")
        setattr(row, name, value)
    return row


def set_progress(s: Session, series_id: int, progress: str) -> bool:
    """The open attempt's ``k/N``; whether it changed (False too when none is open)."""
    row = current(s, series_id)
    if row is None or row.ended is not None or row.progress == progress[:32]:
        return False
    row.progress = progress[:32]
    return True


def end(s: Session, series_id: int, outcome: str) -> None:
    """The open attempt, if any, ended with ``outcome`` (done, failed, apply-failed)."""
    row = current(s, series_id)
    if row is not None and row.ended is None:
        row.ended, row.outcome = _now(), outcome[:32]


def add_batch(
    s: Session,
    attempt: SeriesAttempt,
    key: str,
    plan: dict[str, Any],
    rounds: list[int],
    *,
    buildset: int | None = None,
    boots: int = 0,
    have: int | None = None,
    stored: int | None = None,
    offsets: dict[str, int] | None = None,
) -> SeriesBatch:
    """A batch of ``rounds`` handed over at once, each round planned and on no worker yet."""
    batch = SeriesBatch(
        key=key,
        buildset=buildset,
        boots=boots,
        have=have,
        stored=stored,
        offsets=offsets or {},
        plan=plan,
    )
    attempt.batches.append(batch)
    s.flush()
    for r in sorted(set(rounds)):
        s.add(SeriesRound(batch_id=batch.id, round=r, try_=1))
    s.flush()
    return batch


def record_round(
    s: Session, attempt: SeriesAttempt, rnd: int, buildid: int | None, worker: str, state: str
) -> None:
    """What the executor says of a try of round ``rnd`` (its build ``buildid``; None for a
    round run in-process): the planned row takes the first build; a later build of the same
    round (its worker was lost) is the next try, so the page shows the lost one and no round
    counts twice."""
    rows = s.scalars(
        select(SeriesRound)
        .join(SeriesBatch)
        .where(SeriesBatch.attempt_id == attempt.id, SeriesRound.round == rnd)
        .order_by(SeriesBatch.id.desc(), SeriesRound.try_)
    ).all()
    if not rows:
        return  # a round of no batch of this attempt: not ours to record
    batch_id = rows[0].batch_id
    mine = [r for r in rows if r.batch_id == batch_id]
    row = next((r for r in mine if r.buildid == buildid), None)
    row = row or next((r for r in mine if r.buildid is None), None)
    if row is None:
        row = SeriesRound(batch_id=batch_id, round=rnd, try_=max(r.try_ for r in mine) + 1)
        s.add(row)
    row.buildid, row.worker, row.state = buildid, worker, state


def _now() -> datetime:
    return datetime.now(UTC)


# ---- readers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    """How far the series' latest attempt got, as the dispatcher follows it."""

    number: int
    executor: str
    open: bool
    submission: str = ""
    buildset: int | None = None
    buildbot: str = ""
    since_build: int = 0
    first_run: int = 0
    kernels: int = 0
    benchmarks: int = 0
    batches: int = 0  # batches of rounds handed over so far
    have: int | None = None  # rounds the last adaptive look counted
    stored: int | None = None  # boots the last adaptive look found
    offsets: dict[str, int] = field(default_factory=dict)


def dispatch(s: Session, series_id: int) -> Dispatch | None:
    """The latest attempt's bookkeeping; None before the first hand-over."""
    row = current(s, series_id)
    if row is None:
        return None
    last = row.batches[-1] if row.batches else None
    return Dispatch(
        number=row.number,
        executor=row.executor,
        open=row.ended is None,
        submission=row.submission,
        buildset=row.buildset,
        buildbot=row.buildbot,
        since_build=row.since_build,
        first_run=row.first_run,
        kernels=row.kernels,
        # once rounds are planned, the boots of every batch; before, the hand-over's estimate
        benchmarks=sum(b.boots for b in row.batches) if row.batches else row.benchmarks,
        batches=len(row.batches),
        have=last.have if last is not None else None,
        stored=last.stored if last is not None else None,
        offsets=dict(last.offsets) if last is not None else {},
    )


def executor(s: Session, series_id: int) -> str:
    """Who runs the series' open attempt ("" when nobody has taken it, or none is open)."""
    row = current(s, series_id)
    return row.executor if row is not None and row.ended is None else ""


def progress(s: Session, series_ids: list[int]) -> dict[int, str]:
    """{series: the ``k/N`` of its open attempt} (a series not running has none)."""
    if not series_ids:
        return {}
    rows = s.execute(
        select(SeriesAttempt.series_id, SeriesAttempt.progress)
        .where(SeriesAttempt.series_id.in_(series_ids), SeriesAttempt.ended.is_(None))
        .order_by(SeriesAttempt.number)
    ).all()
    return {sid: p for sid, p in rows if p}


class Active(NamedTuple):
    """A series the dispatcher works on, with what it decides by: its attempt's executor
    and flags, and where the series came from (a push's commits are fetched first)."""

    id: int
    state: str
    executor: str
    source: str
    host_fault: dict[str, Any] | None
    fetched: bool | None


def active(s: Session, states: tuple[str, ...]) -> list[Active]:
    """The series in these states whose latest attempt is open and neither a foreground
    client's nor waiting for one, oldest first: what the dispatcher works on."""
    latest = (
        select(SeriesAttempt.series_id, func.max(SeriesAttempt.number).label("number"))
        .group_by(SeriesAttempt.series_id)
        .subquery()
    )
    rows = s.execute(
        select(
            Series.id,
            Series.state,
            SeriesAttempt.executor,
            Series.source,
            SeriesAttempt.host_fault,
            SeriesAttempt.fetched,
        )
        .join(SeriesAttempt, SeriesAttempt.series_id == Series.id)
        .join(
            latest,
            (latest.c.series_id == SeriesAttempt.series_id)
            & (latest.c.number == SeriesAttempt.number),
        )
        .where(Series.state.in_(states))
        .where(SeriesAttempt.ended.is_(None), SeriesAttempt.executor.not_in(NOT_DISPATCHED))
        .order_by(Series.id)
    ).all()
    return [Active(*r) for r in rows]


def attempts(s: Session, series_id: int) -> list[SeriesAttempt]:
    """Every attempt of the series, first first (the series page lists them)."""
    return list(
        s.scalars(
            select(SeriesAttempt)
            .where(SeriesAttempt.series_id == series_id)
            .order_by(SeriesAttempt.number)
        )
    )


def plans(s: Session, series_id: int) -> list[dict[str, Any]]:
    """The record of every plan the series' rounds followed, across its attempts, in order."""
    return list(
        s.scalars(
            select(SeriesBatch.plan)
            .join(SeriesAttempt)
            .where(SeriesAttempt.series_id == series_id)
            .order_by(SeriesBatch.id)
        )
    )


@dataclass(frozen=True)
class RoundTry:
    attempt: int
    batch: str
    round: int
    try_: int
    worker: str
    state: str
    buildid: int | None


def rounds(s: Session, series_id: int) -> list[RoundTry]:
    """Every try of every round of the series, in attempt, round and try order."""
    rows = s.execute(
        select(SeriesAttempt.number, SeriesBatch.key, SeriesRound)
        .join(SeriesBatch, SeriesBatch.id == SeriesRound.batch_id)
        .join(SeriesAttempt, SeriesAttempt.id == SeriesBatch.attempt_id)
        .where(SeriesAttempt.series_id == series_id)
        .order_by(SeriesAttempt.number, SeriesRound.round, SeriesRound.try_)
    ).all()
    return [RoundTry(n, key, r.round, r.try_, r.worker, r.state, r.buildid) for n, key, r in rows]
