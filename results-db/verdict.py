"""stackbench's own verdict per metric: changed, unchanged or undecided, with the evidence.

The unit of evidence is a BOOT of a kernel (docs/verdict.md says why). Callers pass, per side,
{boot: per-run values}, or a flat list when every run was its own boot. Runs of one boot share
its memory layout and the host's load, so each boot is reduced to the mean of its runs and
the tests run on those means; a first run measurably unlike its boot's later runs
(:func:`warmup_detected`) is dropped from every boot of both sides. Looks, ``n_base``/``n_new``
and ``runs_wanted`` count boots per side.

The rule is a small group-sequential design:

* Start with ``Policy.start_runs`` runs per side; the planned looks are ``Policy.looks``
  (default 5, 10 and 20 runs per side; :meth:`Policy.starting_at` moves the first look).
  Each look may spend ``alpha / len(looks)`` of the false-positive budget (Bonferroni over
  the planned looks), so a metric judged at every look of the schedule is still wrongly
  called "changed" at most ``alpha`` (0.5%) of the time. Data judged once (an import with
  any number of runs) is held to the same per-look level, which is conservative.
* **changed**: the difference is significant at that stringent level (and survives the
  Benjamini-Hochberg false-discovery control within its family: one later kernel against the
  base, one job, headline metrics apart from the others, see :func:`judge_many` and
  :func:`family`) AND the estimated effect is at least the minimum effect that matters for
  the metric's kind (a 0.3% throughput change is real on a quiet machine and still irrelevant).
* **unchanged**: two one-sided tests (TOST) show the effect lies inside +-minimum effect, at
  ``equivalence_alpha / len(looks)`` per look.
* **undecided** otherwise: ``runs_wanted`` names the next look (runs per side); at the cap the
  rule stays undecided rather than guess, with ``runs_wanted == 0``.

Tests, chosen by the metric's kind: Welch's t on the boot means for throughputs,
percentages and counts (change: difference of means relative to the base); for latencies the
exact Mann-Whitney test with the Hodges-Lehmann ratio and its distribution-free interval,
deciding from the 10-boot look on (an exact rank test of 5 or 6 per side cannot reach the
per-look level: best p = 2/252 and 2/924), and Welch with ties or non-positive values.
``bench/verdict_sim.py`` measures false positives and power against LKP's and mmtests' rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats

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


def _default_margin() -> dict[str, float]:
    # The equivalence margin is the largest change that "~" may hide. TOST can only show
    # |d| + t * SE < margin, and at the first look (5 boots per side) t * SE is about
    # 1.6 * CoV * 2 for a boot-level CoV: with the 2% of a quiet QEMU guest, 3.1%. A margin
    # equal to the 2% minimum effect could therefore never say "~" before the cap (A/A cost
    # 18.9 runs per side, a third still undecided); 4% decides most A/A comparisons at the
    # first or second look and stays below the 5% a patch stack's author is asked about.
    # Latencies and durations are skewed and swing with the host (CoV 5-10% per boot):
    # 10%. Counters (vmstat) are event counts that follow the workload's length and the
    # page cache state, 10-30% boot to boot, and are read as context, never as a verdict
    # of their own: 20%. Percentages (huge-page success) are absolute points: 2 points.
    return {
        "throughput": 0.04,
        "latency": 0.10,
        "duration": 0.10,
        "count": 0.20,
        "percent": 2.0,
        "variability": 2.0,
        "": 0.04,
    }


@dataclass(frozen=True)
class Policy:
    """What stackbench calls a change. Effects are relative (0.02 = 2%) except for the
    ``absolute_kinds`` (percentages of something, where 1.0 = one percentage point)."""

    alpha: float = 0.005  # per-metric false "changed" rate over all planned looks
    fdr_q: float = 0.05  # Benjamini-Hochberg level across the metrics of one comparison
    equivalence_alpha: float = 0.05  # per-metric false "unchanged" rate at the effect bound
    min_effect: dict[str, float] = field(default_factory=_default_min_effect)
    margin: dict[str, float] = field(default_factory=_default_margin)
    absolute_kinds: tuple[str, ...] = ("percent", "variability")
    rank_kinds: tuple[str, ...] = ("latency",)
    start_runs: int = 5
    max_runs: int = 20
    looks: tuple[int, ...] = (5, 10, 20)
    confidence: float = 0.95  # the interval shown to people

    def effect_floor(self, kind: str) -> float:
        return self.min_effect.get(kind, self.min_effect.get("", 0.02))

    def equivalence_margin(self, kind: str) -> float:
        """The "~" bound of the kind: never below the minimum effect that "changed" needs."""
        m = self.margin.get(kind, self.margin.get("", 0.04))
        return max(m, self.effect_floor(kind))

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
        """The looks the error budget is split over: those the rule really takes, never
        fewer than the planned ones (a caller may judge at any of them)."""
        return max(1, len(self.schedule()), len(self.looks))

    def starting_at(self, runs: int) -> Policy:
        """The same rule for a pipeline that starts with ``runs`` per side: the first look
        moves there, so the error budget is split over the looks that really happen."""
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
    """One metric of one comparison. ``change_pct`` and its 95% interval are relative to the
    base (None when the base mean is 0 or a side has under 2 runs); ``p_value`` is the test's
    raw two-sided p; ``q_value`` is p times the planned looks, Benjamini-Hochberg-adjusted
    within the metric's family by :func:`judge_many`; ``runs_wanted`` is the runs per
    side the rule wants before judging again (0: decided, or nothing more to gain)."""

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
    p_equiv: np.ndarray  # raw TOST p of "change at least the minimum effect"
    big: np.ndarray  # estimated effect reaches the minimum effect
    test: str


# ---------------------------------------------------------------------------------------------
# exact Mann-Whitney null distribution


@lru_cache(maxsize=256)
def _mw_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u) for u = 0..n*m under the null, from the Gaussian binomial coefficient."""
    size = n * m + 1
    poly = np.zeros(size)
    poly[0] = 1.0
    # [n+m choose n]_q = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i); coefficients count the
    # arrangements with U = u. Multiply first, then divide, to stay in exact-ish integers.
    for i in range(1, n + 1):
        k = m + i
        if k < size:
            poly[k:] = poly[k:] - poly[: size - k].copy()
        for j in range(i, size):  # divide by (1 - q^i): running sum with stride i
            poly[j] += poly[j - i]
    counts = np.maximum(poly, 0.0)
    return np.minimum(np.cumsum(counts) / counts.sum(), 1.0)


