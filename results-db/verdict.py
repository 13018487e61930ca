"""stackbench's own verdict per metric: changed, unchanged or undecided, with the evidence.

The unit of evidence is a BOOT of a kernel (docs/verdict.md says why). Callers pass, per side,
{boot: per-run values}, or a flat list when every run was its own boot. Runs of one boot share
its memory layout and the host's load, so each boot is reduced to the mean of its runs and
the tests run on those means; a first run measurably unlike its boot's later runs
(:func:`warmup_detected`) is dropped from every boot of both sides. Looks, ``n_base``/``n_new``
and ``runs_wanted`` count boots per side.

The verdict of a kernel against its base is a function of those two kernels' boots alone
(their rounds and boxes included: :mod:`stackbench.resultsdb.blocks` pairs them), so every
view of a pair shows the same verdict. The rule is a group-sequential design:

* The looks are ``Policy.schedule()`` (default 3, 5 and 10 boots per side, the plan's first
  rounds and the adaptive looks). The false-positive budget ``alpha`` (0.75% per metric over
  all looks; docs/verdict.md says why not 1%) is spent O'Brien-Fleming-type (Lan-DeMets):
  :meth:`Policy.look_alpha` is one look's share, nearly all of it at the cap.
* The interval shown is the decision's: at confidence ``1 - look_alpha`` (``Verdict.level``).
  **changed** when it excludes 0, the estimate is at least the kind's minimum effect, and the
  change survives Benjamini-Hochberg within its family (the pair's own metrics of one job,
  headline metrics and THP/compaction counters apart: :func:`family`); **unchanged** ("~") when it lies inside +-minimum
  effect (the equivalence margin IS the minimum effect); **undecided** otherwise:
  ``runs_wanted`` names the next look, 0 at the cap.

Tests, chosen by the metric's kind and the design: for throughputs, percentages and counts,
the paired t on the per-round differences of boot means wherever the pair's rounds hold it
(:func:`stackbench.resultsdb.blocks.pair`: a box's offset or a host's drift cancels), else
Welch's test (``scipy.stats.ttest_ind(trim=TRIM, equal_var=False)``, each kernel's variance
its own); both trim one boot per end from 20 boots per side (``TRIM``). For latencies the
exact Mann-Whitney test with the Hodges-Lehmann ratio and its distribution-free interval at
the same level (it cannot decide before 10 boots: the best exact p of 5 per side is 2/252).
``bench/verdict_sim.py`` measures false positives, power and the agreement of views.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy import stats

from stackbench.resultsdb import mannwhitney
from stackbench.resultsdb.boots import Side, units

Outcome = Literal["changed", "unchanged", "undecided", "n/a"]
Direction = Literal["better", "worse", "none"]

# the test of a latency timed with a coarse clock: none, it stays undecided (coarse_clock)
COARSE_CLOCK = "coarse clock"

# outcome codes of the batch core
UNCHANGED, CHANGED, UNDECIDED = 0, 1, 2
_OUTCOMES: tuple[Outcome, Outcome, Outcome] = ("unchanged", "changed", "undecided")


def _default_min_effect() -> dict[str, float]:
    return {
        "throughput": 0.02,
        "latency": 0.05,
        "duration": 0.05,
        "count": 0.05,
        "percent": 1.0,
        "variability": 1.0,
        "": 0.02,
    }


# Boots trimmed per end by both tests: int(TRIM * n). Not 10% (one of ten): at the cap that
# cost more power than bad boots cost the untrimmed test (docs/verdict.md: 87% against 94%).
TRIM = 0.05
# The one power figure the smallest detectable change is quoted at (evidence.py, aa.py).
POWER = 0.8


@dataclass(frozen=True)
class Policy:
    """What stackbench calls a change. Effects are relative (0.02 = 2%) except for the
    ``absolute_kinds`` (percentages of something, where 1.0 = one percentage point). The
    minimum effect is also the equivalence margin: "~" never hides a change that "changed"
    would report."""

    alpha: float = 0.0075  # per-metric false "changed" rate over all looks together
    fdr_q: float = 0.05  # Benjamini-Hochberg level across the metrics of one family
    min_effect: dict[str, float] = field(default_factory=_default_min_effect)
    absolute_kinds: tuple[str, ...] = ("percent", "variability")
    rank_kinds: tuple[str, ...] = ("latency",)
    start_runs: int = 3
    max_runs: int = 10
    looks: tuple[int, ...] = (3, 5, 10)

    def effect_floor(self, kind: str) -> float:
        return self.min_effect.get(kind, self.min_effect.get("", 0.02))

    def equivalence_margin(self, kind: str) -> float:
        """The "~" bound of the kind: the minimum effect itself."""
        return self.effect_floor(kind)

    def schedule(self) -> tuple[int, ...]:
        """Every look the sequential rule takes from ``start_runs`` to the cap, as
        :meth:`next_look` walks it (a cap beyond the last planned look is one more look)."""
        n = min(self.start_runs, self.max_runs)
        out = [n]
        while (n := self.next_look(n)) and n > out[-1]:
            out.append(n)
        return tuple(out)

    @property
    def n_looks(self) -> int:
        return len(self.schedule())

    def spending(self) -> tuple[float, ...]:
        """Per look of :meth:`schedule`, the alpha it may spend: the increments of the
        Lan-DeMets O'Brien-Fleming-type function ``2 - 2 Phi(z(1 - alpha/2) / sqrt(t))`` at
        the information fractions ``t = look / cap``. They add up to ``alpha``, so a metric
        judged at every look is wrongly called changed at most ``alpha`` of the time."""
        looks = self.schedule()
        z = stats.norm.isf(self.alpha / 2)
        spent = [2 * stats.norm.sf(z / math.sqrt(n / looks[-1])) for n in looks]
        return tuple(float(s - prev) for s, prev in zip(spent, [0.0, *spent[:-1]], strict=True))

    def look_alpha(self, n: int) -> float:
        """The alpha of a judgement at ``n`` boots per side: that of the last look of the
        schedule at or below ``n`` (the first look's below it), so data judged between
        looks never spends more than the look it has reached."""
        looks = self.schedule()
        i = max([k for k, size in enumerate(looks) if size <= n], default=0)
        return self.spending()[i]

    def starting_at(self, runs: int) -> Policy:
        """The same rule for a pipeline that starts with ``runs`` per side: the first look
        moves there, so the error budget is spent over the looks that really happen."""
        later = tuple(sorted({x for x in self.looks if runs < x < self.max_runs}))
        return replace(self, start_runs=runs, looks=(runs, *later, self.max_runs))

    def next_look(self, n: int) -> int:
        """Runs per side wanted for the next look after ``n``; 0 at or past the cap."""
        if n >= self.max_runs:
            return 0
        for size in sorted(self.looks):
            if size > n:
                return min(size, self.max_runs)
        return self.max_runs


DEFAULT = Policy()

# The metrics a reader acts on. For the suites stackbench ships, each suite's own result:
# vm-scalability's throughput, thpscale's huge-page fault latencies and huge-page success,
# stress-highalloc's success rates. Their other metrics (free_time, fault-base, NUMA locality,
# vmstat counters, durations) explain a change but are not one, and a rank-tested latency
# cannot decide before 10 boots: as a headline, every job would run that long. For other
# suites (imports), a kind with a preferred direction that is a result of the benchmark.
# Only headline metrics keep a comparison measuring or fill the default verdict section.
HEADLINE_KINDS = ("throughput", "latency", "percent")
HEADLINES: dict[str, tuple[str, ...]] = {
    "vm-scalability": (r"^vm-scalability\.throughput$",),
    "thpscale": (r"^thpscale\.fault-(huge|both)-\d+$", r"^thpscale\.Percentage huge-\d+$"),
    "stress-highalloc": (r"^stress-highalloc\.",),
}


def is_headline(name: str, kind: str, higher_is_better: bool | None) -> bool:
    """Does this metric matter on its own (see HEADLINES and HEADLINE_KINDS)?"""
    if higher_is_better is None:
        return False
    patterns = HEADLINES.get(name.split(".", 1)[0])
    if patterns is not None:
        return any(re.search(p, name) for p in patterns)
    return kind in HEADLINE_KINDS


@dataclass
class Verdict:
    """One metric of one comparison. ``change_pct`` and its interval are relative to the
    base (None when the base mean is 0 or a side has under 2 runs); the interval is the
    decision's, at confidence ``level`` (1 - the look's alpha); ``p_value`` is the test's
    raw two-sided p; ``q_value`` is p on the scale of the total alpha (p * alpha /
    look alpha), Benjamini-Hochberg-adjusted within the metric's family by
    :func:`judge_many`; ``runs_wanted`` is the runs per side the rule wants before judging
    again (0: decided, or nothing more to gain). ``base_est``/``new_est`` are the figures
    every view prints beside the change, named by ``estimator`` (:func:`figures`)."""

    metric: str
    outcome: Outcome
    direction: Direction
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    q_value: float | None
    test: str
    n_base: int
    n_new: int
    runs_wanted: int
    runs_base: int = 0
    runs_new: int = 0
    warmup_dropped: bool = False
    level: float | None = None
    # each side's boots summarised as the test summarises them (:func:`figures`)
    base_est: float | None = None
    new_est: float | None = None
    estimator: str = ""

    @property
    def level_text(self) -> str:
        """The interval's confidence as tables print it ("99.03%"), "" without one."""
        if self.level is None:
            return ""
        return f"{100 * self.level:.{max(2, -math.floor(math.log10(1 - self.level)) - 1)}f}%"

    @property
    def label(self) -> str:
        """One word for tables: better, worse, changed (no preferred direction), ~, ..."""
        if self.outcome == "changed":
            return self.direction if self.direction != "none" else "changed"
        if self.outcome == "unchanged":
            return "~"
        if self.test == COARSE_CLOCK:
            return f"{self.outcome} ({COARSE_CLOCK})"
        return self.outcome


