"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from stackbench.errors import StackbenchError
from stackbench.resultsdb import coverage_store, profile_store, query
from stackbench.resultsdb.tables import (
    alloc_latency,
    coverage,
    lkp,
    mmtests,
    order_success,
    per_run,
    profile,
    textcache,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


def render(
    db: Engine | psycopg.Connection,
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
    """The table of the stored kernels ``refs`` (base first), on ``db``: an Engine, or a
    psycopg connection in autocommit mode (the CLI's). Runs are keyed by machine: when a
    job's runs come from several machines, ``machine`` picks one, ``pool_machines`` pools
    them (and the table's first line says so), and otherwise nothing is compared
    (StackbenchError naming the machines). With ``cache`` (the view these arguments make),
    the text is kept for the next same command; when the database refuses it, ``warn``
    (else the log) says so and the table is returned all the same."""
    opts = _Options(
        style, all_rows, table, monitor, suite, machine, pool_machines, metric, pass_no,
        suite_source,
    )  # fmt: skip
    with _transaction(db) as conn:
        out, build_ids, fp = _compute(conn, refs, opts, cache)
    if cache is not None:
        try:
            with _transaction(db) as conn:
                textcache.store(query._raw(conn), cache, build_ids, fp, out, [])
        except _errors(db) as exc:
            _not_kept(exc, warn)
    return out


@contextmanager
def _transaction(db: Engine | psycopg.Connection) -> Iterator[Any]:
    """A connection of ``db`` in a transaction, committed when the block ends well."""
    if isinstance(db, psycopg.Connection):
        with db.transaction():
            yield db
    else:
        with db.begin() as conn:
            yield conn


def _errors(db: Engine | psycopg.Connection) -> tuple[type[Exception], ...]:
    """The database errors of ``db``'s kind."""
    if isinstance(db, psycopg.Connection):
        return (psycopg.Error,)
    # only an Engine's caller has SQLAlchemy loaded: the CLI, on psycopg alone, saves its
    # import (140 ms measured)
    from sqlalchemy.exc import SQLAlchemyError

    return (SQLAlchemyError,)


def _not_kept(exc: Exception, warn: Callable[[str], None] | None) -> None:
    (warn or log.warning)(textcache.not_kept(exc))


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
    fp = textcache.fingerprint(query._raw(conn), build_ids) if cache is not None else None
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
    header = check_machines(ds, o.pool_machines) + boxes_line(ds)
    covered = coverage_store.load(conn, kernels) if o.style == "stackbench" else []
    profiled = profile_store.load(conn, kernels) if o.style == "stackbench" else []
    text = table_of(
        ds,
        o.style,
        all_rows=o.all_rows,
        table=o.table,
        monitor=o.monitor,
        metric=o.metric,
        pass_no=o.pass_no,
        flags={r.kernel_id: r.flag for r in covered if r.flag},
    )
    evidence = coverage.render(covered) + profile.render(profiled)
    return header + text + evidence, build_ids, fp


def table_of(
    ds: query.Dataset,
    style: str,
    *,
    all_rows: bool = False,
    table: str | None = None,
    monitor: str | None = None,
    metric: str | None = None,
    pass_no: int = 1,
    flags: dict[int, str] | None = None,
) -> str:
    """The table of ``style`` for the loaded kernels ``ds``: what ``stackbench compare``
    prints and the comparison page shows (StackbenchError when ``ds`` cannot fill it).
    ``flags``: a note on a kernel's rows (by build id), as the coverage section gives it."""
    if style == "lkp":
        return lkp.render(ds, all_rows=all_rows)
    if style == "mmtests":
        return mmtests.render(ds, table=table or "latency", monitor=monitor)
    if style == "stackbench":
        # the verdicts' statistics (scipy) take 0.9 s to import (measured): only for them
        from stackbench.resultsdb.tables import verdict

        return verdict.render(ds, all_rows=all_rows, flags=flags)
    if style == "alloc-latency":
        return alloc_latency.render(ds, pass_no=pass_no)
    if style == "order-success":
        return order_success.render(ds, pass_no=pass_no)
    if style == "per-run":
        if not metric:
            raise StackbenchError("the per-run view needs --metric NAME")
        return per_run.render(ds, metric)
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


def machines_of(ds: query.Dataset) -> list[str]:
    """Every machine the dataset's runs come from."""
    return sorted({r.machine for r in ds.runs.values()})


def boxes_line(ds: query.Dataset) -> str:
    """The header line naming the boxes (workers) whose runs the table holds, when the runs
    name them (a pool's rounds, each run on one worker); "" otherwise."""
    if not any((r.meta or {}).get("worker") for r in ds.runs.values()):
        return ""
    boxes = ds.boxes()
    return f"# {len(boxes)} box{'' if len(boxes) == 1 else 'es'} contributed: {', '.join(boxes)}\n"


def check_machines(ds: query.Dataset, pool: bool) -> str:
    """Nothing when every job's runs come from one machine; the header line that states the
    pooling when ``pool``; otherwise a StackbenchError that names the machines and both
    ways out. A QEMU guest and a bare-metal box differ by orders of magnitude: a column
    mixing their runs compares the machines, not the kernels."""
    mixed_clocks_error(ds)
    header = "".join(f"# {line}\n" for line in coarse_clock_notes(ds))
    pooled = ds.pooled_machines()
    if not pooled:
        return header
    names = machines_of(ds)
    if not pool:
        job = ds.jobs[min(pooled)]
        more = f" (and {len(pooled) - 1} more jobs)" if len(pooled) > 1 else ""
        raise StackbenchError(
            f"runs of {job.suite} {job.test} come from {len(pooled[min(pooled)])} machines "
            f"({', '.join(pooled[min(pooled)])}){more}: compare one with --machine NAME, or "
            "pool them with --pool-machines"
        )
    return (
        header
        + f"# runs pooled across {len(names)} machines (--pool-machines): {', '.join(names)}\n"
    )


def mixed_clocks_error(ds: query.Dataset) -> None:
    """A StackbenchError when a job's runs were timed with different clocksources: like runs
    of different machines, and never pooled, since the clock alone moves every latency."""
    mixed = ds.mixed_clocks()
    if not mixed:
        return
    job_id = min(mixed)
    job = ds.jobs[job_id]
    more = f" (and {len(mixed) - 1} more jobs)" if len(mixed) > 1 else ""
    raise StackbenchError(
        f"runs of {job.suite} {job.test} were timed with different clocksources "
        f"({', '.join(mixed[job_id])}){more}: runs on different clocks are never compared; "
        "compare one machine with --machine NAME, or run the jobs again on one clock"
    )


def coarse_clock_notes(ds: query.Dataset) -> list[str]:
    """One line per job whose latencies some runs timed with a coarse clock: those latency
    metrics are marked and the verdict on them stays undecided (coarse clock)."""
    out: dict[int, str] = {}
    for (job_id, _build), why in sorted(ds.coarse_clocks().items()):
        out.setdefault(job_id, why)
    lines = []
    for job_id, why in sorted(out.items()):
        job = ds.jobs[job_id]
        lines.append(
            f"coarse clock: {job.suite} {job.test}: latencies timed with a {why}; not "
            "comparable, no verdict on them"
        )
    return lines
