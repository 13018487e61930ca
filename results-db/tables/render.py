"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query


def render(
    eng: Engine,
    refs: list[str],
    *,
    style: str = "lkp",
    all_rows: bool = False,
    table: str | None = None,
    monitor: str | None = None,
    suite: str | None = None,
) -> str:
    if len(refs) < 1:
        raise StackbenchError("compare needs at least one kernel")
    with eng.connect() as conn:
        kernels = query.resolve_kernels(conn, refs)
        ds = query.load(conn, kernels, suite=suite)
    if not ds.runs:
        raise StackbenchError("no results stored for " + ", ".join(refs))
    if style == "lkp":
        from stackbench.resultsdb.tables import lkp

        return lkp.render(ds, all_rows=all_rows)
    if style == "mmtests":
        from stackbench.resultsdb.tables import mmtests

        return mmtests.render(ds, table=table or "latency", monitor=monitor)
    if style == "stackbench":
        from stackbench.resultsdb.tables import verdict

        return verdict.render(ds)
    raise StackbenchError(f"unknown table style '{style}'")
