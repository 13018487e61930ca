"""Storing a series in a test the way every front door does: through the one intake
(stackbench.jobs.driver.intake.take)."""

from __future__ import annotations

from typing import Any

from stackbench.jobs.driver import intake
from stackbench.resultsdb import db


def submit_series(
    eng,
    mbox: bytes,
    *,
    tree: str = "linux-6.1",
    base: str | None = None,
    source: str = "mbox",
    filename: str = "<mbox>",
    owner_id: int | None = None,
    runner: str = intake.HERE,
    **options: Any,
) -> int:
    """The stored series' id (the same series again gives the same id); ``options`` are
    intake.Options fields (jobs, runs, ...). By default the test runs it (``runner``)."""
    sub = intake.Submission(
        source=source, tree=tree, base=base, mbox=mbox, filename=filename,
        options=options, owner_id=owner_id, runner=runner,
    )  # fmt: skip
    with db.session(eng) as s:
        taken = intake.take(s, sub)
        assert taken.series is not None
        return taken.series.id
