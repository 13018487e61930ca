"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import textcache

if TYPE_CHECKING:
    from sqlalchemy import Engine

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
    with eng.connect() as conn:
        out, build_ids, fp, warnings = _compute(
            conn, refs, style, all_rows, table, monitor, suite, machine, warn, cache
        )
    if cache is not None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with eng.begin() as conn:
                textcache.store(conn, cache, build_ids, fp, out, warnings)
        except SQLAlchemyError as exc:  # the table is printed all the same; only not kept
            _not_kept(exc, warn)
    return out


def render_on(
    conn: Any,
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
    """:func:`render` on a psycopg connection in autocommit mode: the CLI's path, which
    imports no SQLAlchemy."""
    import psycopg

    with conn.transaction():
        out, build_ids, fp, warnings = _compute(
            conn, refs, style, all_rows, table, monitor, suite, machine, warn, cache
        )
    if cache is not None:
        try:
            with conn.transaction():
                textcache.store(conn, cache, build_ids, fp, out, warnings)
        except psycopg.Error as exc:
            _not_kept(exc, warn)
    return out


def _not_kept(exc: Exception, warn: Callable[[str], None] | None) -> None:
    line = "could not keep the table for next time: " + str(exc).splitlines()[0]
    (warn or log.warning)(line)


def _compute(
    conn: Any,
    refs: list[str],
    style: str,
    all_rows: bool,
    table: str | None,
    monitor: str | None,
    suite: str | None,
    machine: str | None,
    warn: Callable[[str], None] | None,
    cache: textcache.View | None,
) -> tuple[str, list[int], str | None, list[str]]:
    if len(refs) < 1:
        raise StackbenchError("compare needs at least one kernel")
    kernels = query.resolve_kernels(conn, refs)
    build_ids = [k.id for k in kernels]
    fp = textcache.fingerprint(conn, build_ids) if cache is not None else None
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
    return _render(ds, style, all_rows, table, monitor), build_ids, fp, warnings


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
