"""Change points over a tracked branch's nightly history of one job and metric: the nights
where the level shifted, the segments between them, and which shift is new enough to open a
regression.

Apache Otava (Hunter: E-Divisive means over sliding windows, then Student's t merges) only
proposes the candidates, loosely; docs/changepoints.md says why Otava. Each candidate is
then placed where it best separates its neighbours, segments shorter than ``min_after``
nights are merged, and every cut left is judged again against the segments it now separates
(:func:`_judge`): a t-test whose variance is the whole history's night-to-night one,
inflated by the nights' autocorrelation (a host that drifts slowly makes neighbouring nights
alike, so they weigh less than as many independent nights), plus the magnitude and median
floors. The weakest failing cut goes and the rest are judged again, until all stand.
Where the machine kind has its nightly A/A nights (the baseline booted again on the same
hosts the same nights, step-free: :func:`reference`), the nights' covariance is measured on
them instead: a cut placed at a turn of a slow drift absorbs the drift from the residuals
around it, which then look independent, while the A/A's nights keep it (with slow host
drift, 3 false alarms per 100 step-free histories instead of 22).
bench/changepoint_bench.py measures the rule (figures in bench/changepoints.md).

Each night is one point, the trimmed mean of that night's own boots: boots of one night
share that night's host, so a night and not a boot is the independent unit of a history, as
a boot and not a run is of a verdict.

A shift is alerted once: an alert claims the nearest worse change point within
``max_move`` nights and follows it when Otava dates it again (:func:`follow`), and the
nights after a shift belong to its segment, so they are compared with the new level and
never alert again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from otava.analysis import compute_change_points
from scipy import stats


@dataclass(frozen=True)
class Rule:
    # the t-test p of the two sides of a change point, judged again after every merge with
    # the nights' dependence counted (see _judge). Below Otava's 0.001: the end of a history
    # is tested again every night, and at 0.001 a boot CoV of 5% gave 12 false alarms per
    # 100 step-free histories, at 0.0002 5 (5% steps found within 5 nights at CoV 3%: 91%
    # and 85%; bench/changepoints.md)
    max_pvalue: float = 0.0002
    # what Otava hands over to be judged: looser than the judgement, so that a step at the
    # end of the history is a candidate on its third night
    candidate_pvalue: float = 0.05
    candidate_magnitude: float = 0.015
    # a level shift smaller than this is no change point. Above the verdict's 2% throughput
    # floor: a night is one run, and runs of one kernel wander (the demo's: CoV 1.14%,
    # boots 2.41%), so three nights drawn low look like a 2-3% level (bench/changepoints.md).
    # Smaller regressions are left to the head-versus-last-good first look.
    min_magnitude: float = 0.03
    # a night or two at a new level may be a spike or a noisy spell; three are a level
    min_after: int = 3
    window: int = 30  # Otava's sliding window, in nights
    lags: int = 10  # nights of dependence looked for between nights (slow host drift)
    # an alert already raised stays the alert of the nearest worse change point within
    # this many nights: Otava's date of a step moves as nights are added (a drift's dip
    # before a step first dated it 11 nights early, and at 10 the step alerted again)
    max_move: int = 12
    history: int = 120  # nights looked at: older ones cannot date tonight's shift
    # boots dropped at each end of a night of five or more: one slow boot of five moved a
    # night's mean by 5% (slow boots in 3% of them: 13 false alarms per 100 histories, 7)
    trim: int = 1


DEFAULT_RULE = Rule()


@dataclass(frozen=True)
class Shift:
    night: int  # the first night at the new level (an index into the history)
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    change_pct: float
    p_value: float
    direction: str  # worse | better | "" (no direction)

    def as_dict(self) -> dict[str, float | int | str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Segment:
    start: int  # first night (index)
    stop: int  # one past the last night
    mean: float


def night_means(nights: Sequence[Sequence[float]], trim: int = 0) -> list[float | None]:
    """One point per night: the mean of its finite boot values (None: nothing measured),
    without the ``trim`` lowest and highest of them when at least 2 * trim + 3 remain."""
    out: list[float | None] = []
    for boots in nights:
        v = np.asarray([x for x in boots if x is not None], dtype=float)
        v = np.sort(v[np.isfinite(v)])
        if trim and v.size >= 2 * trim + 3:
            v = v[trim:-trim]
        out.append(float(v.mean()) if v.size else None)
    return out


def _direction(change: float, higher_is_better: bool | None) -> str:
    if higher_is_better is None or change == 0:
        return ""
    return "better" if (change > 0) == higher_is_better else "worse"


def _long_run_factor(resid: np.ndarray, ends: Sequence[int], lags: int) -> np.ndarray:
    """Per lag 0..``lags``, the residuals' autocorrelation (pairs within one segment only),
    up to the first lag where it is below two standard errors (0 from there on). Slow host
    drift makes neighbouring nights alike, so n nights weigh less than n independent ones;
    white noise gives zeros past lag 0."""
    var = float(np.mean(resid**2))
    rho = np.zeros(lags + 1)
    rho[0] = 1.0
    if var == 0:
        return rho
    starts = [0, *ends[:-1]]
    for k in range(1, lags + 1):
        num, pairs = 0.0, 0
        for a, b in zip(starts, ends, strict=True):
            if b - a > k:
                num += float(np.dot(resid[a : b - k], resid[a + k : b]))
                pairs += b - a - k
        if pairs == 0:
            break
        r = num / pairs / var
        # below about two standard errors an autocorrelation is the estimate's own noise:
        # counted, it would cost a machine without drift its power
        if r <= 2.0 / np.sqrt(len(resid)):
            break
        rho[k] = r
    return rho


def _mean_var(n: int, var: float, rho: np.ndarray) -> float:
    """The variance of the mean of ``n`` consecutive nights with those autocorrelations."""
    k = np.arange(1, min(n, len(rho)))
    return var / n * (1.0 + 2.0 * float(np.sum((1.0 - k / n) * rho[k])))


def _placed(series: np.ndarray, cuts: list[int], min_after: int, reach: int = 2) -> list[int]:
    """Each cut moved (up to ``reach`` nights) to where it best separates its neighbouring
    segments: Otava's window may date a step at the end of the history a night or two off,
    and nights of the other level on a side blunt the test."""
    cuts = list(cuts)
    for k in range(len(cuts)):
        a = cuts[k - 1] if k else 0
        b = cuts[k + 1] if k + 1 < len(cuts) else len(series)
        best, score = cuts[k], -1.0
        for c in range(
            max(a + min_after, cuts[k] - reach), min(b - min_after, cuts[k] + reach) + 1
        ):
            left, right = series[a:c], series[c:b]
            t = abs(right.mean() - left.mean()) / np.sqrt(1 / len(left) + 1 / len(right))
            if t > score:
                best, score = c, t
        cuts[k] = best
    return cuts


@dataclass(frozen=True)
class Reference:
    """The covariance of a history's nights measured on the machine's own A/A nights (its
    baseline booted again each night on the same hosts, step-free): ``var`` a night's point
    of the judged history, ``cov`` nights 1, 2, ... apart, both relative to the level. Host
    drift falls on every kernel booted that night, so the lagged covariances are the A/A's;
    a night's own variance is the A/A's with its boot part swapped for the history's."""

    var: float
    cov: tuple[float, ...]