_EXACT_MAX = 50  # per side; beyond it the normal approximation is excellent


def _mw_lower_tail(u: np.ndarray, n: int, m: int) -> np.ndarray:
    """P(U <= u) under the null (u may be fractional with ties: rounded up, conservative)."""
    if n <= _EXACT_MAX and m <= _EXACT_MAX:
        cdf = _mw_cdf(n, m)
        idx = np.clip(np.ceil(u - 1e-9).astype(int), 0, n * m)
        return cdf[idx]
    mu = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return stats.norm.cdf((u + 0.5 - mu) / sd)


def _mw_order_index(n: int, m: int, tail: float) -> int:
    """k such that [D_(k), D_(nm-k+1)] (1-based order statistics of the pairwise differences)
    is the distribution-free interval with ``tail`` in each end; 0 when unbounded."""
    if n <= _EXACT_MAX and m <= _EXACT_MAX:
        return int(np.searchsorted(_mw_cdf(n, m), tail, side="right"))
    mu = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return max(0, int(math.floor(mu - stats.norm.ppf(1 - tail) * sd)))


# ---------------------------------------------------------------------------------------------
# the two test paths, vectorised over T comparisons


def _welch(
    base: np.ndarray, new: np.ndarray, floor: float, margin: float, absolute: bool, policy: Policy
) -> Batch:
    nb, nn = base.shape[1], new.shape[1]
    mb, mn = base.mean(axis=1), new.mean(axis=1)
    vb, vn = base.var(axis=1, ddof=1), new.var(axis=1, ddof=1)
    d = mn - mb
    se2 = vb / nb + vn / nn
    se = np.sqrt(se2)
    denom = (vb / nb) ** 2 / (nb - 1) + (vn / nn) ** 2 / (nn - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, se2**2 / np.where(denom > 0, denom, 1.0), nb + nn - 2)
        scale = np.abs(mb)
        delta = np.full_like(d, margin) if absolute else margin * scale
        least = np.full_like(d, floor) if absolute else floor * scale
        exact = se <= 1e-12 * np.maximum(np.abs(mb) + np.abs(mn), 1e-300)
        safe_se = np.where(exact, 1.0, se)
        t = d / safe_se
        p = np.where(exact, np.where(d == 0, 1.0, 0.0), 2 * stats.t.sf(np.abs(t), df))
        p_lo = stats.t.sf((d + delta) / safe_se, df)  # H0: d <= -delta
        p_hi = stats.t.cdf((d - delta) / safe_se, df)  # H0: d >= +delta
        p_eq = np.where(exact, np.where(np.abs(d) < delta, 0.0, 1.0), np.maximum(p_lo, p_hi))
        p_eq = np.where((d == 0) & exact, 0.0, p_eq)
        half = stats.t.ppf(0.5 + policy.confidence / 2, df) * np.where(exact, 0.0, se)
        pct = np.where(scale > 0, 100.0 / np.where(scale > 0, scale, 1.0), np.nan)
    big = np.abs(d) >= least
    return Batch(
        outcome=np.full(d.shape, UNDECIDED),
        sign=np.sign(d),
        change_pct=d * pct,
        ci_low_pct=(d - half) * pct,
        ci_high_pct=(d + half) * pct,
        p_value=p,
        p_equiv=p_eq,
        big=big & (d != 0),
        test="welch",
    )


