"""Per-run values out of a Dataset, for the tables that look at runs one by one (the seeds'
latency percentiles, order-N success, per-run series) rather than at means across runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stackbench.resultsdb import query

_MEMFREE = re.compile(r"^MemFree:\s+(\d+)\s+kB", re.M)
# system parameters shown in a job's label, in this order (the rest follow sorted)
LABEL_FIRST = ("scenario", "hogger", "bgload", "thp_enabled", "thp_defrag")


@dataclass
class RunValues:
    run: query.RunRow
    values: list[float]


def metric_id(ds: query.Dataset, name: str) -> int | None:
    return next((m.id for m in ds.metrics.values() if m.name == name), None)


def metric_names(ds: query.Dataset) -> list[str]:
    return sorted(m.name for m in ds.metrics.values())


def per_run(ds: query.Dataset, job_id: int, build_id: int, name: str) -> list[RunValues]:
    """The runs of one job on one kernel that have ``name``, in the order they were stored
    (run ids grow with every run ingested, across boots)."""
    mid = metric_id(ds, name)
    if mid is None:
        return []
    by_run = ds.values.get((job_id, mid), {}).get(build_id, {})
    return [RunValues(ds.runs[rid], vals) for rid, vals in sorted(by_run.items())]


def jobs_with(ds: query.Dataset, name: str) -> list[query.JobRow]:
    """Jobs that have ``name`` on any kernel, in a stable order."""
    mid = metric_id(ds, name)
    ids = {job_id for (job_id, m) in ds.values if m == mid}
    return sorted((ds.jobs[j] for j in ids), key=lambda j: (j.suite, j.test, label(j)))


def label(job: query.JobRow, skip: tuple[str, ...] = ()) -> str:
    """``key=value`` of the job's params, the scenario and THP knobs first."""
    params = {k: v for k, v in (job.params or {}).items() if k not in skip}
    keys = [k for k in LABEL_FIRST if k in params]
    keys += sorted(k for k in params if k not in LABEL_FIRST)
    return " ".join(f"{k}={_text(params[k])}" for k in keys)


def _text(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def mem_free_kb(run: query.RunRow, stage: str = "start") -> int | None:
    """MemFree at a snapshot of the run (``start``: when the benchmark began)."""
    text = ((run.sysstate or {}).get(stage) or {}).get("/proc/meminfo")
    if not text:
        return None
    m = _MEMFREE.search(text)
    return int(m.group(1)) if m else None


def size_text(kib: float) -> str:
    """``749G``, ``1.5G``, ``380M``, ``32K``: sizes as the seeds write them."""
    for unit, div in (("T", 1 << 30), ("G", 1 << 20), ("M", 1 << 10)):
        if kib >= div:
            v = kib / div
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return f"{kib:.0f}K"
