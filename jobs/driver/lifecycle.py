"""The life of a series, owned by the service: how every front door creates one, and the
states it goes through until the dispatcher (stackbench.jobs.driver.dispatch) finishes it.

    new -> applying -> applied -> building k/N -> running k/M -> done | failed (reason)
               \\-> apply-failed

``series.state`` holds the word (``building``), what filters and badges use; the ``k/N``
part is the running attempt's. Who runs the series and how far it got (each hand-over's
attempt, its progress, its batches of rounds, each round's try) is typed, in
``stackbench.resultsdb.series_runs_store``. This module is the one writer of the state
(:func:`set_state`, :func:`record_apply`, :func:`hand_over`, :func:`restart`, all through
``_move``): every move is checked against :data:`MOVES`, one that it does not allow raises
StateError and writes nothing, and a final state ends the attempt.

CLI ``submit``, the web form, ``POST /api/series`` and ``git push`` (HTTP and SSH) all go
through :func:`check` (one validation: tree, base, jobs with overrides, runs) and
:func:`create` (store, record who and how, hand over to the dispatcher). Nothing is built in
the request: the dispatcher that ``stackbench up`` runs picks the series up.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.resultsdb import (
    accounts_q,
    claims_store,
    comparisons_q,
    db,
    kernels_store,
    series_runs_store,
    series_store,
    signals,
    storable,
    trees_q,
)

if TYPE_CHECKING:
    from stackbench.patches.apply import ApplyResult

log = logging.getLogger(__name__)

MAX_RUNS = 30
DEFAULT_RUNS = 3
PENDING = ("new", "applying", "applied", "building", "running")
FINAL = ("done", "failed", "apply-failed")
# the dispatcher LISTENs here so a submission starts at once, not at its next look
CHANNEL = "stackbench_series"
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,199}$")


class SubmissionErrors(StackbenchError):
    """What is wrong with a submission, per field (the web form shows each beside its
    field; the CLI and git print the joined line)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


@dataclass
class Checked:
    tree: str
    base: str
    jobs: list[str] | None  # None: the default jobs
    runs: int | None  # None: the default runs


def check_runs(raw: Any) -> int:
    """Runs of every job per kernel: a whole number from 1 to MAX_RUNS."""
    try:
        runs = int(str(raw).strip())
    except ValueError:
        raise InputError("runs", f"not a number: {str(raw)[:20]!r}") from None
    if not 1 <= runs <= MAX_RUNS:
        raise InputError("runs", f"must be between 1 and {MAX_RUNS}, not {runs}")
    return runs


def check_jobs(specs: list[str]) -> list[str]:
    """Job specs with optional overrides (``thpscale[madvise=false]``), each validated
    against its definition's schema; the cleaned specs."""
    from stackbench.jobs.driver import pipeline

    out = []
    for spec in specs:
        spec = str(spec).strip()
        if not spec:
            continue
        try:
            pipeline.parse_job_spec(spec)
        except StackbenchError as exc:
            raise InputError(f"job {spec[:60]!r}", _short(exc)) from None
        out.append(spec)
    return out


def _short(exc: Exception) -> str:
    msg = getattr(exc, "what", None) or str(exc)
    return msg.splitlines()[0][:300] if msg else type(exc).__name__


def known_tree(s: Session, name: str) -> trees_q.Tree | None:
    """The tree's row; a tree defined by YAML (kernels/trees, $STACKBENCH_TREES) but not yet
    in the database is registered here."""
    row = trees_q.named(s, name)
    if row is not None:
        return row
    from stackbench.kernels import trees

    try:
        tree = trees.load_tree(name)
    except StackbenchError:
        return None
    from stackbench.jobs.driver.pipeline import register_tree

    return register_tree(s, tree)


@dataclass
class TreeChoice:
    name: str
    default_base: str


