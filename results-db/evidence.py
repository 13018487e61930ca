"""What a report puts beside its verdicts so a reader can weigh them: the machine's own
noise for each headline metric, with the smallest change a comparison of that many boots
could detect, and the compaction and THP counters that show the patched code ran.

Noise is the base kernel's boot-to-boot coefficient of variation (one value per boot, the
verdict's unit) on each machine. The detectable change (:func:`detectable`) is the verdict's
own two-sample bound at n boots per side: ``(t(1 - a/2) + t(POWER)) * SE`` with ``a`` the
alpha of the look at n boots (the sequential rule's, not the total), Student's t for the
trimmed test's degrees of freedom and its standard error, never below the policy's minimum
effect for the metric's kind (a smaller change is not called a change whatever the noise).
``tests/test_report_evidence.py`` checks it by simulating the rule at that change."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from stackbench.resultsdb import boots, query, verdict

# /proc/vmstat counters that move when compaction or THP code runs
COUNTERS = (
    "compact_stall",
    "compact_fail",
    "compact_success",
    "compact_migrate_scanned",
    "compact_free_scanned",
    "compact_daemon_wake",
    "pgmigrate_success",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_collapse_alloc",
)
# a counter "moved" when a kernel's mean per run differs from the base's by more than this
# share of the base (and by more than one event)
MOVED = 0.10


@dataclass
class Noise:
    job: str
    metric: str
    machine: str
    boots: int
    mean: float
    cov: float | None  # relative (0.02 = 2%), or points for the policy's absolute kinds
    detectable: float | None
    absolute: bool


def _job_label(job: query.JobRow) -> str:
    return f"{job.suite}/{job.test}" if job.test else job.suite


def _trim_inflation(n: int) -> float:
    """How much wider the trimmed test's standard error is than the plain one for normal
    boots: the winsorized spread of the expected order statistics (Blom's), over the
    untrimmed share."""
    g = int(verdict.TRIM * n)
    if g == 0:
        return 1.0
    z = stats.norm.ppf((np.arange(1, n + 1) - 0.375) / (n + 0.25))
    wins = np.clip(z, z[g], z[n - g - 1])
    return float(math.sqrt(wins.var(ddof=1) / z.var(ddof=1)) / (1 - 2 * g / n))


def detectable_change(
    cov: float, n: int, kind: str, policy: verdict.Policy = verdict.DEFAULT
) -> float:
    """The smallest change (relative, or points for absolute kinds) that ``n`` boots per
    side, unpaired, call changed with ``verdict.POWER`` at the look of ``n`` boots, for a
    boot-to-boot spread ``cov``: never below the kind's minimum effect."""
    h = n - 2 * int(verdict.TRIM * n)
    df = 2 * (h - 1)
    a = policy.look_alpha(n)
    factor = stats.t.isf(a / 2, df) + stats.t.ppf(verdict.POWER, df)
    se = math.sqrt(2 / n) * cov * _trim_inflation(n)
    return max(float(factor * se), policy.effect_floor(kind))


def noise(ds: query.Dataset, policy: verdict.Policy = verdict.DEFAULT) -> list[Noise]:
    """Per headline metric and machine, the base kernel's noise and detectable change."""
    if not ds.kernels:
        return []
    base = ds.kernels[0]
    boot_of = {rid: boots.boot_key(r) for rid, r in ds.runs.items()}
    out = []
    for (job_id, metric_id), per_build in ds.values.items():
        m = ds.metrics[metric_id]
        if not verdict.is_headline(m.name, m.kind, m.higher_is_better):
            continue
        by_machine: dict[str, dict[int, list[float]]] = {}
        for run_id, samples in per_build.get(base.id, {}).items():
            by_machine.setdefault(ds.runs[run_id].machine, {})[run_id] = samples
        for machine, values in sorted(by_machine.items()):
            means = [float(np.mean(v)) for v in boots.per_boot(values, boot_of).values() if v]
            n = len(means)
            if not n:
                continue
            mean = float(np.mean(means))
            absolute = m.kind in policy.absolute_kinds
            cov = detectable = None
            if n >= 2 and (absolute or mean):
                sd = float(np.std(means, ddof=1))
                cov = sd if absolute else sd / abs(mean)
                detectable = detectable_change(cov, n, m.kind, policy)
            out.append(
                Noise(
                    _job_label(ds.jobs[job_id]), m.name, machine, n, mean, cov, detectable, absolute
                )
            )
    out.sort(key=lambda x: (x.job, x.metric, x.machine))
    return out


@dataclass
class Counter:
    name: str
    per_kernel: list[float | None]  # mean per run, in the dataset's kernel order
    moved: bool


def counters(ds: query.Dataset) -> list[Counter]:
    """The compaction and THP counters of the runs, per kernel (mean per run over every job
    that recorded them), and whether each moved against the base."""
    sums: dict[str, dict[int, list[float]]] = {}
    for (_job, metric_id), per_build in ds.values.items():
        name = ds.metrics[metric_id].name.rsplit(".", 1)[-1]
        if name not in COUNTERS:
            continue
        for build_id, runs in per_build.items():
            for samples in runs.values():
                if samples:
                    sums.setdefault(name, {}).setdefault(build_id, []).append(float(samples[-1]))
    out = []
    for name in COUNTERS:
        if name not in sums:
            continue
        row = [
            float(np.mean(sums[name][k.id])) if sums[name].get(k.id) else None for k in ds.kernels
        ]
        base = row[0]
        moved = base is not None and any(
            x is not None and abs(x - base) > max(MOVED * abs(base), 1.0) for x in row[1:]
        )
        out.append(Counter(name, row, moved))
    return out
