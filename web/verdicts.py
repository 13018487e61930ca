"""Per-metric verdicts for highlighting the comparison page.

Each later kernel is judged against the base (the first kernel) on per-run values: the change
of the means with a 95% Welch interval, a Welch t-test, and Benjamini-Hochberg control of the
false-discovery rate across all metrics of the page. Direction comes from the metric; metrics
without a known direction are "changed", never "better" or "worse". When
``stackbench.resultsdb.verdict`` provides ``judge`` it is used instead, so the page and the
stackbench table agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIN_RUNS = 3
FDR = 0.05


def _stats(vals: Sequence[float]) -> tuple[int, float, float]:
    n = len(vals)
    mean = sum(vals) / n
    var = sum((v - mean) ** 2 for v in vals) / (n - 1) if n > 1 else 0.0
    return n, mean, var


def judge_pair(
    base: Sequence[float], new: Sequence[float], higher_is_better: bool | None
) -> dict[str, Any]:
    if not base or not new:
        return {"verdict": "missing", "change_pct": None, "p": None}
    n1, m1, v1 = _stats(base)
    n2, m2, v2 = _stats(new)
    change = (m2 - m1) / abs(m1) * 100 if m1 else None
    if n1 < MIN_RUNS or n2 < MIN_RUNS:
        return {"verdict": "needs more runs", "change_pct": change, "p": None}
    se2 = v1 / n1 + v2 / n2
    if se2 == 0:
        p = 1.0 if m1 == m2 else 0.0
        lo = hi = change
    else:
        from scipy.stats import t as student

        se = math.sqrt(se2)
        df = se2**2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1) or 1e-300)
        p = float(2 * student.sf(abs(m2 - m1) / se, df))
        half = float(student.ppf(0.975, df)) * se
        lo = (m2 - m1 - half) / abs(m1) * 100 if m1 else None
        hi = (m2 - m1 + half) / abs(m1) * 100 if m1 else None
    return {
        "verdict": "pending",
        "change_pct": change,
        "ci": [lo, hi],
        "p": p,
        "direction": _direction(m2 - m1, higher_is_better),
    }


def _direction(diff: float, higher_is_better: bool | None) -> str:
    if higher_is_better is None or diff == 0:
        return "changed"
    return "better" if (diff > 0) == higher_is_better else "worse"


def judge(per_kernel: Sequence[Sequence[float]], higher_is_better: bool | None) -> list[dict]:
    """One verdict per kernel after the first (the base)."""
    if not per_kernel:
        return []
    base = per_kernel[0]
    return [judge_pair(base, vals, higher_is_better) for vals in per_kernel[1:]]


def control_fdr(rows: list[dict[str, Any]], q: float = FDR) -> None:
    """Benjamini-Hochberg over every pending verdict; sets verdict to better/worse/changed
    when significant, else "no change"."""
    pending = [v for r in rows for v in r["verdicts"] if v.get("verdict") == "pending"]
    ordered = sorted(pending, key=lambda v: v["p"])
    m = len(ordered)
    cutoff = -1
    for i, v in enumerate(ordered):
        if v["p"] <= q * (i + 1) / m:
            cutoff = i
    for i, v in enumerate(ordered):
        v["verdict"] = v["direction"] if i <= cutoff else "no change"
