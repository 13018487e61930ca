"""Boxes (or rounds) as blocks: a pooled lab's box offsets taken out of a comparison.

The live comparison (:mod:`stackbench.resultsdb.tables.verdict`) pairs each kernel with the
base by round (:func:`complete_rounds`, :func:`round_of`); ``bench/verdict_sim.py``'s lab
cell measures both that and the design of every kernel of the rounds at once.

When boxes of one machine kind are pooled, each round (every kernel of the comparison booted
once) runs whole on one box, so the box's offset falls on every kernel of the round alike.
Comparing two kernels' boot means as independent samples leaves that offset in the variance
(a 3% box-to-box spread hides a 5% change). The rounds are the blocks of a randomized block
design: a kernel's difference from the base is the mean of its per-round differences, and
the residual variance, once each round's and each kernel's level is removed, is pooled over
every kernel of the rounds ((K - 1)(n - 1) degrees of freedom; with two kernels this is the
paired t-test).

The verdict's own rule then decides (:func:`stackbench.resultsdb.verdict.decide_batch`, its
looks, floors and margins): :func:`block_sides` hands it a base side that is exact (its
mean, twice) and a new side whose mean, sample variance and size give Welch's test exactly
that difference, standard error and degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from stackbench.resultsdb import boots


@lru_cache(maxsize=64)
def _unit(m: int) -> np.ndarray:
    """A fixed vector of ``m`` values with mean 0 and sample variance 1."""
    z = np.linspace(-1.0, 1.0, m)
    return (z - z.mean()) / z.std(ddof=1)


def block_sides(values: np.ndarray, kernel: int) -> tuple[np.ndarray, np.ndarray]:
    """``values``: (T, K, n) boot means of K kernels (the base first) in n rounds, each
    round one block (one box); the (base, new) arrays on which ``decide_batch``'s Welch test
    is the block design's test of kernel ``kernel`` against the base."""
    x = np.asarray(values, dtype=float)
    trials, k, n = x.shape
    if k < 2 or n < 2 or not 0 < kernel < k:
        raise ValueError(f"a block design needs 2+ kernels and 2+ rounds, kernel 1..{k - 1}")
    resid = (
        x - x.mean(axis=2, keepdims=True) - x.mean(axis=1, keepdims=True)
        + x.mean(axis=(1, 2), keepdims=True)
    )  # fmt: skip
    df = (k - 1) * (n - 1)
    mse = (resid**2).sum(axis=(1, 2)) / df
    level = x[:, 0].mean(axis=1)
    diff = (x[:, kernel] - x[:, 0]).mean(axis=1)
    se2 = 2 * mse / n
    # Welch with an exact base: se^2 = var(new) / m and df = m - 1
    m = df + 1
    new = (level + diff)[:, None] + np.sqrt(se2 * m)[:, None] * _unit(m)[None, :]
    return np.repeat(level[:, None], 2, axis=1), new


# -- the live comparison: a kernel against the base, paired by round -------------------------

# fewer rounds holding both kernels than this, and the pair is compared unpaired (the plan's
# own minimum of boots per kernel: jobs/plan.py MIN_BOOTS)
MIN_ROUNDS = 3
PAIRED = "paired by round"


def round_of(run: Any) -> Hashable | None:
    """The block of a run row: its series' round of the plan on one machine and worker
    (every kernel of a round boots on the worker that ran the round, its host-load period
    alike); None for runs without a recorded round (imports, older rows)."""
    rnd = getattr(run, "boot_round", None)
    meta = getattr(run, "meta", None) or {}
    if rnd is None:
        rnd = meta.get("boot_round")
    if rnd in (None, ""):
        return None
    return (str(meta.get("series") or ""), int(rnd), run.machine, str(meta.get("worker") or ""))


@dataclass
class Paired:
    """A kernel against the base on the rounds that hold one boot of each: the boot means
    (after the warm-up rule, decided on every boot of both sides as in ``boots.units``) in
    the same round order, and the runs of those boots."""

    base: list[float]
    new: list[float]
    runs_base: int
    runs_new: int
    warmup_dropped: bool

    @property
    def rounds(self) -> int:
        return len(self.base)


def paired_sides(pairs: Sequence[Paired]) -> list[tuple[list[float], list[float]]]:
    """Per pair, flat sides (every value its own boot) on which the verdict's Welch test is
    the paired test of its rounds (:func:`block_sides` with two kernels); pairs of equal
    rounds go through one batch, since a page judges thousands of metrics."""
    out: list[tuple[list[float], list[float]]] = [([], [])] * len(pairs)
    by_size: dict[int, list[int]] = {}
    for i, p in enumerate(pairs):
        by_size.setdefault(p.rounds, []).append(i)
    for idx in by_size.values():
        x = np.array([[pairs[i].base, pairs[i].new] for i in idx], dtype=float)
        b, n = block_sides(x, 1)
        for i, bi, ni in zip(idx, b.tolist(), n.tolist(), strict=True):
            out[i] = (bi, ni)
    return out


def _boot_means(side: Mapping[Hashable, Sequence[float]], drop: bool) -> dict[Hashable, float]:
    return {
        k: float(m[0]) for k, v in side.items() if (m := boots.boot_means(boots.boots_of({k: v}), drop)).size
    }  # fmt: skip


def complete_rounds(
    base: Mapping[Hashable, Sequence[float]],
    new: Mapping[Hashable, Sequence[float]],
    block_of: Mapping[Hashable, Hashable],
) -> Paired:
    """The rounds where the base and the kernel each have exactly one boot (``base`` and
    ``new``: {boot: per-run values}; ``block_of``: {boot: its round, :func:`round_of`}). A
    round where a side has no boot (adaptive rounds for other kernels, a lost boot) or two
    (runs of another series on a reused build) pairs nothing and is left out."""

    def by_round(side: Mapping[Hashable, Sequence[float]]) -> dict[Hashable, Hashable]:
        out: dict[Hashable, Hashable] = {}
        for k in side:
            r = block_of.get(k)
            if r is not None:
                out[r] = None if r in out else k  # two boots of a side: the round is out
        return out

    rn = by_round(new)
    both = [
        (kb, kn)
        for r, kb in by_round(base).items()
        if kb is not None and (kn := rn.get(r)) is not None
    ]
    if all(len(v) == 1 for v in base.values()) and all(len(v) == 1 for v in new.values()):
        # one run per boot: no first run to test, each boot's run is its mean
        both = [(kb, kn) for kb, kn in both if math.isfinite(base[kb][0] + new[kn][0])]
        return Paired(
            [float(base[kb][0]) for kb, _ in both], [float(new[kn][0]) for _, kn in both],
            len(both), len(both), False,
        )  # fmt: skip
    drop = boots.warmup_detected([*boots.boots_of(base), *boots.boots_of(new)])
    mb, mn = _boot_means(base, drop), _boot_means(new, drop)
    both = [(kb, kn) for kb, kn in both if kb in mb and kn in mn]
    return Paired(
        [mb[kb] for kb, _ in both], [mn[kn] for _, kn in both],
        sum(len(base[kb]) for kb, _ in both), sum(len(new[kn]) for _, kn in both), drop,
    )  # fmt: skip