def tree_choices(s: Session) -> list[TreeChoice]:
    """Trees a series may target: those in the database and those defined by YAML (a fresh
    installation has only the latter; :func:`check` registers one when it is used)."""
    seen = {t.name: TreeChoice(t.name, t.default_base or "") for t in trees_q.trees(s)}
    try:
        from stackbench.kernels import trees

        for t in trees.list_trees():
            seen.setdefault(t.name, TreeChoice(t.name, t.default_base))
    except StackbenchError:
        pass  # a broken YAML tree is reported where it is used, not on every form
    return [seen[n] for n in sorted(seen)]


def check(
    s: Session,
    *,
    tree: str,
    base: str | None = None,
    jobs: list[str] | None = None,
    runs: Any = None,
) -> Checked:
    """The one validation of every front door; SubmissionErrors names every bad field and
    nothing is written (a YAML tree may be registered: that is not the submission)."""
    errors: dict[str, str] = {}
    bad_name = storable.tree_name_problem(tree) if tree else None
    row = known_tree(s, tree) if tree and not bad_name else None
    if bad_name:
        errors["tree"] = bad_name
    elif row is None:
        names = ", ".join(t.name for t in trees_q.trees(s)) or "none"
        errors["tree"] = f"{tree[:80]!r}: unknown tree (known: {names})" if tree else "pick a tree"
    base = (base or "").strip()
    if base and not _REF_RE.match(base):
        errors["base"] = "not a commit or ref name"
    cleaned: list[str] | None = None
    if jobs is not None:
        try:
            cleaned = check_jobs(list(jobs))
            if not cleaned:
                errors["jobs"] = "pick at least one job"
        except InputError as exc:
            errors["jobs"] = f"{exc.path}: {exc.what}"
    n_runs: int | None = None
    if runs not in (None, ""):
        try:
            n_runs = check_runs(runs)
        except InputError as exc:
            errors["runs"] = exc.what
    if errors:
        raise SubmissionErrors(errors)
    return Checked(tree=tree, base=base, jobs=cleaned, runs=n_runs)


def already_stored(s: Session, parsed: Any, checked: Checked) -> series_store.Series | None:
    """The stored series this submission is (same Message-ID, patches, tree and base), if
    any: :func:`create` would answer with it instead of storing a new one."""
    from stackbench.patches.store import resolve_base, series_key

    row = trees_q.named(s, checked.tree)
    base = resolve_base(parsed, checked.base or None, row.default_base if row else None)
    return series_store.by_key(s, series_key(parsed, checked.tree, base))


def resubmission_note(stored: series_store.Series, parsed: Any) -> str:
    """What a resubmission says about the stored series it matched: it is the same series,
    and what of the new mbox was not kept (the key is the Message-ID and the patches)."""
    kept = []
    if (stored.cover_letter or "") != (parsed.cover_letter or ""):
        kept.append("cover letter")
    if stored.title != parsed.title:
        kept.append("title")
    note = f"series {stored.id} is already stored: same Message-ID and patches [{stored.state}]"
    if len(kept) == 1:
        note += f"; this mbox's {kept[0]} differs: the stored one is kept"
    elif kept:
        note += f"; this mbox's {' and '.join(kept)} differ: the stored ones are kept"
    return note


