"""Seed 001's table: allocation latency percentiles per kernel, with the huge pages allocated.

From stress-highalloc's per-attempt times (``latency-passK``, nanoseconds) of every run of a
job on a kernel, pooled; percentiles by nearest rank, in microseconds, in the cover letter's
layout::

    - With v6.1-debian (5 runs, 2390 attempts of order 9, pass 1)

      percentile latency
      –––––––––– –––––––
               5    7894
              ...
              95   33799

    Total 2M hugepages allocated = 478 (956M worth of hugepages out of 1.0G total free
    => 93% of free memory could be allocated as hugepages)

The total is the mean per run; "total free" is MemFree when the benchmark started (after
any scenario stage), also the mean per run.
"""

from __future__ import annotations

import math

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import runvalues as rv

PERCENTILES = (5, 10, 25, 30, 40, 50, 60, 75, 80, 90, 95)
SUITE = "stress-highalloc"
DASH = "\u2013"


def nearest_rank(sorted_values: list[float], p: float) -> float:
    """The smallest value with at least p% of the values at or below it."""
    n = len(sorted_values)
    k = max(1, math.ceil(p / 100 * n))
    return sorted_values[k - 1]


def block_size_kib(order: int) -> int:
    return 4 << order


def kernel_block(
    ds: query.Dataset, job: query.JobRow, kernel: query.Kernel, pass_no: int
) -> str | None:
    runs = rv.per_run(ds, job.id, kernel.id, f"{SUITE}.latency-pass{pass_no}")
    if not runs:
        return None
    lat = sorted(v / 1000 for r in runs for v in r.values)
    order = int((job.params or {}).get("order", 9))
    out = [
        f"- With {kernel.label} ({len(runs)} run{'s' * (len(runs) != 1)}, {len(lat)} attempts "
        f"of order {order}, pass {pass_no})\n",
        "\n",
        "  percentile latency\n",
        f"  {DASH * 10} {DASH * 7}\n",
    ]
    for p in PERCENTILES:
        out.append(f"\t{p:>4}{round(nearest_rank(lat, p)):>8}\n")
    out.append("\n")
    got = rv.per_run(ds, job.id, kernel.id, f"{SUITE}.allocated-pass{pass_no}")
    if got:
        allocated = sum(r.values[0] for r in got) / len(got)
        size = rv.size_text(block_size_kib(order))
        line = f"Total {size} {'huge' if order == 9 else f'order-{order} '}pages allocated = "
        line += f"{allocated:.0f}"
        free = [f for f in (rv.mem_free_kb(r.run) for r in got) if f]
        if free:
            free_kib = sum(free) / len(free)
            worth = allocated * block_size_kib(order)
            line += (
                f" ({rv.size_text(worth)} worth of {'huge' if order == 9 else ''}pages out of "
                f"{rv.size_text(free_kib)} total free => {worth * 100 / free_kib:.0f}% of free "
                "memory could be allocated"
                + (" as hugepages)" if order == 9 else f" in order-{order} blocks)")
            )
        if len(got) > 1:
            line += f" [mean of {len(got)} runs]"
        out.append(line + "\n")
    return "".join(out)


def render(ds: query.Dataset, pass_no: int = 1) -> str:
    jobs = rv.jobs_with(ds, f"{SUITE}.latency-pass{pass_no}")
    if not jobs:
        raise StackbenchError(
            f"no stress-highalloc attempt latencies (pass {pass_no}) stored for these kernels"
        )
    out = ["(all latency values are in microseconds)\n"]
    for job in jobs:
        out.append(f"\n{SUITE} {rv.label(job)}\n\n")
        blocks = [kernel_block(ds, job, k, pass_no) for k in ds.kernels]
        out.append("\n".join(b for b in blocks if b))
    return "".join(out)
