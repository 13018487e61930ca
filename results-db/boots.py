"""Boots as the unit of a comparison: one side's runs grouped by boot, the warm-up rule, and
one value per boot (see :mod:`stackbench.resultsdb.verdict`).

A boot key is whatever identifies one boot of one kernel on one machine: the run row's
``boot_id`` column (migration 0004, the rounds-of-boots plan) when the row carries it, else
``run.meta["boot_id"]`` (set by the pipeline and the bisect lab), else the run itself
(imports and older rows: every run its own boot).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats


def _clean(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    return arr[np.isfinite(arr)]


def _run_value(values: Sequence[float]) -> float | None:
    """The mean of a run's finite samples (None when it has none). Most runs hold one sample
    of a metric: that sample is its own mean, bit for bit, without numpy's per-call cost,
    which was most of judging a comparison of thousands of metrics."""
    if len(values) == 1:
        x = float(values[0])
        return x if math.isfinite(x) else None
    arr = _clean(values)
    return float(arr.mean()) if arr.size else None


def boot_key(run: Any) -> Hashable:
    """The boot of a run row (query.RunRow or models.Run): its ``boot_id`` attribute when
    the row has one, else ``meta["boot_id"]``, else the run alone."""
    key = getattr(run, "boot_id", None)
    if key in (None, ""):
        key = (getattr(run, "meta", None) or {}).get("boot_id")
    return ("run", run.id) if key in (None, "") else key


# One side's values: a flat sequence (one value per run, every run its own boot: imports and
# runs stored before boots were recorded) or {boot key: that boot's per-run values in run
# order}.
Side = Sequence[float] | Mapping[Hashable, Sequence[float]]

WARMUP_P = 0.01  # first-run-of-a-boot test level
WARMUP_MIN_BOOTS = 4  # boots with at least 2 runs needed before the test is tried


def boots_of(values: Side) -> list[np.ndarray]:
    """The boots of one side, each its finite per-run values in run order (empty boots
    dropped)."""
    if isinstance(values, Mapping):
        groups = [_clean(v) for _k, v in sorted(values.items(), key=lambda kv: str(kv[0]))]
    else:
        groups = [np.array([x]) for x in _clean(values)]
    return [g for g in groups if g.size]


def _one_run_boots(values: Side) -> np.ndarray | None:
    """The boots' values in boots_of's order when every boot holds one run, else None:
    the common case (imports, one run per boot) without an array per boot."""
    if not isinstance(values, Mapping):
        return _clean(values)
    items = sorted(values.items(), key=lambda kv: str(kv[0]))
    if any(len(v) != 1 for _k, v in items):
        return None
    arr = np.array([float(v[0]) for _k, v in items], dtype=float)
    return arr[np.isfinite(arr)]


def warmup_detected(boots: Iterable[np.ndarray], level: float = WARMUP_P) -> bool:
    """Is the first run of a boot measurably different from the boot's later runs?

    The contrast first - mean(rest) is taken inside each boot, so the boot's own offset
    cancels; across boots (of both kernels: the decision must not depend on which side is
    the patch) a one-sample t-test asks whether it is centred on zero. At least
    ``WARMUP_MIN_BOOTS`` boots with two or more runs are needed: fewer cannot tell a warm-up
    from noise, and the runs are kept."""
    d = np.array([b[0] - b[1:].mean() for b in boots if b.size >= 2])
    if d.size < WARMUP_MIN_BOOTS:
        return False
    return bool(warmup_batch(d[None, :], level)[0])


def warmup_batch(contrasts: np.ndarray, level: float = WARMUP_P) -> np.ndarray:
    """The warm-up test for T comparisons at once: ``contrasts`` is (T, boots) of
    first - mean(rest) per boot; True where the first runs differ at ``level``."""
    d = np.asarray(contrasts, dtype=float)
    k = d.shape[1]
    if k < WARMUP_MIN_BOOTS:
        return np.zeros(d.shape[0], dtype=bool)
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / (sd / math.sqrt(k))
        p = np.where(sd > 0, 2 * stats.t.sf(np.abs(t), k - 1), np.where(mean != 0, 0.0, 1.0))
    return p < level


def boot_means(boots: Iterable[np.ndarray], drop_first: bool = False) -> np.ndarray:
    """One value per boot: the mean of its runs (without the first one when ``drop_first``
    and the boot has more than one run)."""
    # a one-run boot is its own mean (numpy's mean of one value is that value)
    out = [b[0] if b.size == 1 else (b[1:] if drop_first else b).mean() for b in boots]
    return np.asarray(out, dtype=float)


def units(base: Side, new: Side) -> tuple[np.ndarray, np.ndarray, int, int, bool]:
    """The independent units of a comparison: per side one value per boot, after the
    warm-up rule (decided on both sides together); also the runs per side and whether
    first runs were dropped."""
    fb, fn = _one_run_boots(base), _one_run_boots(new)
    if fb is not None and fn is not None:
        # every boot holds one run: no first run to test, each boot's mean is its value
        return fb, fn, fb.size, fn.size, False
    bb, nb = boots_of(base), boots_of(new)
    drop = warmup_detected([*bb, *nb])
    runs_b = sum(b.size for b in bb)
    runs_n = sum(b.size for b in nb)
    return boot_means(bb, drop), boot_means(nb, drop), runs_b, runs_n, drop


def per_boot(
    values: Mapping[int, Sequence[float]], boot_of: Mapping[int, Hashable] | None = None
) -> dict[Hashable, list[float]]:
    """{boot: per-run values in run-id order} from {run id: samples}; ``boot_of`` maps a run
    id to its boot key (a run it does not name is its own boot)."""
    out: dict[Hashable, list[float]] = {}
    boot_of = boot_of or {}
    for run_id in sorted(values):
        x = _run_value(values[run_id])
        if x is not None:
            key = boot_of.get(run_id)
            out.setdefault(("run", run_id) if key is None else key, []).append(x)
    return out
