"""Boxes (or rounds) as blocks: a pooled lab's box offsets taken out of a comparison.

The live comparison (:mod:`stackbench.resultsdb.tables.verdict`) judges each kernel against
the base in the block design of its rounds (:func:`by_round`, :func:`design`,
:func:`live_sides`); ``bench/verdict_sim.py``'s lab cell measures that rule with the same
functions, beside the pair alone and the boots unblocked.

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


# -- the live comparison: each kernel against the base, the rounds as blocks ---------------

# fewer rounds holding both kernels than this, and the pair is compared unpaired (the plan's
# own minimum of boots per kernel: jobs/executors/plan.py MIN_BOOTS)
MIN_ROUNDS = 3
PAIRED = "paired by round"


def label(kernels: int) -> str:
    """The test of a verdict judged in a block design of ``kernels`` kernels by round."""
    return PAIRED if kernels == 2 else f"by round, blocks of {kernels} kernels"


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


def designs(present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The block design that judges each kernel against the base, from ``present`` (K, R):
    whether each kernel (the base first) has exactly one boot in each round. Kernel k's
    rounds (``rounds[k]``, (K, R)) are those holding the base and k; every kernel with a boot
    in each of them is in its design (``joins[k]``, (K, K)): complete blocks, so each one's
    residuals add (n - 1) degrees of freedom to the estimate of the noise the round's box
    offset leaves. Row 0 (the base against itself) is not a design."""
    rounds = present & present[0]
    # per design, the rounds of it each kernel misses: one product for every kernel at once
    joins = rounds.astype(np.int64) @ (~present).T.astype(np.int64) == 0
    return rounds, joins


def design(present: np.ndarray, kernel: int) -> tuple[list[int], np.ndarray]:
    """:func:`designs` of one kernel: its kernels (base, kernel, the others) and rounds."""
    rounds, joins = designs(present)
    others = [k for k in np.flatnonzero(joins[kernel]).tolist() if k not in (0, kernel)]
    return [0, kernel, *others], np.flatnonzero(rounds[kernel])


def live_sides(values: np.ndarray, kernel: int) -> tuple[np.ndarray, np.ndarray]:
    """The live rule on ``values`` (T, K, R): boot means of K kernels (the base first) in R
    rounds, NaN where a kernel has no single boot in a round, in the same rounds in every
    trial; the (base, new) arrays on which ``decide_batch`` is the test of :func:`design`
    (:func:`block_sides` on its kernels and rounds)."""
    x = np.asarray(values, dtype=float)
    kernels, cols = design(np.isfinite(x).all(axis=0), kernel)
    return block_sides(x[:, kernels][:, :, cols], 1)


@dataclass
class Rounds:
    """One metric's boot means of a comparison's kernels by round: ``means`` (K, R), the base
    first, over the rounds holding exactly one boot of the base, NaN where a kernel has no
    boot or two there; ``runs`` the runs of each such boot. The warm-up rule is decided on
    every boot of every kernel (the kernels of one design must share it)."""

    means: np.ndarray
    runs: np.ndarray
    warmup_dropped: bool

    def __post_init__(self) -> None:
        present = np.isfinite(self.means)
        self.key = (present.shape, present.tobytes())
        rounds, joins = designs(present)
        self._sizes = (
            joins.sum(axis=1).tolist(), rounds.sum(axis=1).tolist(),
            (rounds @ self.runs[0]).tolist(), (rounds * self.runs).sum(axis=1).tolist(),
        )  # fmt: skip

    def block(self, kernel: int) -> Block:
        """How ``kernel`` is judged against the base (:func:`designs`)."""
        kernels, rounds, runs_base, runs_new = (x[kernel] for x in self._sizes)
        return Block(self, kernel, kernels, rounds, runs_base, runs_new, self.warmup_dropped)


@dataclass
class Block:
    """A kernel against the base in its block design: the rounds and kernels of the design,
    and the runs of the base's and the kernel's boots in those rounds."""

    of: Rounds
    kernel: int
    kernels: int
    rounds: int
    runs_base: int
    runs_new: int
    warmup_dropped: bool


def block_sides_of(items: Sequence[Block]) -> list[tuple[list[float], list[float]]]:
    """Per block, flat sides (every value its own boot) on which the verdict's Welch test is
    the block design's test (:func:`live_sides`); blocks of one kernel and the same rounds
    present go through one batch, since a page judges thousands of metrics."""
    out: list[tuple[list[float], list[float]]] = [([], [])] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, b in enumerate(items):
        groups.setdefault((b.kernel, b.of.key), []).append(i)
    for (kernel, _present), idx in groups.items():
        base, new = live_sides(np.stack([items[i].of.means for i in idx]), kernel)
        for i, bi, ni in zip(idx, base.tolist(), new.tolist(), strict=True):
            out[i] = (bi, ni)
    return out


def by_round(
    sides: Sequence[Mapping[Hashable, Sequence[float]]], block_of: Mapping[Hashable, Hashable]
) -> Rounds:
    """A metric's :class:`Rounds` from each kernel's side ({boot: per-run values}, the base
    first; ``block_of``: {boot: its round, :func:`round_of`}). A round where a kernel has no
    boot (adaptive rounds for other kernels, a lost boot) or two (runs of another series on a
    reused build) holds nothing of it."""

    def single(side: Mapping[Hashable, Sequence[float]]) -> dict[Hashable, Hashable]:
        out: dict[Hashable, Hashable] = {}
        for k in side:
            r = block_of.get(k)
            if r is not None:
                out[r] = None if r in out else k  # two boots of a side: the round is out
        return out

    one = [single(side) for side in sides]
    cols = [r for r, kb in one[0].items() if kb is not None]
    drop = any(max(map(len, side.values()), default=0) > 1 for side in sides) and (
        boots.warmup_detected([b for side in sides for b in boots.boots_of(side)])
    )
    means, runs = [], []
    for side, at in zip(sides, one, strict=True):
        boot = [at.get(r) for r in cols]
        means.append([math.nan if kb is None else _boot_mean(side[kb], drop) for kb in boot])
        runs.append([0 if kb is None else len(side[kb]) for kb in boot])
    m = np.array(means, dtype=float).reshape(len(sides), len(cols))
    return Rounds(m, np.where(np.isfinite(m), np.array(runs).reshape(m.shape), 0), drop)


def _boot_mean(runs: Sequence[float], drop: bool) -> float:
    # a one-run boot is its own mean: most metrics, without an array per boot
    if len(runs) == 1:
        return float(runs[0])
    m = boots.boot_means(boots.boots_of({0: runs}), drop)
    return float(m[0]) if m.size else math.nan
