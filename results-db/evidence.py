"""What a report puts beside its verdicts so a reader can weigh them: the machine's own
noise for each headline metric, with the smallest change a comparison of that many boots
could detect, and the compaction and THP counters that show the patched code ran, judged by
the headline metrics' rule (:func:`counters`).

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

from stackbench.resultsdb import boots, metrics, query, verdict


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
    """A THP/compaction counter or free-list summary of one job judged against the base."""

    job: str
    kernel: str
    name: str
    base_mean: float | None
    new_mean: float | None
    verdict: verdict.Verdict


def counters(ds: query.Dataset, policy: verdict.Policy = verdict.DEFAULT) -> list[Counter]:
    """Every judged counter (:func:`metrics.is_counter`) of every later kernel and job, by
    the stackbench table's own verdicts: boots as units, the pair's counters one
    false-discovery family (:func:`stackbench.resultsdb.tables.verdict.group`)."""
    from stackbench.resultsdb.tables import verdict as table

    if len(ds.kernels) < 2:
        return []
    return [
        Counter(_job_label(job), kernel.label, name, mb, mn, v)
        for job, kernel, rows in table.compare(ds, policy)
        for name, mb, mn, v in rows
        if metrics.is_counter(name)
    ]
