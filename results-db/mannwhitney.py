"""The exact null distribution of the Mann-Whitney U statistic for the verdict's rank path
(:func:`stackbench.resultsdb.verdict.decide_batch`): P(U <= u), and the order statistics of
the pairwise differences that bound the Hodges-Lehmann interval at a given level. Checked
against ``scipy.stats.mannwhitneyu`` in tests/test_verdict.py.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats


@lru_cache(maxsize=256)
def null_cdf(n: int, m: int) -> np.ndarray:
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


def lower_tail(u: np.ndarray, n: int, m: int) -> np.ndarray:
    """P(U <= u) under the null (u may be fractional with ties: rounded up, conservative)."""
    if n <= _EXACT_MAX and m <= _EXACT_MAX:
        cdf = null_cdf(n, m)
        idx = np.clip(np.ceil(u - 1e-9).astype(int), 0, n * m)
        return cdf[idx]
    mu = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return stats.norm.cdf((u + 0.5 - mu) / sd)


def order_index(n: int, m: int, tail: float) -> int:
    """k such that [D_(k), D_(nm-k+1)] (1-based order statistics of the pairwise differences)
    is the distribution-free interval with ``tail`` in each end; 0 when unbounded."""
    if n <= _EXACT_MAX and m <= _EXACT_MAX:
        return int(np.searchsorted(null_cdf(n, m), tail, side="right"))
    mu = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return max(0, int(math.floor(mu - stats.norm.ppf(1 - tail) * sd)))