MIN_REFERENCE = 6  # A/A nights below which the history's own residuals are used


def _within(nights: Sequence[Sequence[float]], trim: int) -> float:
    """The relative variance a night's point (:func:`night_means`) gets from its boots alone:
    the nights' pooled boot offsets, resampled as many as a night has."""
    offs, sizes = [], []
    for boots in nights:
        v = np.asarray([x for x in boots if x is not None and np.isfinite(x)], dtype=float)
        if v.size >= 2 and v.mean():
            offs.extend(v / v.mean() - 1.0)
            sizes.append(v.size)
    if not offs:
        return 0.0
    n = int(np.median(sizes))
    draws = np.sort(np.random.default_rng(0).choice(offs, (2000, n)), axis=1)
    if trim and n >= 2 * trim + 3:
        draws = draws[:, trim:-trim]
    return float(draws.mean(axis=1).var())


def reference(
    aa_nights: Sequence[Sequence[float]],
    nights: Sequence[Sequence[float]],
    rule: Rule = DEFAULT_RULE,
) -> Reference | None:
    """The :class:`Reference` of a history (``nights``) from the A/A nights of its machine
    kind (boot values per night, oldest first); None below ``MIN_REFERENCE`` measured A/A
    nights. Lags whose covariance is within two standard errors of 0 and every later one
    count as 0, as :func:`_long_run_factor` does."""
    x = np.asarray([m for m in night_means(aa_nights, rule.trim) if m is not None], dtype=float)
    if x.size < MIN_REFERENCE or not x.mean():
        return None
    r = x / x.mean() - 1.0
    n = r.size
    c = np.array([float(np.dot(r[: n - k], r[k:])) / n for k in range(min(rule.history, n))])
    weak = np.flatnonzero(c[1:] <= 2.0 / np.sqrt(n) * c[0])
    if weak.size:
        c[1 + weak[0] :] = 0.0
    head = _within(nights, rule.trim)
    var = max(c[0] - _within(aa_nights, rule.trim) + head, head, 1e-12)
    return Reference(var, tuple(float(v) for v in c[1:]))


