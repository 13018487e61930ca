"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
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
    pool_machines: bool = False,
    warn: Callable[[str], None] | None = None,
    cache: textcache.View | None = None,
    metric: str | None = None,
    pass_no: int = 1,
    suite_source: str | None = None,
) -> str:
    """The table of the stored kernels ``refs`` (base first). Runs are keyed by machine:
    when a job's runs come from several machines, ``machine`` picks one, ``pool_machines``
    pools them (and the table's first line says so), and otherwise nothing is compared
    (StackbenchError naming the machines). ``warn`` is kept for callers that pass it. With
    ``cache`` (the view these arguments make), the text is kept for the next same command."""
    opts = _Options(
        style, all_rows, table, monitor, suite, machine, pool_machines, metric, pass_no,
        suite_source,
    )  # fmt: skip
    with eng.connect() as conn:
        out, build_ids, fp = _compute(conn, refs, opts, cache)
    if cache is not None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with eng.begin() as conn:
                textcache.store(conn, cache, build_ids, fp, out, [])
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
    pool_machines: bool = False,
    warn: Callable[[str], None] | None = None,
    cache: textcache.View | None = None,
    metric: str | None = None,
    pass_no: int = 1,
    suite_source: str | None = None,
) -> str:
    """:func:`render` on a psycopg connection in autocommit mode, or a pgsession.Session:
    the CLI's paths, which import no SQLAlchemy (and with a Session, no psycopg)."""
    from stackbench.resultsdb import pgsession

    if isinstance(conn, pgsession.Session):
        errors: tuple[type[Exception], ...] = (pgsession.pgwire.Error,)
    else:
        import psycopg

        errors = (psycopg.Error,)
    opts = _Options(
        style, all_rows, table, monitor, suite, machine, pool_machines, metric, pass_no,
        suite_source,
    )  # fmt: skip
    with conn.transaction():
        out, build_ids, fp = _compute(conn, refs, opts, cache)
    if cache is not None:
        try:
            with conn.transaction():
                textcache.store(conn, cache, build_ids, fp, out, [])
        except errors as exc:
            _not_kept(exc, warn)
    return out


def _not_kept(exc: Exception, warn: Callable[[str], None] | None) -> None:
    line = "could not keep the table for next time: " + str(exc).splitlines()[0]
    (warn or log.warning)(line)


@dataclass(frozen=True)
class _Options:
    style: str
    all_rows: bool
    table: str | None
    monitor: str | None
    suite: str | None
    machine: str | None
    pool_machines: bool
    metric: str | None
    pass_no: int
    suite_source: str | None


def _compute(
    conn: Any, refs: list[str], o: _Options, cache: textcache.View | None
) -> tuple[str, list[int], str | None]:
    if len(refs) < 1:
        raise StackbenchError("compare needs at least one kernel")
    kernels = query.resolve_kernels(conn, refs)
    build_ids = [k.id for k in kernels]
    fp = textcache.fingerprint(conn, build_ids) if cache is not None else None
    ds = query.load(
        conn,
        kernels,
        suite=o.suite,
        machine=o.machine,
        suite_source=o.suite_source,
        metrics=_needed(o.style, o.table, o.monitor),
    )
    if not ds.runs:
        on = f" on machine {o.machine}" if o.machine else ""
        raise StackbenchError("no results stored for " + ", ".join(refs) + on)
    header = check_machines(ds, o.pool_machines)
    text = _table(
        ds,
        o.style,
        all_rows=o.all_rows,
        table=o.table,
        monitor=o.monitor,
        metric=o.metric,
        pass_no=o.pass_no,
    )
    return header + text, build_ids, fp


def _table(
    ds: query.Dataset,
    style: str,
    *,
    all_rows: bool,
    table: str | None,
    monitor: str | None,
    metric: str | None = None,
    pass_no: int = 1,
) -> str:
    if style == "lkp":
        from stackbench.resultsdb.tables import lkp

        return lkp.render(ds, all_rows=all_rows)
    if style == "mmtests":
        from stackbench.resultsdb.tables import mmtests

        return mmtests.render(ds, table=table or "latency", monitor=monitor)
    if style == "stackbench":
        from stackbench.resultsdb.tables import verdict

        return verdict.render(ds, all_rows=all_rows)
    if style in SEED_STYLES:
        return render_seed_style(ds, style, metric=metric, pass_no=pass_no)
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


# the seeds' own layouts: 001's latency percentiles, 003's Success/Success(N), 002's per-run
SEED_STYLES = ("alloc-latency", "order-success", "per-run")


def render_seed_style(
    ds: query.Dataset, style: str, *, metric: str | None = None, pass_no: int = 1
) -> str:
    if style == "alloc-latency":
        from stackbench.resultsdb.tables import alloc_latency

        return alloc_latency.render(ds, pass_no=pass_no)
    if style == "order-success":
        from stackbench.resultsdb.tables import order_success

        return order_success.render(ds, pass_no=pass_no)
    from stackbench.resultsdb.tables import per_run

    if not metric:
        raise StackbenchError("the per-run view needs --metric NAME")
    return per_run.render(ds, metric)


def machines_of(ds: query.Dataset) -> list[str]:
    """Every machine the dataset's runs come from."""
    return sorted({r.machine for r in ds.runs.values()})


def check_machines(ds: query.Dataset, pool: bool) -> str:
    """Nothing when every job's runs come from one machine; the header line that states the
    pooling when ``pool``; otherwise a StackbenchError that names the machines and both
    ways out. A QEMU guest and a bare-metal box differ by orders of magnitude: a column
    mixing their runs compares the machines, not the kernels."""
    pooled = ds.pooled_machines()
    if not pooled:
        return ""
    names = machines_of(ds)
    if not pool:
        job = ds.jobs[min(pooled)]
        more = f" (and {len(pooled) - 1} more jobs)" if len(pooled) > 1 else ""
        raise StackbenchError(
            f"runs of {job.suite} {job.test} come from {len(pooled[min(pooled)])} machines "
            f"({', '.join(pooled[min(pooled)])}){more}: compare one with --machine NAME, or "
            "pool them with --pool-machines"
        )
    return f"# runs pooled across {len(names)} machines (--pool-machines): {', '.join(names)}\n"


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
