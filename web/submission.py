"""Submitting a series (form and API share this): validate every field (the one validation
of stackbench.jobs.driver.lifecycle), parse the mbox, store the series in state "new" and hand it to
the dispatcher. Nothing is built in the request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.driver import lifecycle
from stackbench.resultsdb import jobs_q

if TYPE_CHECKING:
    from stackbench.resultsdb.models import AppUser, Series
from stackbench.web import ratelimit

MAX_RUNS = lifecycle.MAX_RUNS
DEFAULT_RUNS = lifecycle.DEFAULT_RUNS


# the form and the API show these per field; every front door validates the same way
FieldErrors = lifecycle.SubmissionErrors


@dataclass
class Request:
    mbox: bytes
    tree: str
    base: str = ""
    jobs: list[str] = field(default_factory=list)
    runs: int | str = DEFAULT_RUNS  # validated by submit()
    source: str = "web"
    filename: str = "mbox"
    check_claims: bool = False  # the cover letter's claims measured too


def job_choices(s: Session) -> list[str]:
    """Benchmark names a series may ask for: the job definitions shipped with stackbench, or
    (before they are installed) the suites that have results."""
    try:
        from stackbench.jobs.benchmarks import definitions

        names = sorted(definitions.names())
        if names:
            return names
    except (ImportError, AttributeError, StackbenchError):
        pass
    return jobs_q.suites(s)


def submit(s: Session, user: AppUser, req: Request) -> tuple[Series, str]:
    """Validate and store, then hand over to the dispatcher; raises FieldErrors naming the
    fields at fault, writes nothing then. Returns the series and, when the same series was
    stored before (and is what comes back), what to tell the submitter about it."""
    msg = ratelimit.check_submission(s, user.id)
    if msg:
        raise FieldErrors({"submit": msg})
    errors: dict[str, str] = {}
    checked = None
    try:
        checked = lifecycle.check(
            s, tree=req.tree, base=req.base, jobs=list(req.jobs), runs=req.runs
        )
    except FieldErrors as exc:
        errors.update(exc.errors)
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
    if errors or checked is None or parsed is None:
        raise FieldErrors(errors)
    stored = lifecycle.already_stored(s, parsed, checked)
    note = lifecycle.resubmission_note(stored, parsed) if stored is not None else ""
    series = lifecycle.create(
        s, parsed, checked, source=req.source, owner_id=user.id, mbox=req.mbox,
        check_claims=req.check_claims,
    )
    return series, note
