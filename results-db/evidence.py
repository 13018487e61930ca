"""What a report puts beside its verdicts so a reader can weigh them: the machine's own
noise for each headline metric, with the smallest change a comparison of that many boots
could detect, and the compaction and THP counters that show the patched code ran.

Noise is the base kernel's boot-to-boot coefficient of variation (one value per boot, the
verdict's unit) on each machine. The detectable change (:func:`detectable_change`) is the
smallest change the verdict's own rule calls with ``verdict.POWER`` at n boots per side: the
look's alpha (the sequential rule's, not the total), the trimmed test with its estimated
degrees of freedom, and the kind's minimum effect (a smaller change is not called a change
whatever the noise). A closed form (t quantiles for 2n - 2 degrees of freedom at the total
alpha) promised 10.7% at 3 boots and 2% boot CoV where the rule needs several times that.
``tests/test_report_evidence.py`` checks it against an independent simulation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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


TRIALS = 2000  # simulated comparisons per candidate change


_FOUND: dict[tuple[float, int, str, str], float] = {}


def _detectable(cov: float, n: int, kind: str, policy: verdict.Policy) -> float:
    rng = np.random.default_rng(n)
    z = rng.normal(size=(2, TRIALS, n))
    absolute = kind in policy.absolute_kinds
    base = 100.0 + cov * z[0] if absolute else 100.0 * (1 + cov * z[0])

    def power(change: float) -> float:
        if absolute:
            new = 100.0 + cov * z[1] - change
        else:
            new = 100.0 * (1 + cov * z[1]) * (1 - change)
        res = verdict.decide_batch(base, new, kind=kind, policy=policy)
        return float(((res.outcome == verdict.CHANGED) & (res.sign < 0)).mean())

    lo, hi = policy.effect_floor(kind), 4.0 * (1.0 if absolute else 0.25)
    if power(lo) >= verdict.POWER:
        return lo
    if power(hi) < verdict.POWER:
        return math.inf
    # the same random boots at every candidate: power rises with the change
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(mid) >= verdict.POWER else (mid, hi)
    return hi


def detectable_change(
    cov: float, n: int, kind: str, policy: verdict.Policy = verdict.DEFAULT
) -> float:
    """The smallest change (relative, or points for absolute kinds) that ``n`` boots per
    side, unpaired, call changed with ``verdict.POWER`` at the look of ``n`` boots, for a
    boot-to-boot spread ``cov``: found by running the verdict's own rule on normal boots, so
    the look's alpha, the trimmed test's degrees of freedom and the minimum effect are all
    in it (inf when not even a 100% change would be seen)."""
    # cov rounded so a page's metrics share the simulations (a Policy holds dicts: its repr
    # is the key)
    key = (float(f"{cov:.3g}"), int(n), kind, repr(policy))
    if key not in _FOUND:
        _FOUND[key] = _detectable(*key[:3], policy)
    return _FOUND[key]


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