@dataclass
class Batch:
    """Results of the rule for T comparisons of equal shape (the simulation's fast path)."""

    outcome: np.ndarray  # UNCHANGED / CHANGED / UNDECIDED before any cross-metric control
    sign: np.ndarray  # sign of the estimated change (-1, 0, 1)
    change_pct: np.ndarray
    ci_low_pct: np.ndarray
    ci_high_pct: np.ndarray
    p_value: np.ndarray  # raw two-sided p of "no change"
    big: np.ndarray  # estimated effect reaches the minimum effect
    test: str
    level: float  # the interval's confidence: 1 - the look's alpha


# ---------------------------------------------------------------------------------------------
# the test paths, vectorised over T comparisons


def _batch(
    d: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: np.ndarray, scale: np.ndarray,
    floor: float, absolute: bool, level: float, test: str,
) -> Batch:  # fmt: skip
    """A difference ``d`` with its interval [lo, hi] at ``level`` (absolute units) and p."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(scale > 0, 100.0 / np.where(scale > 0, scale, 1.0), np.nan)
        least = np.full_like(d, floor) if absolute else floor * scale
    return Batch(
        outcome=np.full(d.shape, UNDECIDED), sign=np.sign(d), change_pct=d * pct,
        ci_low_pct=lo * pct, ci_high_pct=hi * pct, p_value=p,
        big=(np.abs(d) >= least) & (d != 0), test=test, level=level,
    )  # fmt: skip


def _exact(d: np.ndarray, half: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # no spread at all (identical runs): the difference is what it is
    none = ~np.isfinite(half) | ~np.isfinite(p)
    return np.where(none, 0.0, half), np.where(none, np.where(d == 0, 1.0, 0.0), p)


def _yuen(base: np.ndarray, new: np.ndarray, alpha: float) -> tuple[np.ndarray, ...]:
    """Yuen's trimmed Welch test, each side's (winsorized) variance its own."""
    d = location(new, False) - location(base, False)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        # identical boots (a constant metric) have no spread: _exact decides them
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_ind(new, base, axis=1, equal_var=False, trim=TRIM)
        ci = res.confidence_interval(1 - alpha)
    half, p = _exact(d, np.asarray((ci.high - ci.low) / 2), np.asarray(res.pvalue))
    return d, half, p


def _paired(base: np.ndarray, new: np.ndarray, alpha: float) -> tuple[np.ndarray, ...]:
    """The paired test on per-round differences: scipy's paired t below 20 rounds (g = 0),
    from 20 on trimmed (Tukey-McLaughlin: trimmed mean, winsorized variance, n - 2g - 1
    degrees of freedom): scipy has no trimmed one-sample t."""
    diff = np.sort(new - base, axis=1)
    n = diff.shape[1]
    g = int(TRIM * n)
    d = stats.trim_mean(diff, TRIM, axis=1)
    wins = np.clip(diff, diff[:, g : g + 1], diff[:, n - g - 1 : n - g])
    df = n - 2 * g - 1
    se = np.sqrt(wins.var(axis=1, ddof=1) / n) / (1 - 2 * g / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.where(se > 1e-12 * np.maximum(np.abs(base).mean(axis=1), 1e-300), se, np.nan)
        p = 2 * stats.t.sf(np.abs(d / se), df)
    half, p = _exact(d, stats.t.isf(alpha / 2, df) * se, p)
    return d, half, p


def _rank(base: np.ndarray, new: np.ndarray, floor: float, alpha: float) -> Batch:
    nb, nn = base.shape[1], new.shape[1]
    diffs = np.log(new)[:, :, None] - np.log(base)[:, None, :]
    diffs = np.sort(diffs.reshape(diffs.shape[0], -1), axis=1)
    nm = nb * nn
    hl = np.median(diffs, axis=1)
    u0 = (diffs > 0).sum(axis=1) + 0.5 * (diffs == 0).sum(axis=1)
    tail = mannwhitney.lower_tail
    p = np.minimum(1.0, 2 * np.minimum(tail(u0, nn, nb), tail(nm - u0, nn, nb)))
    k = mannwhitney.order_index(nn, nb, alpha / 2)
    if k >= 1:
        lo, hi = np.expm1(diffs[:, k - 1]) * 100, np.expm1(diffs[:, nm - k]) * 100
    else:
        lo, hi = np.full(hl.shape, -100.0), np.full(hl.shape, np.inf)
    return Batch(
        outcome=np.full(hl.shape, UNDECIDED), sign=np.sign(hl), change_pct=np.expm1(hl) * 100,
        ci_low_pct=lo, ci_high_pct=hi, p_value=p, big=np.abs(hl) >= math.log1p(floor),
        test="mann-whitney", level=1 - alpha,
    )  # fmt: skip


def decide_batch(
    base: np.ndarray,
    new: np.ndarray,
    *,
    kind: str = "",
    policy: Policy = DEFAULT,
    rank: bool | None = None,
    paired: bool = False,
) -> Batch:
    """The rule for T comparisons at once: ``base`` is (T, n_base), ``new`` is (T, n_new),
    one value per boot, at least 2 per side; ``paired``: column i of both is round i on one
    box (equal sizes). ``rank`` forces or forbids the rank path (None: as :func:`judge`
    decides, by kind where every row is positive and free of ties)."""
    base = np.asarray(base, dtype=float)
    new = np.asarray(new, dtype=float)
    floor = policy.effect_floor(kind)
    alpha = policy.look_alpha(min(base.shape[1], new.shape[1]))
    if rank is None:
        rank = _use_rank(base, new, kind, policy)
    if rank:
        res = _rank(base, new, floor, alpha)
        bound = 100 * policy.equivalence_margin(kind)  # the interval is a ratio, in %
        inside = (res.ci_low_pct > -bound) & (res.ci_high_pct < bound)
    else:
        absolute = kind in policy.absolute_kinds
        scale = np.abs(location(base, False))
        d, half, p = (_paired if paired else _yuen)(base, new, alpha)
        lo, hi = d - half, d + half
        test = "paired by round" if paired else "yuen-welch"
        res = _batch(d, lo, hi, p, scale, floor, absolute, 1 - alpha, test)
        margin = policy.equivalence_margin(kind) * (1.0 if absolute else scale)
        # identical sides (all zeros included, where no relative margin exists) are equal
        inside = ((lo > -margin) & (hi < margin)) | ((d == 0) & (lo == 0) & (hi == 0))
    excludes = (res.ci_low_pct > 0) | (res.ci_high_pct < 0)
    sig = (res.p_value <= alpha) & excludes
    res.outcome = np.where(sig & res.big, CHANGED, np.where(inside, UNCHANGED, UNDECIDED))
    return res


# ---------------------------------------------------------------------------------------------
# public API


def _clean(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def location(units: np.ndarray, rank: bool) -> np.ndarray:
    """Each row's boots (the last axis) as its test summarises them: the median for the
    rank test, else the ``TRIM``-trimmed mean the t tests compare (untrimmed below 20)."""
    return np.median(units, axis=-1) if rank else stats.trim_mean(units, TRIM, axis=-1)


def estimator(rank: bool, boots: int) -> str:
    """The name of :func:`location` for ``boots`` per side, as the views label the figures."""
    return "median" if rank else ("trimmed mean" if int(TRIM * boots) else "mean")


def figures(b: np.ndarray, n: np.ndarray, rank: bool) -> tuple[float | None, float | None, str]:
    """A verdict row's base and new figures and their name: :func:`location` of the boots
    the test used (after the warm-up rule; paired, the rounds holding both). Every view
    prints these beside the change, never a mean beside a Hodges-Lehmann ratio."""
    b_est = float(location(b, rank)) if b.size else None
    n_est = float(location(n, rank)) if n.size else None
    return b_est, n_est, estimator(rank, max(b.size, n.size))


def _num(x: float) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _direction(sign: float, higher_is_better: bool | None) -> Direction:
    if higher_is_better is None or sign == 0:
        return "none"
    return "better" if (sign > 0) == higher_is_better else "worse"


def _use_rank(base: np.ndarray, new: np.ndarray, kind: str, policy: Policy) -> bool:
    if kind not in policy.rank_kinds:
        return False
    pooled = np.sort(np.concatenate([base, new], axis=-1), axis=-1)
    if (pooled <= 0).any():
        return False
    # exact rank p-values assume no ties; the pairwise log ratios must be distinct as well
    return not (np.diff(pooled, axis=-1) == 0).any()


def judge(
    base: Side,
    new: Side,
    *,
    higher_is_better: bool | None,
    kind: str = "",
    policy: Policy = DEFAULT,
    metric: str = "",
    paired: bool = False,
) -> Verdict:
    """The verdict on one metric (:func:`judge_many` of a family of one). Each side is one
    value per run (every run its own boot) or {boot: per-run values}; the test's unit is the
    boot mean, so noise shared by the runs of a boot is in the variance and cannot look like
    an effect. ``n_base``/``n_new`` and ``runs_wanted`` count boots; ``runs_base``/
    ``runs_new`` count runs."""
    pair = (base, new, higher_is_better, kind, paired)
    return replace(judge_many({metric: pair}, policy)[metric], metric=metric)


def _too_few(
    metric: str, b: np.ndarray, n: np.ndarray, runs_b: int, runs_n: int, drop: bool,
    policy: Policy, rank: bool,
) -> Verdict:  # fmt: skip
    # one boot per side (however many runs it holds) says nothing about boot-to-boot
    # noise: more boots are needed, not more runs
    v = Verdict(
        metric, "n/a", "none", None, None, None, None, None, "", b.size, n.size,
        max(policy.start_runs, 2), runs_b, runs_n, drop, None, *figures(b, n, rank),
    )  # fmt: skip
    if runs_b >= 2 and runs_n >= 2:
        v.outcome = "undecided"
        v.test = "one boot per side"
    return v


def coarse_clock(metric: str, base: Side, new: Side) -> Verdict:
    """The verdict on a latency that a side timed with a coarse clock (a jiffies clocksource,
    one that changed during a run: jobs/benchmarks/collect.py): undecided, never better or worse, and
    more runs on the same clock would not help. Not part of any false-discovery family."""
    b, n, runs_b, runs_n, drop = units(base, new)
    return Verdict(
        metric, "undecided", "none", None, None, None, None, None, COARSE_CLOCK, b.size, n.size,
        0, runs_b, runs_n, drop, None, *figures(b, n, True),
    )  # fmt: skip


def _verdict(
    metric: str, res: Batch, i: int, higher_is_better: bool | None, q: float, b: np.ndarray,
    n: np.ndarray, policy: Policy,
) -> Verdict:  # fmt: skip
    code = int(res.outcome[i])
    return Verdict(
        metric=metric,
        outcome=_OUTCOMES[code],
        direction=_direction(float(res.sign[i]), higher_is_better) if code == CHANGED else "none",
        change_pct=_num(res.change_pct[i]),
        ci_low_pct=_num(res.ci_low_pct[i]),
        ci_high_pct=_num(res.ci_high_pct[i]),
        p_value=float(res.p_value[i]),
        q_value=q,
        test=res.test,
        n_base=int(b.size),
        n_new=int(n.size),
        runs_wanted=policy.next_look(min(b.size, n.size)) if code == UNDECIDED else 0,
        level=res.level,
    )


def bh_adjust(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    The p-values come already scaled to the total alpha, so they can exceed 1; clipping
    them to 1 first leaves every q-value as it was (a q-value is capped at 1 anyway). A NaN
    p-value counts as 1 (no evidence) instead of turning every q-value of the table into NaN.
    """
    arr = np.asarray(p, dtype=float)
    if arr.size == 0:
        return arr
    arr = np.where(np.isnan(arr), 1.0, np.clip(arr, 0.0, 1.0))
    return stats.false_discovery_control(arr, method="bh")


