"""The life of a series, owned by the service: how every front door creates one, and the
states it goes through until the dispatcher (stackbench.jobs.dispatch) finishes it.

    new -> applying -> applied -> building k/N -> running k/M -> done | failed (reason)
               \\-> apply-failed

``series.state`` holds the word (``building``); the ``k/N`` part lives in
``series.meta["progress"]`` so filters and badges keep working on the word alone.

CLI ``submit``, the web form, ``POST /api/series`` and ``git push`` (HTTP and SSH) all go
through :func:`check` (one validation: tree, base, jobs with overrides, runs) and
:func:`create` (store, record who and how, hand over to the dispatcher). Nothing is built in
the request: the dispatcher that ``stackbench up`` runs picks the series up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.resultsdb import accounts_q, db, series_store, signals, trees_q

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
    from stackbench.jobs import pipeline

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
    from stackbench.jobs.pipeline import register_tree

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
    row = known_tree(s, tree) if tree else None
    if row is None:
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
) -> series_store.Series:
    """Store a checked submission and hand it to the dispatcher (idempotent: the same
    series on the same tree and base gives the stored one back). ``applied`` is an
    ApplyResult for series whose commits already exist (git push)."""
    from stackbench.patches.store import create_series, record_apply, resolve_base

    row = trees_q.named(s, checked.tree)
    base = resolve_base(parsed, checked.base or None, row.default_base if row else None)
    if not base:
        raise SubmissionErrors(
            {"base": "the series has no base-commit: line and the tree no default base"}
        )
    try:
        series = create_series(
            s,
            parsed,
            tree=checked.tree,
            base=base,
            source=source,
            owner_id=owner_id,
            jobs=checked.jobs,
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


def hand_over(eng: Engine, series_id: int, *, source: str, fresh: bool = False) -> str:
    """Give a stored series to the dispatcher, once: what a watching client (``demo``) does
    instead of running it. Returns what happened: ``attached`` (already handed over and not
    finished, even when ``fresh``: nothing is sent again), ``finished`` (done, and not
    ``fresh``), ``apply-failed``
    or ``handed-over``. A failed series, a ``fresh`` one (a rerun or a new plan) and one a
    foreground client ran are handed over again under a new attempt, so the dispatcher's
    submission key is new and the master gets one new buildset."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        meta = dict(row.meta)
        how = (meta.get("dispatch") or {}).get("executor")
        ours = meta.get("submitted") and how in (None, "buildbot", "in-process")
        if row.state == "apply-failed":
            return "apply-failed"
        if row.state == "done" and not fresh:
            return "finished"
        if row.state in PENDING and ours:
            return "attached"  # a rerun of a series still running waits for it
        applied = bool(row.base_commit) and all(p.commit_sha for p in row.patches)
        for key in ("dispatch", "report_mail", "progress"):
            meta.pop(key, None)
        meta["submitted"] = meta.get("submitted") or source
        meta["attempts"] = int(meta.get("attempts", 0)) + 1
        series_store.save(row, state="applied" if applied else "new", error="", meta=meta)
        series_store.add_event(
            s,
            series_id,
            f"series:{series_id}",
            row.state,
            f"handed to the dispatcher via {source} (attempt {meta['attempts']})",
        )
        notify(s)
    return "handed-over"


def notify(s: Session) -> None:
    """Wake the dispatcher (delivered when the transaction commits)."""
    signals.notify(s, CHANNEL)


# ---- state ----------------------------------------------------------------------------------


def set_state(
    eng: Engine,
    series_id: int,
    state: str,
    message: str,
    *,
    error: str | None = None,
    progress: str | None = None,
    meta: dict[str, Any] | None = None,
) -> None:
    """Move a series to ``state`` with an event; ``progress`` is the ``k/N`` part."""
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        changed = row.state != state or (progress or "") != row.meta.get("progress", "")
        new_meta = {**row.meta, **(meta or {})}
        if progress is not None:
            new_meta["progress"] = progress
        elif state in FINAL:
            new_meta.pop("progress", None)
        series_store.save(
            row, state=state, error=None if error is None else error[:4000], meta=new_meta
        )
        if changed:
            series_store.add_event(s, series_id, f"series:{series_id}", state, message[:4000])


def update_meta(eng: Engine, series_id: int, **values: Any) -> dict[str, Any]:
    with db.session(eng) as s:
        row = series_store.get(s, series_id, lock=True)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        return series_store.merge_meta(row, **values)


def event(eng: Engine, series_id: int, subject: str, state: str, message: str) -> None:
    with db.session(eng) as s:
        series_store.add_event(s, series_id, subject, state, message[:4000])


# ---- the report mail ------------------------------------------------------------------------


def recipients(eng: Engine, series_id: int, list_addr: str) -> list[str]:
    """The submitter's account address (else the address on the mails), and the list."""
    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        owner = accounts_q.user(s, series.owner_id) if series.owner_id else None
        first = (owner.email if owner is not None else "") or series.submitter_email
    out = [a for a in (first, list_addr) if a]
    return list(dict.fromkeys(out))


def queue_report(eng: Engine, series_id: int) -> str:
    """Queue the series' report mail (robot layout, threaded under the cover letter) and
    note it on the series; the line to show."""
    from stackbench.mail import config, reports

    cfg = config.from_env()
    mail = reports.series_report(eng, series_id, cfg)
    mail.to = recipients(eng, series_id, cfg.list_addr)
    if not mail.to:
        note = {"to": [], "why": "no recipient: the submitter has no address and "
                "STACKBENCH_MAIL_LIST is not set"}  # fmt: skip
        update_meta(eng, series_id, report_mail=note)
        return f"report mail not queued: {note['why']}"
    mail_id = reports.queue(eng, mail)
    update_meta(eng, series_id, report_mail={"id": mail_id, "to": mail.to})
    line = f"report mail #{mail_id} queued to {', '.join(mail.to)}"
    event(eng, series_id, f"series:{series_id}", "mail", line)
    return line
