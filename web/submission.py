"""Submitting a series from the form and the API: the rate limit, then the one intake
(stackbench.jobs.driver.intake.take), which validates every field, parses the mbox, stores
the series in state "new" and hands it to the dispatcher. Nothing is built in the request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
from stackbench.jobs.driver import intake
from stackbench.jobs.executors.settings import DEFAULT_RUNS
from stackbench.resultsdb import jobs_q

if TYPE_CHECKING:
    from stackbench.resultsdb.models import AppUser, Series
from stackbench.web import ratelimit

MAX_RUNS = intake.MAX_RUNS


# the form and the API show these per field; every front door validates the same way
FieldErrors = intake.SubmissionErrors


@dataclass
class Request:
    mbox: bytes
    tree: str
    base: str = ""
    # the submission's options by name (intake.Options): jobs, runs, and any later opt-in
    options: dict[str, Any] = field(default_factory=dict)
    source: str = "web"
    filename: str = "mbox"


def options_from(fields: Any, jobs: list[str]) -> dict[str, Any]:
    """The submission's options among a form's or JSON body's fields (each Options field by
    its name: a later opt-in needs no code here); ``jobs`` as the door read them."""
    named = {n: fields.get(n) for n in intake.Options.names() if n != "jobs" and n in fields}
    return {"runs": DEFAULT_RUNS, **named, "jobs": jobs}


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
    """Store the submission through the one intake; raises FieldErrors naming the fields at
    fault, writes nothing then. Returns the series and, when the same series was stored
    before (and is what comes back), what to tell the submitter about it."""
    msg = ratelimit.check_submission(s, user.id)
    if msg:
        raise FieldErrors({"submit": msg})
    taken = intake.take(
        s,
        intake.Submission(
            source=req.source,
            tree=req.tree,
            base=req.base,
            mbox=req.mbox,
            filename=req.filename,
            options=req.options,
            owner_id=user.id,
        ),
    )
    assert taken.series is not None
    return taken.series, taken.note