def judge_many(
    pairs: Mapping[str, tuple],
    policy: Policy = DEFAULT,
    families: Mapping[str, Hashable] | None = None,
) -> dict[str, Verdict]:
    """Verdicts for all metrics of one comparison: ``pairs[name] = (base, new,
    higher_is_better, kind[, paired])``; paired sides are flat, one boot mean per round in
    round order (:func:`stackbench.resultsdb.blocks.pair`). A change must survive
    Benjamini-Hochberg at ``policy.fdr_q`` within its false-discovery family (on p-values
    on the scale of the total alpha) as well as its look's alpha on its own; a metric that
    loses its significance to the correction is undecided and asks for more boots.
    ``families[name]`` is each metric's family (:func:`family`; default: all of ``pairs``).

    Metrics of the same kind, test and boots per side are judged as one batch, since a
    comparison page holds thousands of metrics and the tests' per-call overhead, not their
    arithmetic, was its cost."""
    out: dict[str, Verdict | None] = dict.fromkeys(pairs)
    batches: dict[tuple[str, bool, bool, int, int], list[tuple]] = {}
    for name, (base, new, hib, kind, *how) in pairs.items():
        b, n, runs_b, runs_n, drop = units(base, new)
        if min(b.size, n.size) < 2:
            out[name] = _too_few(
                name, b, n, runs_b, runs_n, drop, policy, kind in policy.rank_kinds
            )
            continue
        paired = bool(how and how[0]) and b.size == n.size
        key = (kind, _use_rank(b, n, kind, policy), paired, b.size, n.size)
        batches.setdefault(key, []).append((name, b, n, hib, runs_b, runs_n, drop))
    for (kind, rank, paired, nb, nn), items in batches.items():
        sides = np.stack([it[1] for it in items]), np.stack([it[2] for it in items])
        res = decide_batch(*sides, kind=kind, policy=policy, rank=rank, paired=paired)
        # the rows' figures, of the same boots and summary as the test (figures())
        est_b, est_n = (location(x, rank) for x in sides)
        named = estimator(rank, max(nb, nn))
        # on the scale of the total alpha: p <= look alpha reads q <= alpha
        scale = policy.alpha / policy.look_alpha(min(nb, nn))
        for i, (name, b, n, hib, runs_b, runs_n, drop) in enumerate(items):
            q = min(1.0, float(res.p_value[i]) * scale)
            v = _verdict(name, res, i, hib, 1.0 if math.isnan(q) else q, b, n, policy)
            v.runs_base, v.runs_new, v.warmup_dropped = runs_b, runs_n, drop
            v.base_est, v.new_est, v.estimator = float(est_b[i]), float(est_n[i]), named
            out[name] = v
    done: dict[str, Verdict] = {k: v for k, v in out.items() if v is not None}
    grouped: dict[Hashable, list[tuple[str, float]]] = {}
    for name, v in done.items():
        if v.outcome != "n/a":
            fam = (families or {}).get(name)
            grouped.setdefault(fam, []).append((name, v.q_value if v.q_value is not None else 1.0))
    for tested in grouped.values():
        _control(done, tested, policy)
    return done


