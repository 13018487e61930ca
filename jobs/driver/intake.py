"""The one intake of a series. Every front door hands its submission to :func:`take` and
gets the stored series back, or SubmissionErrors (one line; per field for the web form):

    the options checked -> the mails parsed (or the pushed commits read) -> the same series
    already stored? -> stored and handed over

The doors: the web form and ``POST /api/series`` (stackbench.web.submission), ``stackbench
submit`` and ``stackbench demo``, ``git push`` (stackbench.jobs.driver.push_intake) and a
watched mailing list (stackbench.jobs.lists.list_watch). The base and the series' key are
resolved once, here. Nothing is built: the dispatcher, or the client that runs or watches
the series, does that.

A submission's options are one typed object, :class:`Options`, read from whatever the door
has (argparse values, form or JSON fields, ``git push -o key=value``) by field name, each
field checked once. A new opt-in is one field with its reader: the CLI flag of the same
name, the API's field and the push option reach it without more code. An option the path
that runs the series cannot honour is refused, never dropped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.driver import claims_plan, lifecycle
from stackbench.jobs.executors.jobspecs import parse_job_spec, split_job_specs
from stackbench.jobs.executors.series_state import register_tree
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import trees
from stackbench.patches import intake as push_refs
from stackbench.patches.apply import ApplyResult
from stackbench.patches.parser import ParsedSeries, parse_mbox
from stackbench.patches.store import create_series, resolve_base, series_key
from stackbench.resultsdb import (
    accounts_q,
    claims_store,
    series_runs_store,
    series_store,
    storable,
    trees_q,
)

MAX_RUNS = 30
ACCELS = ("auto", "kvm", "tcg")
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,199}$")

# who runs the series once it is stored: the dispatcher at once (the web, the API, a push, a
# list, ``submit --no-wait``), a client that hands it over itself and watches (``demo`` and
# ``submit`` through Buildbot), or this very process (``--in-process``)
DISPATCHER = "dispatcher"
WATCHER = "watcher"
HERE = "here"
RUNNERS = (DISPATCHER, WATCHER, HERE)


class SubmissionErrors(StackbenchError):
    """What is wrong with a submission, per field (the web form shows each beside its
    field; the CLI and git print the joined line)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def check_runs(raw: Any) -> int:
    """Runs of every job per kernel: a whole number from 1 to MAX_RUNS."""
    runs = _whole(raw)
    if not 1 <= runs <= MAX_RUNS:
        raise InputError("runs", f"must be between 1 and {MAX_RUNS}, not {runs}")
    return runs


def check_jobs(raw: Any) -> tuple[str, ...]:
    """Job specs with optional overrides (``thpscale[madvise=false]``; a list, or one
    comma-separated string), each validated against its definition's schema."""
    specs = split_job_specs(raw) if isinstance(raw, str) else list(raw)
    out = []
    for spec in specs:
        spec = str(spec).strip()
        if not spec:
            continue
        try:
            parse_job_spec(spec)
        except StackbenchError as exc:
            raise InputError(f"job {spec[:60]!r}", _short(exc)) from None
        out.append(spec)
    if not out:
        raise InputError("jobs", "pick at least one job")
    return tuple(out)


def _whole(raw: Any) -> int:
    if isinstance(raw, bool):
        raise InputError("value", f"not a number: {raw!r}")
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InputError("value", f"not a number: {str(raw)[:20]!r}") from None


def _between(low: int, high: int) -> Callable[[Any], int]:
    def read(raw: Any) -> int:
        n = _whole(raw)
        if not low <= n <= high:
            raise InputError("value", f"must be between {low} and {high}, not {n}")
        return n

    return read


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise InputError("value", f"not true or false: {word[:20]!r}")


def _accel(raw: Any) -> str:
    word = str(raw).strip()
    if word not in ACCELS:
        raise InputError("value", f"{word[:20]!r}: one of {', '.join(ACCELS)}")
    return word


def _option(read: Callable[[Any], Any], *, here_only: bool = False) -> Any:
    """A field of Options: None (not asked for) by default, ``read`` turns what a door has
    into the value; ``here_only``: only a series run in this process can honour it."""
    return field(default=None, metadata={"read": read, "here_only": here_only})


