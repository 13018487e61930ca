"""The life of a series, owned by the service: the states it goes through from the intake
(stackbench.jobs.driver.intake, where every front door stores one) until the dispatcher
(stackbench.jobs.driver.dispatch) finishes it.

    new -> applying -> applied -> building k/N -> running k/M -> done | failed (reason)
               \\-> apply-failed

``series.state`` holds the word (``building``), what filters and badges use; the ``k/N``
part is the running attempt's. Who runs the series and how far it got (each hand-over's
attempt, its progress, its batches of rounds, each round's try) is typed, in
``stackbench.resultsdb.series_runs_store``. This module is the one writer of the state
(:func:`set_state`, :func:`record_apply`, :func:`hand_over`, :func:`restart`, all through
``_move``): every move is checked against :data:`MOVES`, one that it does not allow raises
StateError and writes nothing, and a final state ends the attempt.

Nothing is built when a series is submitted: the dispatcher that ``stackbench up`` runs
picks it up, or the client that stored it hands it over (:func:`hand_over`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import NotFoundError, StackbenchError
from stackbench.jobs.driver import claims_plan
from stackbench.resultsdb import (
    comparisons_q,
    db,
    kernels_store,
    series_runs_store,
    series_store,
    signals,
)

if TYPE_CHECKING:
    from stackbench.patches.apply import ApplyResult

log = logging.getLogger(__name__)

PENDING = ("new", "applying", "applied", "building", "running")
FINAL = ("done", "failed", "apply-failed")
# the dispatcher LISTENs here so a submission starts at once, not at its next look
CHANNEL = "stackbench_series"


def hand_over(
    eng: Engine,
    series_id: int,
    *,
    source: str,
    fresh: bool = False,
    jobs: list[str] | None = None,
    runs: int | None = None,
) -> str:
    """Give a stored series to the dispatcher, once: what a watching client (``demo``) does
    instead of running it. Returns what happened: ``attached`` (already handed over and not
    finished, even when ``fresh``: nothing is sent again), ``finished`` (done, and not
    ``fresh``), ``apply-failed``
    or ``handed-over``. A failed series, a ``fresh`` one (a rerun or a new plan) and one a
    foreground client ran are handed over again under a new attempt, so the dispatcher's
    submission key is new and the master gets one new buildset. ``jobs`` and ``runs``
    replace the series' own for this and later attempts (checked by the caller as a
    submission's are: stackbench.jobs.driver.intake.Options)."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        last = series_runs_store.current(s, series_id)
        ours = (
            last is not None
            and last.ended is None
            and last.executor not in series_runs_store.NOT_DISPATCHED
        )
        if row.state == "apply-failed":
            return "apply-failed"
        if row.state == "done" and not fresh:
            return "finished"
        if row.state in PENDING and ours:
            return "attached"  # a rerun of a series still running waits for it
        start = _start_state(row)
        check_move(series_id, row.state, start)
        attempt = series_runs_store.begin(
            s, series_id, source=source, report=True, jobs=jobs or None, runs=runs
        )
        _move(s, row, start, error="")
        series_store.add_event(
            s,
            series_id,
            f"series:{series_id}",
            row.state,
            f"handed to the dispatcher via {source} (attempt {attempt.number})",
        )
        notify(s)
    return "handed-over"


def hand_over_line(
    eng: Engine, series_id: int, *, jobs: list[str] | None = None, runs: int | None = None
) -> tuple[str, bool]:
    """``stackbench buildbot submit``: hand the series over again (:func:`hand_over`, a new
    attempt) and say what happened; False when there is nothing to run."""
    how = hand_over(eng, series_id, source="buildbot submit", fresh=True, jobs=jobs, runs=runs)
    if how == "apply-failed":
        return f"series {series_id} did not apply: nothing to build (its page says why)", False
    if how == "attached":
        return f"series {series_id} is still running: it goes on, nothing sent again", True
    with db.session(eng) as s:
        working = signals.lock_held(s, signals.DISPATCHER_LOCK)
    who = "the dispatcher submits it to Buildbot" if working else (
        "no dispatcher works on this database now: 'stackbench up' starts one")  # fmt: skip
    return f"series {series_id} handed to the dispatcher; {who}", True


def notify(s: Session) -> None:
    """Wake the dispatcher (delivered when the transaction commits)."""
    signals.notify(s, CHANNEL)


# ---- state ----------------------------------------------------------------------------------