def _rank(base: np.ndarray, new: np.ndarray, floor: float, margin: float, policy: Policy) -> Batch:
    nb, nn = base.shape[1], new.shape[1]
    diffs = np.log(new)[:, :, None] - np.log(base)[:, None, :]
    diffs = np.sort(diffs.reshape(diffs.shape[0], -1), axis=1)
    nm = nb * nn
    hl = np.median(diffs, axis=1)
    bound = math.log1p(margin)

    def u_above(shift: float) -> np.ndarray:  # U of (new - shift) against base
        return (diffs > shift).sum(axis=1) + 0.5 * (diffs == shift).sum(axis=1)

    u0 = u_above(0.0)
    p = np.minimum(1.0, 2 * np.minimum(_mw_lower_tail(u0, nn, nb), _mw_lower_tail(nm - u0, nn, nb)))
    p_hi = _mw_lower_tail(u_above(bound), nn, nb)  # H0: shift >= +bound
    p_lo = _mw_lower_tail(nm - u_above(-bound), nn, nb)  # H0: shift <= -bound
    k = _mw_order_index(nn, nb, (1 - policy.confidence) / 2)
    if k >= 1:
        lo = np.expm1(diffs[:, k - 1]) * 100
        hi = np.expm1(diffs[:, nm - k]) * 100
    else:
        lo = np.full(hl.shape, -100.0)
        hi = np.full(hl.shape, np.inf)
    return Batch(
        outcome=np.full(hl.shape, UNDECIDED),
        sign=np.sign(hl),
        change_pct=np.expm1(hl) * 100,
        ci_low_pct=lo,
        ci_high_pct=hi,
        p_value=p,
        p_equiv=np.maximum(p_lo, p_hi),
        big=np.abs(hl) >= math.log1p(floor),
        test="mann-whitney",
    )