@dataclass(frozen=True)
class Options:
    """What a submission asks of its run; None: not asked for (the defaults apply).

    A new opt-in is one field here with its reader (and, if the dispatcher acts on it, its
    column of the attempt's plan, series_runs_store.PLAN, filled by :meth:`plan`): the
    doors read the fields by name, so the CLI flag whose dest is the field's name, the
    form's or the API's field and ``git push -o name=value`` reach it with no code of their
    own."""

    jobs: tuple[str, ...] | None = _option(check_jobs)
    runs: int | None = _option(check_runs)
    # boots per kernel that undecided headline metrics may add rounds up to
    max_boots: int | None = _option(_between(1, MAX_RUNS))
    # False: the plan's rounds only, no adaptive looks
    adaptive: bool | None = _option(_flag)
    # the guest: a worker boots its machine kind's, so only an in-process run picks one
    cpus: int | None = _option(_between(1, 256), here_only=True)
    mem_mb: int | None = _option(_between(128, 1 << 20), here_only=True)
    accel: str | None = _option(_accel, here_only=True)
    # the cover letter's claims are kept and their jobs join the series' (claims_plan)
    check_claims: bool | None = _option(_flag)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def read(cls, raw: Mapping[str, Any], *, runner: str = DISPATCHER) -> Options:
        """The options from a door's ``name -> value`` (None and "" are not asked for),
        every field checked; SubmissionErrors names each bad, unknown or, for ``runner``,
        unhonourable one."""
        errors: dict[str, str] = {}
        values: dict[str, Any] = {}
        known = {f.name: f for f in dataclasses.fields(cls)}
        for name, value in raw.items():
            f = known.get(name)
            if f is None:
                errors[str(name)[:40]] = f"no such option (options: {', '.join(known)})"
                continue
            if value is None or value == "":
                continue
            if f.metadata["here_only"] and runner != HERE:
                errors[name] = (
                    "only a series run in this process chooses it (--in-process); the "
                    "dispatcher's workers boot their machine kind's guest"
                )
                continue
            try:
                values[name] = f.metadata["read"](value)
            except InputError as exc:
                errors[name] = (
                    exc.what if exc.path in ("value", name) else f"{exc.path}: {exc.what}"
                )
        if errors:
            raise SubmissionErrors(errors)
        return cls(**values)

    def settings(self, base: Settings | None = None) -> Settings:
        """The in-process executor's settings with this guest and adaptivity."""
        asked = {k: getattr(self, k) for k in ("cpus", "mem_mb", "accel", "adaptive")}
        return dataclasses.replace(base or Settings(), **{k: v for k, v in asked.items()
                                                          if v is not None})  # fmt: skip

    def plan(self) -> dict[str, Any]:
        """The plan's columns of the series' attempt (series_runs_store.PLAN) asked for."""
        out = {k: getattr(self, k) for k in series_runs_store.PLAN if k != "check_claims"}
        return {**out, "check_claims": bool(self.check_claims)}


@dataclass(frozen=True)
class Pushed:
    """A ``git push`` of ``new`` to ``ref`` (``refs/for/<tree>/<base>``) of ``repo``."""

    repo: Path
    ref: str
    new: str


@dataclass
class Submission:
    """A series as a door received it: ``mbox`` (mails) or ``pushed`` (commits), and the
    options as the door has them (``name -> value``, read by :meth:`Options.read`)."""

    source: str  # the door: web, api, mbox, demo, push, list
    tree: str = ""
    mbox: bytes | None = None
    filename: str = "mbox"
    base: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    owner_id: int | None = None
    runner: str = DISPATCHER
    meta: dict[str, Any] | None = None  # what the door knows and the report shows (a list's)
    pushed: Pushed | None = None
    # the mails as the door already parsed them (a list filters on the files they touch)
    parsed: ParsedSeries | None = None


@dataclass
class Taken:
    """A submission stored (or found stored): the series, its options, and when it is the
    same series as one stored before, what to tell the submitter (else "")."""

    series: series_store.Series | None
    options: Options
    parsed: ParsedSeries
    note: str = ""


def take(s: Session, sub: Submission, *, check_only: bool = False) -> Taken:
    """THE intake: validate everything, then store the series and hand it to its runner.
    SubmissionErrors names every bad field and nothing is written (a YAML tree may be
    registered: that is not the submission). ``check_only``: stop before storing (a push's
    pre-receive hook); ``series`` is None then."""
    if sub.runner not in RUNNERS:
        raise ValueError(f"runner {sub.runner!r}: one of {RUNNERS}")
    errors: dict[str, str] = {}
    options = Options()
    try:
        options = Options.read(sub.options, runner=sub.runner)
    except SubmissionErrors as exc:
        errors.update(exc.errors)
    tree, base = sub.tree, sub.base
    if sub.pushed is not None:
        tree, base = push_refs.parse_push_ref(sub.pushed.ref)  # a foreign ref: refused first
    row = _tree(s, tree, errors)
    base = (base or "").strip()
    if base and not _REF_RE.match(base):
        errors["base"] = "not a commit or ref name"
    parsed = None
    if errors and sub.pushed is not None:
        raise SubmissionErrors(errors)  # the push's range is not read for a bad submission
    try:
        parsed = _parse(sub, tree)
    except InputError as exc:
        if sub.pushed is None:
            errors["mbox"] = exc.what
        else:
            errors["push"] = f"{exc.path}: {exc.what}"
    if errors or parsed is None or row is None:
        raise SubmissionErrors(errors)
    if sub.pushed is not None and base == "HEAD":
        base = parsed.base_commit or base  # HEAD moves: the series keeps what it named
    base_ref = resolve_base(parsed, base or None, row.default_base)
    if not base_ref:
        raise SubmissionErrors(
            {"base": "the series has no base-commit: line and the tree no default base"}
        )
    key = series_key(parsed, tree, base_ref)
    stored = series_store.by_key(s, key)
    note = _resubmission_note(stored, parsed) if stored is not None else ""
    if check_only:
        return Taken(None, options, parsed, note)
    series = _store(s, sub, parsed, options, tree=tree, base_ref=base_ref, key=key)
    return Taken(series, options, parsed, note)