# Every move a series may make (KernelCI-style): its state -> the states it may go to, read
# from the writers: the apply (dispatcher, in-process run), the journey's hand-over, batches
# and end, a hand-over by a front door, and a step failing. A pending state may be stated
# again (progress, a step restarted after its dispatcher stopped); a series another runner
# left mid-way may be started again (building or running -> applying or new / applied). A
# finished series is left only by a hand-over or a rerun, which start it again from ``new``
# or ``applied``; ``failed`` may be stated again with a later reason; a series that did not
# apply stays so (its next version is a series of its own).
MOVES: dict[str, frozenset[str]] = {
    "new": frozenset({"new", "applying", "applied", "apply-failed", "failed"}),
    "applying": frozenset({"applying", "applied", "apply-failed", "failed", "new"}),
    "applied": frozenset({"applied", "applying", "building", "failed", "new"}),
    "building": frozenset({"building", "running", "done", "failed", "applying", "applied", "new"}),
    "running": frozenset({"running", "building", "done", "failed", "applying", "applied", "new"}),
    "done": frozenset({"new", "applied"}),
    "failed": frozenset({"failed", "new", "applied"}),
    "apply-failed": frozenset(),
}


class StateError(StackbenchError):
    """A move :data:`MOVES` does not allow; nothing was written."""


def check_move(series_id: int, old: str, new: str) -> None:
    """Raise StateError unless a series in ``old`` may move to ``new``."""
    if new not in MOVES:
        raise StateError(f"series {series_id}: no state {new!r} (states: {', '.join(MOVES)})")
    if new not in MOVES.get(old, frozenset()):
        allowed = ", ".join(sorted(MOVES.get(old, ()))) or "none: it stays so"
        raise StateError(f"series {series_id}: {old} cannot move to {new} (from {old}: {allowed})")


def _move(
    s: Session,
    row: series_store.Series,
    state: str,
    *,
    error: str | None = None,
    progress: str | None = None,
    meta: dict[str, Any] | None = None,
) -> bool:
    """THE writer of ``series.state`` (the row locked by the caller): the move checked
    against MOVES, the attempt's ``k/N``, and a final state ending the open attempt with it
    as its outcome. Whether the state or its progress changed (an event is due)."""
    check_move(row.id, row.state, state)
    moved = progress is not None and series_runs_store.set_progress(s, row.id, progress)
    changed = row.state != state or moved
    row.state = state
    series_store.save(row, error=None if error is None else error[:4000], meta=meta)
    if state in FINAL:
        series_runs_store.end(s, row.id, state)
    return changed


def _start_state(row: series_store.Series) -> str:
    """Where a series handed over again starts: applied when every patch has its commit."""
    applied = bool(row.base_commit) and all(p.commit_sha for p in row.patches)
    return "applied" if applied else "new"


def set_state(
    eng: Engine,
    series_id: int,
    state: str,
    message: str,
    *,
    error: str | None = None,
    progress: str | None = None,
    meta: dict[str, Any] | None = None,
    record: Callable[[Session], Any] | None = None,
) -> None:
    """Move a series to ``state`` with an event; ``progress`` is the ``k/N`` part.
    ``record`` writes the attempt's bookkeeping (series_runs_store) in the same transaction,
    so a state and the hand-over or batch that explains it are never stored one without
    the other. A final state ends the open attempt with it as its outcome. A move MOVES
    does not allow raises StateError and writes nothing."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        check_move(series_id, row.state, state)
        if record is not None:
            record(s)
        new_meta = {**row.meta, **meta} if meta else None
        if _move(s, row, state, error=error, progress=progress, meta=new_meta):
            series_store.add_event(s, series_id, f"series:{series_id}", state, message[:4000])


def restart(eng: Engine, series_id: int, message: str) -> str:
    """A finished series run again here (a rerun, or a failed one retried): back to where
    a hand-over starts it (``new`` or ``applied``); its state after."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        if row.state in FINAL:
            state = _start_state(row)
            _move(s, row, state, error="")
            series_store.add_event(s, series_id, f"series:{series_id}", state, message[:4000])
        return row.state


