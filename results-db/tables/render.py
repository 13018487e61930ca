"""One entry point for every table style, shared by the CLI, the web pages and the mails."""

from __future__ import annotations

from collections.abc import Callable

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
    machine: str | None = None,
    pool_machines: bool = False,
    warn: Callable[[str], None] | None = None,
    metric: str | None = None,
    pass_no: int = 1,
    suite_source: str | None = None,
) -> str:
    """The table of the stored kernels ``refs`` (base first). Runs are keyed by machine:
    when a job's runs come from several machines, ``machine`` picks one, ``pool_machines``
    pools them (and the table's first line says so), and otherwise nothing is compared
    (StackbenchError naming the machines). ``warn`` is kept for callers that pass it."""
    if len(refs) < 1:
        raise StackbenchError("compare needs at least one kernel")
    with eng.connect() as conn:
        kernels = query.resolve_kernels(conn, refs)
        ds = query.load(conn, kernels, suite=suite, machine=machine, suite_source=suite_source)
    if not ds.runs:
        on = f" on machine {machine}" if machine else ""
        raise StackbenchError("no results stored for " + ", ".join(refs) + on)
    header = check_machines(ds, pool_machines)
    return header + _table(
        ds, style, all_rows=all_rows, table=table, monitor=monitor, metric=metric, pass_no=pass_no
    )


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