def family(job: Hashable, kernel: Hashable, group: Hashable) -> tuple[Hashable, ...]:
    """The false-discovery family of a metric in a comparison: one later kernel against the
    base, one job, and one ``group`` (tables.verdict: headline, THP/compaction counter, other).
    A pair's verdicts read the same on a page of one kernel or of twenty, and a job's few
    headline metrics or counters never lose their power to its hundreds of side metrics."""
    return (job, kernel, group)


def _control(done: dict[str, Verdict], tested: list[tuple[str, float]], policy: Policy) -> None:
    """Benjamini-Hochberg over one family, in place: a change that does not survive it is
    undecided; every q-value becomes the family's adjusted one."""
    qs_bh = bh_adjust([q for _, q in tested])
    for (name, _), q in zip(tested, qs_bh, strict=True):
        v = done[name]
        if v.outcome == "changed" and q > policy.fdr_q:
            # the rule said changed on its own; within its family it is not yet convincing
            wanted = policy.next_look(min(v.n_base, v.n_new))
            v = replace(v, outcome="undecided", direction="none", runs_wanted=wanted)
        done[name] = replace(v, q_value=float(q))


def runs_needed(
    verdicts: Verdict | Mapping[str, Verdict] | Iterable[Verdict], policy: Policy = DEFAULT
) -> int:
    """Runs per side the pipeline should have before judging again: the largest next look any
    metric asks for; 0 when every metric is decided (or the cap is reached)."""
    if isinstance(verdicts, Verdict):
        items: Iterable[Verdict] = [verdicts]
    elif isinstance(verdicts, Mapping):
        items = verdicts.values()
    else:
        items = verdicts
    wanted = [min(v.runs_wanted, policy.max_runs) for v in items]
    return max(wanted, default=0)


def per_run(values: Mapping[int, Sequence[float]]) -> list[float]:
    """One value per run: the mean of that run's samples, in run-id order."""
    out = []
    for run_id in sorted(values):
        arr = _clean(values[run_id])
        if arr.size:
            out.append(float(arr.mean()))
    return out
