"""Seed 003's table: order-N attempts, ``Success`` and ``Success(N)`` beside compaction counters.

One block per scenario (job), one column per kernel::

    Test: spread-25-movable hogger=400 (order 3, 3000 attempts, pass 1, 3 runs)
                              v6.1-debian   1/1-0a1b2c3d
    compact_free_scanned          5240676        3059086
    ...
    Success:                           25             38
    Success(N):                        53             82

Counters are the /proc/vmstat delta over the attempts (mean per run). As the seed defines
them: ``Success = successful allocations * 100 / attempts`` and ``Success(N) = successful
allocations * 100 / the number of order-N allocations that could succeed``; the latter is the
free memory when the attempts began in order-N blocks, capped at the attempts (per run, then
the mean).
"""

from __future__ import annotations

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import runvalues as rv

SUITE = "stress-highalloc"
COUNTERS = (
    "compact_free_scanned",
    "compact_isolated",
    "compact_migrate_scanned",
    "compact_stall",
    "compact_success",
    "pgmigrate_success",
)
NAME_WIDTH = 26
COL_WIDTH = 14
# the job parameters the "Test:" line names (the rest are the same procedure everywhere)
TEST_PARAMS = ("scenario", "hogger", "bgload")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def success(allocated: float, attempts: int) -> float:
    return allocated * 100 / attempts if attempts else 0.0


def possible(mem_free_kb: int, order: int, attempts: int) -> int:
    """How many order-N allocations the free memory could satisfy, at most ``attempts``."""
    return min(attempts, mem_free_kb // (4 << order))


def column(
    ds: query.Dataset, job: query.JobRow, kernel: query.Kernel, pass_no: int
) -> dict[str, float | None] | None:
    lat = rv.per_run(ds, job.id, kernel.id, f"{SUITE}.latency-pass{pass_no}")
    if not lat:
        return None
    order = int((job.params or {}).get("order", 9))
    got = {r.run.id: r.values[0] for r in rv.per_run(ds, job.id, kernel.id, _alloc(pass_no))}
    pct = {r.run.id: r.values[0] for r in rv.per_run(ds, job.id, kernel.id, _pass(pass_no))}
    s, sn = [], []
    for r in lat:
        attempts = len(r.values)
        # runs stored before allocated-passK existed: the printed percentage gives it back
        allocated = got.get(r.run.id, pct.get(r.run.id, 0.0) * attempts / 100)
        s.append(success(allocated, attempts))
        free = rv.mem_free_kb(r.run)
        if free:
            n = possible(free, order, attempts)
            sn.append(success(allocated, n) if n else 0.0)
    out: dict[str, float | None] = {}
    for c in COUNTERS:
        vals = rv.per_run(ds, job.id, kernel.id, f"mmtests-vmstat.{c}")
        out[c] = _mean([v.values[0] for v in vals])
    out["Success:"] = _mean(s)
    out["Success(N):"] = _mean(sn)
    out["_runs"] = len(lat)
    out["_attempts"] = round(_mean([len(r.values) for r in lat]) or 0)
    return out


def _alloc(pass_no: int) -> str:
    return f"{SUITE}.allocated-pass{pass_no}"


def _pass(pass_no: int) -> str:
    return f"{SUITE}.pass{pass_no}"


def _cell(v: float | None) -> str:
    return f"{'-' if v is None else f'{v:.0f}':>{COL_WIDTH}}"


def render(ds: query.Dataset, pass_no: int = 1) -> str:
    jobs = rv.jobs_with(ds, f"{SUITE}.latency-pass{pass_no}")
    if not jobs:
        raise StackbenchError(
            f"no stress-highalloc attempts (pass {pass_no}) stored for these kernels"
        )
    out = []
    for job in jobs:
        cols = [(k, column(ds, job, k, pass_no)) for k in ds.kernels]
        cols = [(k, c) for k, c in cols if c]
        params = job.params or {}
        test = " ".join(
            f"{k}={params[k]}" if k != "scenario" else str(params[k])
            for k in TEST_PARAMS
            if k in params
        )
        order = params.get("order", 9)
        runs = ", ".join(f"{c['_runs']:.0f}" for _, c in cols)
        out.append(
            f"Test: {test or 'no scenario'} (order {order}, {cols[0][1]['_attempts']:.0f} "
            f"attempts, pass {pass_no}, runs {runs})\n"
        )
        out.append(
            " " * NAME_WIDTH + "".join(f"{k.label[: COL_WIDTH - 1]:>{COL_WIDTH}}" for k, _ in cols)
        )
        out.append("\n")
        for row in (*COUNTERS, "Success:", "Success(N):"):
            out.append(f"{row:<{NAME_WIDTH}}" + "".join(_cell(c[row]) for _, c in cols) + "\n")
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n"