def _tree(s: Session, name: str, errors: dict[str, str]) -> trees_q.Tree | None:
    bad_name = storable.tree_name_problem(name) if name else None
    row = known_tree(s, name) if name and not bad_name else None
    if bad_name:
        errors["tree"] = bad_name
    elif row is None:
        names = ", ".join(t.name for t in trees_q.trees(s)) or "none"
        errors["tree"] = f"{name[:80]!r}: unknown tree (known: {names})" if name else "pick a tree"
    return row


def _parse(sub: Submission, tree: str) -> ParsedSeries:
    if sub.parsed is not None:
        return sub.parsed
    if sub.pushed is not None:
        p = sub.pushed
        _tree_name, base = push_refs.parse_push_ref(p.ref)
        return push_refs.series_from_push(
            p.repo, tree, base, p.new, tree_repo=trees.local_repo(tree)
        )
    if not (sub.mbox or b"").strip():
        raise InputError("mbox", "upload an mbox file or paste one")
    return parse_mbox(sub.mbox or b"", source=sub.filename)


def _store(
    s: Session,
    sub: Submission,
    parsed: ParsedSeries,
    options: Options,
    *,
    tree: str,
    base_ref: str,
    key: str,
) -> series_store.Series:
    meta = dict(sub.meta or {})
    jobs = list(options.jobs) if options.jobs is not None else None
    claims: list[dict[str, Any]] | None = None
    added: list[str] = []
    if options.check_claims:
        jobs, claims, added = claims_plan.with_claims(parsed, jobs, options.runs, base_ref)
    try:
        series = create_series(
            s,
            parsed,
            tree=tree,
            base_ref=base_ref,
            key=key,
            source=sub.source,
            owner_id=sub.owner_id,
            meta=meta or None,
            mbox=sub.mbox,  # applied as sent, whatever its charset
        )
    except InputError as exc:
        raise SubmissionErrors({"mbox": exc.what}) from exc
    s.flush()
    if series.state != "new" or series_runs_store.current(s, series.id) is not None:
        return series  # the same submission again: already handed over
    who = accounts_q.user(s, sub.owner_id).name if sub.owner_id else "an anonymous submitter"
    if claims is not None:
        claims_store.put(series, claims, added=added)
    if sub.pushed is not None:
        # where the apply stage fetches the pushed commits from
        series.push_repo, series.push_head = str(sub.pushed.repo), sub.pushed.new
    # the first attempt holds the plan; the dispatcher takes it at once, else it waits for
    # the client that runs the series or hands it over itself
    waits = "" if sub.runner == DISPATCHER else series_runs_store.WAITING
    plan = {**options.plan(), "jobs": jobs}
    series_runs_store.begin(s, series.id, source=sub.source, executor=waits, report=True, **plan)
    if sub.pushed is not None:
        # the pushed commits are the applied patches: nothing to git am
        done = ApplyResult(
            base_sha=parsed.base_commit or "",
            commits=[p.commit_sha or "" for p in parsed.patches],
            ok=True,
        )
        lifecycle.record_apply(s, series.id, done)
    series_store.add_event(
        s,
        series.id,
        f"series:{series.id}",
        series.state,
        f"submitted by {who} via {sub.source}; waiting for the dispatcher",
    )
    s.flush()
    lifecycle.notify(s)
    return series


def _resubmission_note(stored: series_store.Series, parsed: ParsedSeries) -> str:
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


def _short(exc: Exception) -> str:
    msg = getattr(exc, "what", None) or str(exc)
    return msg.splitlines()[0][:300] if msg else type(exc).__name__


def known_tree(s: Session, name: str) -> trees_q.Tree | None:
    """The tree's row; a tree defined by YAML (kernels/trees, $STACKBENCH_TREES) but not yet
    in the database is registered here."""
    row = trees_q.named(s, name)
    if row is not None:
        return row
    try:
        tree = trees.load_tree(name)
    except StackbenchError:
        return None
    return register_tree(s, tree)


@dataclass
class TreeChoice:
    name: str
    default_base: str


def tree_choices(s: Session) -> list[TreeChoice]:
    """Trees a series may target: those in the database and those defined by YAML (a fresh
    installation has only the latter; :func:`take` registers one when it is used)."""
    seen = {t.name: TreeChoice(t.name, t.default_base or "") for t in trees_q.trees(s)}
    try:
        for t in trees.list_trees():
            seen.setdefault(t.name, TreeChoice(t.name, t.default_base))
    except StackbenchError:
        pass  # a broken YAML tree is reported where it is used, not on every form
    return [seen[n] for n in sorted(seen)]