def resubmit(eng: Engine, series_id: int, message: str, *, executor: str = "") -> str:
    """A series whose executor will never finish its work (a build request the master
    holds claimed with no build) handed over again: its open attempt ends ``resubmitted``
    and a new one starts where a hand-over starts it, so it is submitted anew under a new
    submission key (``executor``: a foreground caller's, which the dispatcher leaves to
    it). A series no longer pending is left alone. Its state after."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        if row.state not in PENDING:
            return row.state
        last = series_runs_store.current(s, series_id)
        series_runs_store.end(s, series_id, "resubmitted")
        # the attempt goes on with the one it replaces: its report, when one was due
        attempt = series_runs_store.begin(
            s, series_id, source="resubmitted", executor=executor,
            report=bool(last is not None and last.report_due),
        )  # fmt: skip
        _move(s, row, _start_state(row), error="")
        series_store.add_event(s, series_id, f"series:{series_id}", row.state,
                               f"{message} (attempt {attempt.number})"[:4000])  # fmt: skip
        notify(s)
        return row.state


def record_apply(s: Session, series_id: int, result: ApplyResult) -> series_store.Series:
    """An apply's outcome: the patches' commits and errors as
    :func:`stackbench.patches.store.apply_outcome` stores them, and the series moved to
    ``applied`` or ``apply-failed`` with the event that says why."""
    from stackbench.patches.store import apply_outcome

    row = series_store.get(s, series_id, lock=True)
    if row is None:
        raise NotFoundError(f"no series {series_id}")
    outcome = apply_outcome(s, series_id, result)
    if result.ok:
        s.flush()
        claims_plan.remap_kernels(s, row)  # the claims' columns are commits now
    # a move MOVES refuses raises here, and the caller's transaction drops the patches' rows
    _move(s, row, outcome.state, error=outcome.error)
    series_store.add_event(s, series_id, f"series:{series_id}", row.state, outcome.message)
    s.flush()
    return row


def update_meta(eng: Engine, series_id: int, **values: Any) -> dict[str, Any]:
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        return series_store.merge_meta(row, **values)


def event(eng: Engine, series_id: int, subject: str, state: str, message: str) -> None:
    with db.session(eng) as s:
        series_store.add_event(s, series_id, subject, state, message[:4000])


# ---- the series' own comparison --------------------------------------------------------------


def publish_comparison(eng: Engine, series_id: int) -> str | None:
    """The comparison of the base and every commit with results, made once when the series
    ends and public at /compare/<key> (nobody's quota); its key, also kept in
    ``series.meta["comparison"]``; None when fewer than two kernels have results."""
    ids = []
    with db.session(eng) as s:
        for k in kernels_store.series_kernels(s, series_id):
            if kernels_store.done_run_count(s, k.id):
                ids.append(k.id)
    if len(ids) < 2:
        return None
    with db.session(eng) as s:
        key = comparisons_q.publish(s, ids).key
    if (update_meta(eng, series_id).get("comparison") or {}).get("key") != key:
        update_meta(eng, series_id, comparison={"key": key, "builds": ids})
        event(eng, series_id, f"series:{series_id}", "compared",
              f"comparison of the base and every commit: /compare/{key}")  # fmt: skip
    return key


# ---- the report mail ------------------------------------------------------------------------


def queue_report(eng: Engine, series_id: int) -> str:
    """Queue the series' report mail (robot layout, threaded under the cover letter) and
    note it on the series; the line to show."""
    from stackbench.jobs.benchmarks import reproducer
    from stackbench.mail import config, reports

    cfg = config.from_env()
    mail = reports.series_report(eng, series_id, cfg)  # to whom: reports.recipients
    try:
        found = reproducer.for_series(eng, series_id, mail.commit)
    except Exception as exc:  # noqa: BLE001 - the report goes without it, never not at all
        log.warning("series %s: no reproducer: %s", series_id, exc)
        found = None
    if found is not None:
        mail.attachments.append((found.name, found.text))
        mail.body = mail.body.replace(
            reports.SIGNATURE,
            f"\nTo reproduce without stackbench: sh {found.name} BZIMAGE (attached).\n"
            + reports.SIGNATURE,
            1,
        )
    if not mail.to:
        with db.session(eng) as s:
            row = series_store.get(s, series_id)
            posted = isinstance((row.meta or {}).get("list"), dict)
        why = ("no recipient: the list's configuration names no report address" if posted
               else "no recipient: the submitting account has no verified address and "
               "STACKBENCH_MAIL_LIST is not set")  # fmt: skip
        note = {"to": [], "why": why}
        with db.session(eng) as s:
            series_runs_store.note(s, series_id, report_mail=note)
        return f"report mail not queued: {note['why']}"
    mail_id = reports.queue(eng, mail)
    with db.session(eng) as s:
        series_runs_store.note(s, series_id, report_mail={"id": mail_id, "to": mail.to})
    line = f"report mail #{mail_id} queued to {', '.join(mail.to)}"
    event(eng, series_id, f"series:{series_id}", "mail", line)
    return line


def report_apply_failed(eng: Engine, series_id: int) -> str | None:
    """A series from a mailing list whose patches did not apply gets a short reply in its
    thread only when the list's configuration asks for one (``reports.apply_failed_reply``);
    the line to log, or None when nothing was queued."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id)
        posted = (row.meta or {}).get("list") if row is not None else None
        if row is None or row.state != "apply-failed" or not isinstance(posted, dict):
            return None
        attempt = series_runs_store.current(s, series_id)
        if not posted.get("apply_failed_reply") or (attempt and attempt.report_mail):
            return None
    return queue_report(eng, series_id)