def create(
    s: Session,
    parsed: Any,
    checked: Checked,
    *,
    source: str,
    owner_id: int | None = None,
    mbox: bytes | None = None,
    meta: dict[str, Any] | None = None,
    applied: Any = None,
    foreground: bool = False,
    check_claims: bool = False,
) -> series_store.Series:
    """Store a checked submission and hand it to the dispatcher (idempotent: the same
    series on the same tree and base gives the stored one back). ``applied`` is an
    ApplyResult for series whose commits already exist (git push); ``foreground``: the
    caller runs it or hands it over itself (``demo``, ``submit``), the dispatcher does not
    take it; ``check_claims``: the cover letter's claims are kept and their jobs join the
    series' (jobs/driver/claims_plan.py)."""
    from stackbench.patches.store import create_series, resolve_base

    row = trees_q.named(s, checked.tree)
    base = resolve_base(parsed, checked.base or None, row.default_base if row else None)
    if not base:
        raise SubmissionErrors(
            {"base": "the series has no base-commit: line and the tree no default base"}
        )
    jobs, claims, added = checked.jobs, None, []
    if check_claims:
        from stackbench.jobs.driver import claims_plan

        jobs, claims, added = claims_plan.with_claims(parsed, checked.jobs, checked.runs, base)
    try:
        series = create_series(
            s,
            parsed,
            tree=checked.tree,
            base=base,
            source=source,
            owner_id=owner_id,
            jobs=jobs,
            runs=checked.runs,
            meta=meta,
            mbox=mbox,  # applied as sent, whatever its charset
        )
    except InputError as exc:
        raise SubmissionErrors({"mbox": exc.what}) from exc
    s.flush()
    if series.state != "new" or series.meta.get("submitted"):
        return series  # the same submission again: already handed over
    who = accounts_q.user(s, owner_id).name if owner_id else "an anonymous submitter"
    series_store.merge_meta(series, submitted=source)
    if claims is not None:
        claims_store.put(series, claims, added=added)
    if not foreground:
        series_runs_store.begin(s, series.id, source=source)
    if applied is not None:
        record_apply(s, series.id, applied)
    series_store.add_event(
        s,
        series.id,
        f"series:{series.id}",
        series.state,
        f"submitted by {who} via {source}; waiting for the dispatcher",
    )
    s.flush()
    notify(s)
    return series


def hand_over(
    eng: Engine,
    series_id: int,
    *,
    source: str,
    fresh: bool = False,
    jobs: list[str] | None = None,
    runs: Any = None,
) -> str:
    """Give a stored series to the dispatcher, once: what a watching client (``demo``) does
    instead of running it. Returns what happened: ``attached`` (already handed over and not
    finished, even when ``fresh``: nothing is sent again), ``finished`` (done, and not
    ``fresh``), ``apply-failed``
    or ``handed-over``. A failed series, a ``fresh`` one (a rerun or a new plan) and one a
    foreground client ran are handed over again under a new attempt, so the dispatcher's
    submission key is new and the master gets one new buildset. ``jobs`` and ``runs``
    replace the series' own for this and later attempts (checked as a submission's are)."""
    settings = {"jobs": check_jobs(jobs)} if jobs else {}
    if runs is not None:
        settings["runs"] = check_runs(runs)
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        meta = dict(row.meta)
        last = series_runs_store.current(s, series_id)
        ours = (
            last is not None
            and last.ended is None
            and last.executor != series_runs_store.FOREGROUND
        )
        if row.state == "apply-failed":
            return "apply-failed"
        if row.state == "done" and not fresh:
            return "finished"
        if row.state in PENDING and ours:
            return "attached"  # a rerun of a series still running waits for it
        meta.pop("report_mail", None)
        meta["submitted"] = meta.get("submitted") or source
        meta.update(settings)
        start = _start_state(row)
        check_move(series_id, row.state, start)
        attempt = series_runs_store.begin(s, series_id, source=source)
        _move(s, row, start, error="", meta=meta)
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


def record_apply(s: Session, series_id: int, result: ApplyResult) -> series_store.Series:
    """An apply's outcome: the patches' commits and errors as
    :func:`stackbench.patches.store.apply_outcome` stores them, and the series moved to
    ``applied`` or ``apply-failed`` with the event that says why."""
    from stackbench.patches.store import apply_outcome

    row = series_store.get(s, series_id, lock=True)
    if row is None:
        raise NotFoundError(f"no series {series_id}")
    outcome = apply_outcome(s, series_id, result)
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
    from stackbench.jobs.driver.pipeline import series_kernels

    ids = []
    with db.session(eng) as s:
        for k in series_kernels(eng, series_id):
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
        update_meta(eng, series_id, report_mail=note)
        return f"report mail not queued: {note['why']}"
    mail_id = reports.queue(eng, mail)
    update_meta(eng, series_id, report_mail={"id": mail_id, "to": mail.to})
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
        if not posted.get("apply_failed_reply") or row.meta.get("report_mail"):
            return None
    return queue_report(eng, series_id)
