"""The statistics behind compare-mmtests.pl's tables, written from mmtests' documented rules.

- Stddev is the sample standard deviation (n-1); it does not exist for one sample (NaN).
- The gain column always reads "positive is better": :func:`pndiff` for lower-is-better
  values (and for Stddev and CoeffVar), :func:`pdiff` for higher-is-better ones, each with
  mmtests' edge cases for equal values and zeros.
- Significance, shown on the mean row: 2018..2024 mmtests (the thpscale era, the cover letters
  of that time) starred a mean when a two-sided t-test on the pooled samples of all iterations
  gave p < 0.10 (:func:`ttest_significant`); since 2024-11 mmtests stars a mean when the
  mean +- 1.96 stddev intervals do not overlap (:func:`overlap_significant`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as _scipy_stats

NAN = float("nan")
TTEST_ALPHA = 0.10
OVERLAP_Z = 1.96


def isnan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)


def pdiff(new: float, base: float) -> float:
    """Gain of a higher-is-better value, in percent."""
    if new == base or new == 0:
        return 0.0
    if base == 0 or isnan(base):
        return 100.0
    return new * 100 / base - 100


def pndiff(new: float, base: float) -> float:
    """Gain of a lower-is-better value, in percent (positive: new is lower)."""
    if new == base:
        return 0.0
    if new == 0:
        return 100.0
    if base == 0:
        return -99.0
    return 100 - new * 100 / base


def amean(data: Sequence[float]) -> float:
    return math.fsum(data) / len(data) if data else NAN


def hmean(data: Sequence[float]) -> float:
    if not data:
        return NAN
    if any(x <= 0 for x in data):
        return -1.0  # mmtests' marker for a harmonic mean that does not exist
    return len(data) / math.fsum(1 / x for x in data)


def stddev(data: Sequence[float]) -> float:
    """Sample standard deviation; NaN for fewer than two samples."""
    n = len(data)
    if n <= 1:
        return NAN
    m = amean(data)
    return math.sqrt(math.fsum((x - m) ** 2 for x in data) / (n - 1))


def coeffvar(data: Sequence[float]) -> float:
    """Stddev as a percentage of the mean; 0 when either does not exist."""
    sd = stddev(data)
    m = amean(data)
    sd = 0.0 if isnan(sd) else sd
    m = 0.0 if isnan(m) else m
    return sd * 100 / m if m else 0.0


def best_mean(data: Sequence[float], percent: int, higher_is_better: bool) -> float:
    """BAmean-N / BHmean-N: the mean of the best N% of the samples (at least one)."""
    ordered = sorted(data, reverse=higher_is_better)
    count = max(1, int(len(ordered) * percent / 100))
    chosen = ordered[:count]
    return hmean(chosen) if higher_is_better else amean(chosen)


def _sd0(data: Sequence[float]) -> float:
    sd = stddev(data)
    return 0.0 if isnan(sd) else sd


def ttest_pvalue(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of t = |ma-mb| / sqrt(sa^2/na + sb^2/nb) with na+nb-2 degrees of freedom.

    With both standard errors zero the test cannot be run; mmtests then calls any difference
    of the means significant, which p = 0 (different) or 1 (equal) expresses.
    """
    if not a or not b:
        return 1.0
    ma, mb = amean(a), amean(b)
    se2 = _sd0(a) ** 2 / len(a) + _sd0(b) ** 2 / len(b)
    df = len(a) + len(b) - 2
    if se2 == 0 or df <= 0:
        return 0.0 if ma != mb else 1.0
    t = abs(ma - mb) / math.sqrt(se2)
    return float(2 * _scipy_stats.t.sf(t, df))


def ttest_significant(a: list[float], b: list[float]) -> bool:
    """mmtests 2018..2024: the means of two sample sets differ at p < 0.10 (two-sided)."""
    return ttest_pvalue(a, b) < TTEST_ALPHA


def overlap_significant(a: list[float], b: list[float]) -> bool:
    """mmtests since 2024-11: the intervals mean +- 1.96*stddev of the two sets do not
    overlap; with fewer than two samples on either side nothing is significant."""
    if len(a) < 2 or len(b) < 2:
        return False
    diff = abs(amean(a) - amean(b))
    return diff > OVERLAP_Z * stddev(a) + OVERLAP_Z * stddev(b)