def decide_batch(
    base: np.ndarray,
    new: np.ndarray,
    *,
    kind: str = "",
    policy: Policy = DEFAULT,
    rank: bool | None = None,
) -> Batch:
    """The rule for T comparisons at once: ``base`` is (T, n_base), ``new`` is (T, n_new),
    one value per run, at least 2 per side. ``rank`` forces or forbids the rank path (None:
    by kind, as :func:`judge` does for tie-free positive data)."""
    base = np.asarray(base, dtype=float)
    new = np.asarray(new, dtype=float)
    floor = policy.effect_floor(kind)
    margin = policy.equivalence_margin(kind)
    if rank is None:
        rank = kind in policy.rank_kinds
    if rank:
        res = _rank(base, new, floor, margin, policy)
    else:
        res = _welch(base, new, floor, margin, kind in policy.absolute_kinds, policy)
    looks = policy.n_looks
    sig = res.p_value * looks <= min(policy.alpha, policy.fdr_q)
    equiv = res.p_equiv * looks <= policy.equivalence_alpha
    res.outcome = np.where(sig & res.big, CHANGED, np.where(equiv, UNCHANGED, UNDECIDED))
    return res


# ---------------------------------------------------------------------------------------------
# public API


def _clean(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


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
    pooled = np.concatenate([base, new])
    if (pooled <= 0).any():
        return False
    # exact rank p-values assume no ties; the pairwise log ratios must be distinct as well
    return np.unique(pooled).size == pooled.size


def judge(
    base: Side,
    new: Side,
    *,
    higher_is_better: bool | None,
    kind: str = "",
    policy: Policy = DEFAULT,
    metric: str = "",
) -> Verdict:
    """The verdict on one metric. Each side is one value per run (every run its own boot)
    or {boot: per-run values}; the test's unit is the boot mean, so noise shared by the runs
    of a boot is in the variance and cannot look like an effect. ``n_base``/``n_new`` and
    ``runs_wanted`` count boots; ``runs_base``/``runs_new`` count runs."""
    b, n, runs_b, runs_n, drop = units(base, new)
    if min(b.size, n.size) < 2:
        return _too_few(metric, b, n, runs_b, runs_n, drop, policy)
    rank = _use_rank(b, n, kind, policy)
    res = decide_batch(b[None, :], n[None, :], kind=kind, policy=policy, rank=rank)
    p = float(res.p_value[0])
    v = _verdict(metric, res, 0, higher_is_better, min(1.0, p * policy.n_looks), b, n, policy)
    v.runs_base, v.runs_new, v.warmup_dropped = runs_b, runs_n, drop
    return v


def _too_few(
    metric: str, b: np.ndarray, n: np.ndarray, runs_b: int, runs_n: int, drop: bool, policy: Policy
) -> Verdict:
    # one boot per side (however many runs it holds) says nothing about boot-to-boot
    # noise: more boots are needed, not more runs
    v = Verdict(
        metric, "n/a", "none", None, None, None, None, None, "", b.size, n.size,
        max(policy.start_runs, 2), runs_b, runs_n, drop,
    )  # fmt: skip
    if runs_b >= 2 and runs_n >= 2:
        v.outcome = "undecided"
        v.test = "one boot per side"
    return v


def coarse_clock(metric: str, n_base: int, n_new: int) -> Verdict:
    """The verdict on a latency that a side timed with a coarse clock (a jiffies clocksource,
    one that changed during a run: jobs/benchmarks/collect.py): undecided, never better or worse, and
    more runs on the same clock would not help. Not part of any false-discovery family."""
    return Verdict(
        metric, "undecided", "none", None, None, None, None, None, COARSE_CLOCK, n_base, n_new, 0
    )


def _verdict(
    metric: str,
    res: Batch,
    i: int,
    higher_is_better: bool | None,
    q: float,
    b: np.ndarray,
    n: np.ndarray,
    policy: Policy,
    outcome: int | None = None,
) -> Verdict:
    code = int(res.outcome[i]) if outcome is None else outcome
    out = _OUTCOMES[code]
    wanted = policy.next_look(min(b.size, n.size)) if code == UNDECIDED else 0
    return Verdict(
        metric=metric,
        outcome=out,
        direction=_direction(float(res.sign[i]), higher_is_better) if code == CHANGED else "none",
        change_pct=_num(res.change_pct[i]),
        ci_low_pct=_num(res.ci_low_pct[i]),
        ci_high_pct=_num(res.ci_high_pct[i]),
        p_value=float(res.p_value[i]),
        q_value=q,
        test=res.test,
        n_base=int(b.size),
        n_new=int(n.size),
        runs_wanted=wanted,
    )


def bh_adjust(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    The p-values come already multiplied by the planned looks, so they can exceed 1; clipping
    them to 1 first leaves every q-value as it was (a q-value is capped at 1 anyway). A NaN
    p-value counts as 1 (no evidence) instead of turning every q-value of the table into NaN.
    """
    arr = np.asarray(p, dtype=float)
    if arr.size == 0:
        return arr
    arr = np.where(np.isnan(arr), 1.0, np.clip(arr, 0.0, 1.0))
    return stats.false_discovery_control(arr, method="bh")


def judge_many(
    pairs: Mapping[str, tuple[Side, Side, bool | None, str]],
    policy: Policy = DEFAULT,
    families: Mapping[str, Hashable] | None = None,
) -> dict[str, Verdict]:
    """Verdicts for all metrics of one comparison: ``pairs[name] = (base, new,
    higher_is_better, kind)``. A change must survive Benjamini-Hochberg at ``policy.fdr_q``
    within its false-discovery family (on p-values already multiplied by the number of
    planned looks) as well as ``policy.alpha`` on its own; a metric that loses its
    significance to the correction is undecided and asks for more runs. ``families[name]``
    is each metric's family (:func:`family`; default: all of ``pairs`` is one).

    Each metric's verdict is the one :func:`judge` gives it; metrics of the same kind, test
    and boots per side are judged as one batch, since a comparison page holds thousands of
    metrics and the tests' per-call overhead, not their arithmetic, was its cost."""
    out: dict[str, Verdict | None] = dict.fromkeys(pairs)
    batches: dict[tuple[str, bool, int, int], list[tuple]] = {}
    for name, (base, new, hib, kind) in pairs.items():
        b, n, runs_b, runs_n, drop = units(base, new)
        if min(b.size, n.size) < 2:
            out[name] = _too_few(name, b, n, runs_b, runs_n, drop, policy)
            continue
        key = (kind, _use_rank(b, n, kind, policy), b.size, n.size)
        batches.setdefault(key, []).append((name, b, n, hib, runs_b, runs_n, drop))
    looks = policy.n_looks
    for (kind, rank, _nb, _nn), items in batches.items():
        res = decide_batch(
            np.stack([it[1] for it in items]),
            np.stack([it[2] for it in items]),
            kind=kind,
            policy=policy,
            rank=rank,
        )
        # min() of Python floats, as judge() does: a NaN p stays 1.0 there, not NaN
        qs = [min(1.0, p * looks) for p in res.p_value.tolist()]
        for i, (name, b, n, hib, runs_b, runs_n, drop) in enumerate(items):
            v = _verdict(name, res, i, hib, qs[i], b, n, policy)
            v.runs_base, v.runs_new, v.warmup_dropped = runs_b, runs_n, drop
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


def family(job: Hashable, kernel: Hashable, headline: bool) -> tuple[Hashable, Hashable, bool]:
    """The false-discovery family of a metric in a comparison: one later kernel against the
    base, one job, and the headline metrics (:func:`is_headline`) apart from the others.
    A pair's verdicts then read the same on a page of one kernel or of twenty, and a job's
    few headline metrics never lose their power to its hundreds of side counters."""
    return (job, kernel, headline)


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
