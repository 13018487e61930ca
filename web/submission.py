"""Submitting a series (form and API share this): validate every field, parse the mbox, store
the series in state "new" for the workers. Nothing is built in the request."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.errors import InputError, StackbenchError
from stackbench.resultsdb.models import AppUser, Event, Job, Series, Tree
from stackbench.web import ratelimit

MAX_RUNS = 30
DEFAULT_RUNS = 3
_REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,199}$")


class FieldErrors(StackbenchError):
    """Errors per form field; the form shows each next to its field."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


@dataclass
class Request:
    mbox: bytes
    tree: str
    base: str = ""
    jobs: list[str] = field(default_factory=list)
    runs: int | str = DEFAULT_RUNS  # validated by submit()
    source: str = "web"
    filename: str = "mbox"


def job_choices(s: Session) -> list[str]:
    """Benchmark names a series may ask for: the job definitions shipped with stackbench, or
    (before they are installed) the suites that have results."""
    try:
        from stackbench.jobs import definitions

        names = sorted(definitions.names())
        if names:
            return names
    except (ImportError, AttributeError, StackbenchError):
        pass
    return sorted({j for j in s.scalars(select(Job.suite).distinct())})


def clean_runs(raw: Any) -> int:
    try:
        runs = int(str(raw).strip() or DEFAULT_RUNS)
    except ValueError:
        raise InputError("runs", f"not a number: {str(raw)[:20]!r}") from None
    if not 1 <= runs <= MAX_RUNS:
        raise InputError("runs", f"must be between 1 and {MAX_RUNS}")
    return runs


def submit(s: Session, user: AppUser, req: Request) -> Series:
    """Validate and store; raises FieldErrors naming the fields at fault, writes nothing then."""
    errors: dict[str, str] = {}
    msg = ratelimit.check_submission(s, user.id)
    if msg:
        raise FieldErrors({"submit": msg})
    tree = s.scalar(select(Tree).where(Tree.name == req.tree)) if req.tree else None
    if tree is None:
        errors["tree"] = f"unknown tree {req.tree!r}" if req.tree else "pick a tree"
    base = req.base.strip()
    if base and not _REF_RE.match(base):
        errors["base"] = "not a commit or ref name"
    choices = job_choices(s)
    if not req.jobs:
        errors["jobs"] = "pick at least one job"
    elif choices and (bad := [j for j in req.jobs if j not in choices]):
        errors["jobs"] = "unknown job(s): " + ", ".join(bad[:5])
    runs = DEFAULT_RUNS
    try:
        runs = clean_runs(req.runs)
    except InputError as exc:
        errors["runs"] = exc.what
    parsed = None
    if not req.mbox.strip():
        errors["mbox"] = "upload an mbox file or paste one"
    else:
        try:
            from stackbench.patches.parser import parse_mbox

            parsed = parse_mbox(req.mbox, source=req.filename)
        except InputError as exc:
            errors["mbox"] = exc.what
        except ImportError:
            errors["mbox"] = "the patch parser is not installed on this server"
    if parsed is not None and not base:
        from stackbench.patches.store import resolve_base

        base = resolve_base(parsed, None, tree.default_base if tree else None)
        if not base and tree is not None:
            errors["base"] = "the series has no base-commit: line and the tree no default base"
    if errors:
        raise FieldErrors(errors)
    from stackbench.patches.store import create_series

    try:
        series = create_series(
            s,
            parsed,
            tree=tree.name,
            base=base,
            source=req.source,
            owner_id=user.id,
            jobs=list(req.jobs),
            runs=runs,
            mbox=req.mbox,  # applied as sent, whatever its charset
        )
    except InputError as exc:
        raise FieldErrors({"mbox": exc.what}) from exc
    s.flush()
    s.add(
        Event(
            series_id=series.id,
            subject=f"series:{series.id}",
            state=series.state,
            message=f"submitted by {user.name} via {req.source}",
        )
    )
    return series
