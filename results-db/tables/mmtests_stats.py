"""The statistics behind compare-mmtests.pl's tables, written from mmtests' documented rules.

- Stddev is the sample standard deviation (n-1); it does not exist for one sample (NaN).
- The gain column always reads "positive is better": :func:`pndiff` for lower-is-better
  values (and for Stddev and CoeffVar), :func:`pdiff` for higher-is-better ones, each with
  mmtests' edge cases for equal values and zeros.
- Significance, shown on the mean row: 2018..2024 mmtests (the thpscale era, the cover letters
  of that time) starred a mean when a two-sided t-test on the pooled samples of all iterations
  gave p < 0.10 (:func:`ttest_significant`); since 2024-11 mmtests stars a mean when the
  mean +- 1.96 stddev intervals do not overlap (:func:`overlap_significant`).

Sums are mmtests' (MMTests::Stat): one after the other in the data's order, which
``np.cumsum`` reproduces (``np.sum`` adds pairwise and can round differently). Every function
takes a list or a numpy array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

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


# (kind, id(array)) -> (array, value) inside shared_sums(); a ContextVar, so that threads
# of the web server rendering tables at once keep theirs apart
_MEMO: ContextVar[dict[tuple[str, int], tuple[np.ndarray, float]] | None] = ContextVar(
    "mmtests_stats_memo", default=None
)


@contextmanager
def shared_sums() -> Iterator[None]:
    """Inside this block the mean and standard deviation of one numpy array are computed
    once: a latency table asks for each pooled array's mean in the mean, Stddev, CoeffVar
    and t-test rows, and each is a running sum over tens of thousands of samples (a third
    of the table's time). The arrays must not change inside the block."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _memo(kind: str, data: Sequence[float], compute: Callable[[], float]) -> float:
    memo = _MEMO.get()
    if memo is None or not isinstance(data, np.ndarray):
        return compute()
    key = (kind, id(data))
    got = memo.get(key)
    if got is None or got[0] is not data:  # the identity check: an id can be reused
        got = memo[key] = (data, compute())
    return got[1]


def seqsum(data: np.ndarray) -> float:
    """mmtests' running sum, left to right."""
    return float(np.cumsum(data)[-1])


def _array(data: Sequence[float]) -> np.ndarray:
    return data if isinstance(data, np.ndarray) else np.asarray(data, dtype=np.float64)


def amean(data: Sequence[float]) -> float:
    if not len(data):
        return NAN
    return _memo("amean", data, lambda: seqsum(_array(data)) / len(data))


def hmean(data: Sequence[float]) -> float:
    if not len(data):
        return NAN
    arr = _array(data)
    if (arr <= 0).any():
        return -1.0  # mmtests' marker for a harmonic mean that does not exist
    return len(arr) / seqsum(1 / arr)


def stddev(data: Sequence[float]) -> float:
    """Sample standard deviation; NaN for fewer than two samples."""
    n = len(data)
    if n <= 1:
        return NAN
    return _memo("stddev", data, lambda: _stddev(_array(data)))


def _stddev(arr: np.ndarray) -> float:
    m = amean(arr)
    return math.sqrt(seqsum((arr - m) ** 2) / (len(arr) - 1))


def coeffvar(data: Sequence[float]) -> float:
    """Stddev as a percentage of the mean; 0 when either does not exist."""
    sd = stddev(data)
    m = amean(data)
    sd = 0.0 if isnan(sd) else sd
    m = 0.0 if isnan(m) else m
    return sd * 100 / m if m else 0.0


def best_mean(
    data: Sequence[float],
    percent: int,
    higher_is_better: bool,
    ascending: np.ndarray | None = None,
) -> float:
    """BAmean-N / BHmean-N: the mean of the best N% of the samples (at least one).
    ``ascending``: the data already sorted, when the caller has it."""
    s = np.sort(_array(data)) if ascending is None else ascending
    ordered = s[::-1] if higher_is_better else s
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
    if not len(a) or not len(b):
        return 1.0
    ma, mb = amean(a), amean(b)
    se2 = _sd0(a) ** 2 / len(a) + _sd0(b) ** 2 / len(b)
    df = len(a) + len(b) - 2
    if se2 == 0 or df <= 0:
        return 0.0 if ma != mb else 1.0
    t = abs(ma - mb) / math.sqrt(se2)
    return 2 * student_t_sf(df, t)


def student_t_sf(df: int, t: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, t >= 0: half the regularised
    incomplete beta I_x(df/2, 1/2), x = df / (df + t^2), by its continued fraction. It
    agrees with scipy's stdtr to about 1e-14; importing scipy.special for it cost
    0.4 s, a third of a cold mmtests table. Should the fraction not converge (never seen),
    scipy decides."""
    t2 = t * t
    if t2 == 0:
        return 0.5
    a, b = df / 2, 0.5
    x, y = df / (df + t2), t2 / (df + t2)  # y = 1 - x without the cancellation
    front = math.exp(
        _log_gamma_ratio(a) - math.lgamma(b) - a * math.log1p(t2 / df) + b * math.log(y)
    )
    try:
        if x < (a + 1) / (a + b + 2):
            return 0.5 * front * _beta_fraction(a, b, x) / a
        return 0.5 * (1 - front * _beta_fraction(b, a, y) / b)
    except ArithmeticError:
        from scipy.special import stdtr

        return float(stdtr(df, -t))


def _log_gamma_ratio(a: float) -> float:
    """log(Gamma(a + 1/2) / Gamma(a)); for large a by its asymptotic series, as the
    difference of two lgamma values near 1e6 would keep only ten digits."""
    if a < 1000:  # the difference keeps about 13 digits up to here
        return math.lgamma(a + 0.5) - math.lgamma(a)
    z = 1 / a  # the next term is of order z^5 < 1e-15
    return 0.5 * math.log(a) - z / 8 + z**3 / 192


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-16
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for num in (
            m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < eps:
            return h
    raise ArithmeticError("the incomplete beta fraction did not converge")


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