def _cross(n1: int, n2: int, cov: np.ndarray) -> float:
    """The covariance of the means of two adjacent segments of ``n1`` and ``n2`` nights."""
    lags = np.arange(1, n1 + n2)
    # pairs (i before, j after) at lag h: min(h, n1, n2, n1 + n2 - h)
    count = np.minimum.reduce(
        [lags, np.full_like(lags, n1), np.full_like(lags, n2), n1 + n2 - lags]
    )
    c = np.zeros(lags.size)
    k = min(lags.size, cov.size)
    c[:k] = cov[:k]
    return float(np.sum(count * c)) / (n1 * n2)


def _judge(
    series: np.ndarray, cuts: list[int], rule: Rule, ref: Reference | None = None
) -> list[tuple[float, bool]]:
    """Per cut, the t-test p of its two neighbouring segments and whether it stands: the
    variance is the whole history's night-to-night one (residuals around every segment's
    mean), inflated by the nights' dependence, so that a spell of slow drift needs more
    nights to count as a level. With a :class:`Reference` the covariance is the machine's
    A/A nights' instead (a cut at a turn of the drift absorbs the drift from the residuals
    around it, and the nights then look independent), the two segments' covariance
    counted."""
    bounds = [0, *cuts, len(series)]
    segs = [series[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    resid = np.concatenate([g - g.mean() for g in segs])
    dof = max(1, len(series) - len(segs))
    cross = np.zeros(0)
    if ref is not None:
        level = float(series.mean()) ** 2
        var = ref.var * level
        cross = np.asarray(ref.cov) * level
        rho = np.concatenate([[1.0], cross / var])
        df = float(dof)
    else:
        var = float(np.sum(resid**2)) / dof
        rho = _long_run_factor(resid, bounds[1:], rule.lags)
        # fewer independent nights, fewer degrees of freedom (about n / inflation)
        inflation = 1.0 + 2.0 * float(np.sum(rho[1:]))
        df = max(1.0, dof / inflation)
    out = []
    for k in range(len(cuts)):
        left, right = segs[k], segs[k + 1]
        before, after = float(left.mean()), float(right.mean())
        med_left, med_right = float(np.median(left)), float(np.median(right))
        if before == 0 or med_left == 0:
            out.append((1.0, False))  # no relative change from zero
            continue
        se2 = _mean_var(len(left), var, rho) + _mean_var(len(right), var, rho)
        if cross.size:
            se2 -= 2.0 * _cross(len(left), len(right), cross)
        se = np.sqrt(max(se2, 0.0))
        p = 0.0 if se == 0 else float(2 * stats.t.sf(abs(after - before) / se, df))
        change = (after - before) / abs(before)
        # a spike drags a short segment's mean but not its median: the typical night on
        # each side must show the shift too, in the same direction
        typical = (med_right - med_left) / abs(med_left)
        ok = (
            p < rule.max_pvalue
            and abs(change) >= rule.min_magnitude
            and abs(typical) >= rule.min_magnitude
            and typical * change > 0
        )
        out.append((p, ok))
    return out


def shifts(
    nights: Sequence[Sequence[float]],
    higher_is_better: bool | None,
    rule: Rule = DEFAULT_RULE,
    ref: Reference | None = None,
) -> list[Shift]:
    """The level shifts of a history (one list of boot values per night, oldest first),
    oldest first. A shift needs ``rule.min_after`` measured nights at its new level.
    ``ref``: the nights' covariance from the machine's A/A nights (:func:`reference`)."""
    means = night_means(nights, rule.trim)
    first = max(0, len(means) - rule.history)
    idx = [i for i in range(first, len(means)) if means[i] is not None]
    series = np.asarray([means[i] for i in idx], dtype=float)
    if len(series) < 2 * rule.min_after:
        return []
    points, _weak = compute_change_points(
        list(series),
        window_len=rule.window,
        max_pvalue=rule.candidate_pvalue,
        min_magnitude=rule.candidate_magnitude,
    )
    # a segment shorter than min_after nights is a spike (or a level not yet seen long
    # enough), not a level: shortest first, it joins a neighbour
    cuts = [cp.index for cp in points]
    while cuts:
        bounds = [0, *cuts, len(series)]
        lens = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
        k = int(np.argmin(lens))
        if lens[k] >= rule.min_after:
            break
        # the short segment joins the one before it (the first one, the one after)
        del cuts[max(k - 1, 0)]
    cuts = _placed(series, cuts, rule.min_after)
    # Otava's p-values are of the segments before its own merges: every cut is judged again
    # against the segments it now separates, the weakest failing one dropped, and the rest
    # judged again, until every cut left stands
    while cuts:
        judged = _judge(series, cuts, rule, ref)
        failing = [k for k, (_p, ok) in enumerate(judged) if not ok]
        if not failing:
            break
        del cuts[max(failing, key=lambda k: judged[k][0])]
        cuts = _placed(series, cuts, rule.min_after)
    out = []
    bounds = [0, *cuts, len(series)]
    for k, at in enumerate(cuts):
        before = float(series[bounds[k] : at].mean())
        after = float(series[at : bounds[k + 2]].mean())
        change = (after - before) / abs(before) * 100.0
        out.append(
            Shift(
                night=idx[at],
                before=before,
                after=after,
                change_pct=round(change, 3),
                p_value=judged[k][0],
                direction=_direction(change, higher_is_better),
            )
        )
    return out


def segments(nights: Sequence[Sequence[float]], found: Sequence[Shift]) -> list[Segment]:
    """The history cut at the shifts, each segment with the mean of its nights."""
    means = night_means(nights, DEFAULT_RULE.trim)
    cuts = [0, *(s.night for s in found), len(means)]
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        vals = [m for m in means[a:b] if m is not None]
        if b > a and vals:
            out.append(Segment(a, b, float(np.mean(vals))))
    return out


def claimed(
    every: Sequence[Shift], alerted: Sequence[int], rule: Rule = DEFAULT_RULE
) -> dict[int, Shift]:
    """Which worse shift of tonight's (``every``) each alerted night (an alert's date, or an
    open regression's) is now: the nearest one within ``max_move`` nights that no other
    alert is nearer to. A step first dated a few nights early is that alert's step when its
    date is refined, not a new one."""
    free = [s for s in every if s.direction == "worse"]
    pairs = sorted(
        (abs(s.night - a), a, i)
        for a in dict.fromkeys(alerted)
        for i, s in enumerate(free)
        if abs(s.night - a) <= rule.max_move
    )
    out: dict[int, Shift] = {}
    taken: set[int] = set()
    for _d, a, i in pairs:
        if a not in out and i not in taken:
            out[a] = free[i]
            taken.add(i)
    return out


def unclaimed(
    every: Sequence[Shift], alerted: Sequence[int], rule: Rule = DEFAULT_RULE
) -> list[Shift]:
    """The worse shifts of tonight's (``every``, oldest first) that no alert claims
    (:func:`claimed`): ``alerted`` holds the nights of the shifts already alerted (or
    regressions already open) for this job and metric. These are new."""
    taken = {id(s) for s in claimed(every, alerted, rule).values()}
    return [s for s in every if s.direction == "worse" and id(s) not in taken]


def follow(
    every: Sequence[Shift], alerted: Sequence[int], rule: Rule = DEFAULT_RULE
) -> tuple[list[int], list[Shift]]:
    """One night of the rule: the alerts' dates refined to the shifts that claim them (an
    alert no shift claims tonight keeps its date), and the new shifts to alert."""
    claims = claimed(every, alerted, rule)
    dates = [claims[a].night if a in claims else a for a in alerted]
    return dates, unclaimed(every, alerted, rule)
