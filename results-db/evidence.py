"""What a report puts beside its verdicts so a reader can weigh them: the machine's own
noise for each headline metric, with the smallest change a comparison of that many boots
could detect, and the compaction and THP counters that show the patched code ran, judged by
the headline metrics' rule (:func:`counters`).

The detectable change is the smallest change the verdict's own rule calls with
``verdict.POWER`` (:func:`smallest`, shared with the nightly A/A's figure in
:mod:`stackbench.resultsdb.aa`): :func:`verdict.decide_batch` run on drawn boots at the look
of that many boots, so the look's O'Brien-Fleming alpha, the test the design picks (paired
by round, n - 1 degrees of freedom, where the pair's rounds hold it; Welch's otherwise) and
the kind's minimum effect are all in it. Noise is one value per boot (the verdict's unit) on
each machine: for an unpaired design the base kernel's boot-to-boot coefficient of
variation; for a paired one the spread of the per-round differences of the base and each
later kernel over sqrt 2 (a box's offset cancels in them, as it does in the test), the
median over the later kernels. ``tests/resultsdb/test_report_evidence.py`` checks the figures by
simulation: at the printed change the live rule finds it in about ``verdict.POWER`` of
comparisons."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from stackbench.resultsdb import blocks, boots, metrics, query, verdict

PAIRED, UNPAIRED = "paired by round", "unpaired"


@dataclass
class Noise:
    job: str
    metric: str
    machine: str
    boots: int  # the test's units: boots per side (unpaired) or rounds holding the pair
    mean: float
    cov: float | None  # relative (0.02 = 2%), or points for the policy's absolute kinds
    detectable: float | None
    absolute: bool
    design: str = UNPAIRED


def _job_label(job: query.JobRow) -> str:
    return f"{job.suite}/{job.test}" if job.test else job.suite


TRIALS = 2000  # simulated comparisons per candidate change


def smallest(
    base: np.ndarray,
    new: np.ndarray,
    kind: str,
    policy: verdict.Policy = verdict.DEFAULT,
    *,
    paired: bool = False,
    worse: float = -1.0,
) -> float:
    """The smallest change the live rule calls changed in the ``worse`` direction (-1: down)
    in at least ``verdict.POWER`` of the comparisons of ``base`` and ``new`` (each (T, n)
    boots without a change; column i of both one round when ``paired``): relative, or points
    for the policy's absolute kinds; inf when not even a 100% change (a 99% drop, 4 points)
    is seen. The same drawn boots serve every candidate, so power rises with the change and
    a bisection finds it."""
    absolute = kind in policy.absolute_kinds

    def power(change: float) -> float:
        moved = new + worse * change if absolute else new * (1 + worse * change)
        res = verdict.decide_batch(base, moved, kind=kind, policy=policy, paired=paired)
        return float(((res.outcome == verdict.CHANGED) & (res.sign == worse)).mean())

    # a relative drop stops short of 100%: boots of 0 have no log for the rank test
    lo, hi = policy.effect_floor(kind), 4.0 if absolute else (1.0 if worse > 0 else 0.99)
    if power(lo) >= verdict.POWER:
        return lo
    if power(hi) < verdict.POWER:
        return math.inf
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(mid) >= verdict.POWER else (mid, hi)
    return hi


_FOUND: dict[tuple[float, int, str, bool, str], float] = {}


def detectable_change(
    cov: float,
    n: int,
    kind: str,
    policy: verdict.Policy = verdict.DEFAULT,
    paired: bool = False,
) -> float:
    """The smallest change (relative, or points for absolute kinds) that ``n`` boots per
    side call changed with ``verdict.POWER`` at the look of ``n`` boots, for normal boots of
    spread ``cov`` (log-normal for the rank test's kinds; paired: ``n`` rounds whose
    differences spread ``cov * sqrt 2``, the paired test on them; else Welch's test):
    :func:`smallest` on those boots."""
    # cov rounded so a page's metrics share the simulations (a Policy holds dicts: its repr
    # is the key)
    key = (float(f"{cov:.3g}"), int(n), kind, bool(paired), repr(policy))
    if key not in _FOUND:
        z = np.random.default_rng(n).normal(size=(2, TRIALS, n))
        c = key[0]
        if kind in policy.absolute_kinds:
            base, new = 100.0 + c * z
        elif kind in policy.rank_kinds:
            # the rank test's kinds are positive (latencies): log-normal boots of the same
            # CoV, where normal ones of a large CoV would go below zero
            base, new = 100.0 * np.exp(z * math.sqrt(math.log1p(c * c)))
        else:
            base, new = 100.0 * (1 + c * z)
        _FOUND[key] = smallest(base, new, kind, policy, paired=paired)
    return _FOUND[key]


def _pair_noise(
    base: Mapping[Hashable, list[float]],
    others: Sequence[Mapping[Hashable, list[float]]],
    block_of: Mapping[Hashable, Hashable],
    absolute: bool,
) -> tuple[float, int] | None:
    """The spread the paired test sees: per later kernel whose design pairs with the base
    (:func:`blocks.pair`), the SD of its per-round differences over sqrt 2 (relative to the
    base's mean unless ``absolute``), and its rounds; the medians over those kernels."""
    found = []
    for new in others:
        pr = blocks.pair(base, new, block_of)
        if not pr.paired or pr.rounds < 2:
            continue
        b, d = np.asarray(pr.base), np.asarray(pr.new) - np.asarray(pr.base)
        sd = float(np.std(d, ddof=1)) / math.sqrt(2)
        if absolute or b.mean():
            found.append((sd if absolute else sd / abs(float(b.mean())), pr.rounds))
    if not found:
        return None
    return statistics.median(c for c, _ in found), int(statistics.median(n for _, n in found))


def noise(ds: query.Dataset, policy: verdict.Policy = verdict.DEFAULT) -> list[Noise]:
    """Per headline metric and machine, the noise and detectable change of the design the
    verdicts of that machine's pairs use (paired by round, or unpaired)."""
    if not ds.kernels:
        return []
    base = ds.kernels[0]
    boot_of = {rid: boots.boot_key(r) for rid, r in ds.runs.items()}
    block_of = {
        boot_of[rid]: blk for rid, r in ds.runs.items() if (blk := blocks.round_of(r)) is not None
    }
    out = []
    for (job_id, metric_id), per_build in ds.values.items():
        m = ds.metrics[metric_id]
        if not verdict.is_headline(m.name, m.kind, m.higher_is_better):
            continue
        by_machine: dict[str, dict[int, dict[int, list[float]]]] = {}
        for k in ds.kernels:
            for run_id, samples in per_build.get(k.id, {}).items():
                at = by_machine.setdefault(ds.runs[run_id].machine, {})
                at.setdefault(k.id, {})[run_id] = samples
        for machine, per_kernel in sorted(by_machine.items()):
            if base.id not in per_kernel:
                continue
            sides = {k: boots.per_boot(v, boot_of) for k, v in per_kernel.items()}
            means = [float(np.mean(v)) for v in sides[base.id].values() if v]
            n = len(means)
            if not n:
                continue
            mean = float(np.mean(means))
            absolute = m.kind in policy.absolute_kinds
            cov = detectable = None
            design = UNPAIRED
            others = [v for k, v in sides.items() if k != base.id]
            # the rank-tested kinds are never paired (tables.verdict)
            paired = None
            if block_of and m.kind not in policy.rank_kinds:
                paired = _pair_noise(sides[base.id], others, block_of, absolute)
            if paired is not None:
                cov, n = paired
                design = PAIRED
                detectable = detectable_change(cov, n, m.kind, policy, paired=True)
            elif n >= 2 and (absolute or mean):
                sd = float(np.std(means, ddof=1))
                cov = sd if absolute else sd / abs(mean)
                detectable = detectable_change(cov, n, m.kind, policy)
            out.append(
                Noise(
                    _job_label(ds.jobs[job_id]),
                    m.name,
                    machine,
                    n,
                    mean,
                    cov,
                    detectable,
                    absolute,
                    design,
                )  # fmt: skip
            )
    out.sort(key=lambda x: (x.job, x.metric, x.machine))
    return out


@dataclass
class Counter:
    """A THP/compaction counter or free-list summary of one job judged against the base."""

    job: str
    kernel: str
    name: str
    base_est: float | None  # the verdict's own figures (tables.verdict.compare)
    new_est: float | None
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
