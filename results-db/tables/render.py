"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import textcache

log = logging.getLogger(__name__)


def render(
    eng: Engine,
    refs: list[str],
    *,
    style: str = "lkp",
    all_rows: bool = False,
    table: str | None = None,
    monitor: str | None = None,
    suite: str | None = None,
    machine: str | None = None,
    warn: Callable[[str], None] | None = None,
    cache: textcache.View | None = None,
) -> str:
    """The table of the stored kernels ``refs`` (base first). ``warn`` hears about runs of
    one job from several machines: they are pooled unless ``machine`` picks one. With
    ``cache`` (the view these arguments make), the text is kept for the next same command."""
    if len(refs) < 1:
        raise StackbenchError("compare needs at least one kernel")
    with eng.connect() as conn:
        kernels = query.resolve_kernels(conn, refs)
        if cache is not None:
            fp = textcache.fingerprint(conn, [k.id for k in kernels])
        ds = query.load(
            conn, kernels, suite=suite, machine=machine, metrics=_needed(style, table, monitor)
        )
    if not ds.runs:
        on = f" on machine {machine}" if machine else ""
        raise StackbenchError("no results stored for " + ", ".join(refs) + on)
    warnings = pooled_warnings(ds)
    if warn is not None:
        for line in warnings:
            warn(line)
    out = _render(ds, style, all_rows, table, monitor)
    if cache is not None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            textcache.store(eng, cache, [k.id for k in kernels], fp, out, warnings)
        except SQLAlchemyError as exc:  # the table is printed all the same; only not kept
            line = "could not keep the table for next time: " + str(exc).splitlines()[0]
            (warn or log.warning)(line)
    return out


def _render(
    ds: query.Dataset, style: str, all_rows: bool, table: str | None, monitor: str | None
) -> str:
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


def _needed(style: str, table: str | None, monitor: str | None) -> Callable[[str], bool] | None:
    """The metrics a view reads, when it reads few: the mmtests monitors and single-value
    tables need none of the fault latencies, which are nearly all of an mmtests run."""
    if style != "mmtests":
        return None
    if monitor is not None:
        return lambda name: name.startswith(("mmtests-vmstat.", "duration."))
    if table in ("counts", "locality", "highalloc"):
        return lambda name: ".fault-" not in name
    return None


def pooled_warnings(
    ds: query.Dataset, hint: str = "pass --machine NAME to compare one"
) -> list[str]:
    """One line per job whose runs come from several machines (and so are pooled), ending
    with ``hint``: how the reader picks one machine."""
    out = []
    for job_id, names in sorted(ds.pooled_machines().items()):
        job = ds.jobs[job_id]
        out.append(
            f"{job.suite} {job.test}: runs from {len(names)} machines are pooled "
            f"({', '.join(names)}); {hint}"
        )
    return out
