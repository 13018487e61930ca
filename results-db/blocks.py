"""Rounds and boxes of ONE pair: how a kernel's boots meet its base's, and whether the verdict
pairs them.

The verdict of kernel K against base B is a function of the boots of B and K alone (and of
their rounds and boxes), never of what else a page holds: :func:`pair` is the one place that
decides how the two sides are compared, and every view (``compare``, the series page, the
comparison page, mails, the API, the adaptive rounds) goes through it via
:func:`stackbench.resultsdb.tables.verdict.compare`.

Each round of a plan boots every kernel once, whole on one box, within minutes. A box's
offset, and a host's slow drift, fall on both kernels of a round alike, so wherever at least
``MIN_ROUNDS`` rounds hold the pair it is compared by round: the paired test on the per-round
differences of boot means (:func:`stackbench.resultsdb.verdict.decide_batch` with
``paired``), the base's and the kernel's noise both in those differences and no other
kernel's. That holds on several boxes and on one host alike (on one drifting host, pairing
took power at a 5% change from 79-85% to 91-93%: docs/verdict.md). With fewer rounds, or
without rounds (imports), the boots are compared unpaired (Welch's test, each side's
variance its own). The choice is made from the rounds (the design), never from the values.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stackbench.resultsdb import boots

# fewer rounds holding both kernels than this, and the pair is compared unpaired (the plan's
# own minimum of boots per kernel: jobs/executors/plan.py MIN_BOOTS)
MIN_ROUNDS = 3
PAIRED = "paired by round"


def round_of(run: Any) -> Hashable | None:
    """The round of a run row: its series' round of the plan on one machine and worker
    (every kernel of a round boots on the worker that ran the round, its host-load period
    alike); None for runs without a recorded round (imports, older rows)."""
    rnd = getattr(run, "boot_round", None)
    meta = getattr(run, "meta", None) or {}
    if rnd is None:
        rnd = meta.get("boot_round")
    if rnd in (None, ""):
        return None
    return (str(meta.get("series") or ""), int(rnd), run.machine, str(meta.get("worker") or ""))


def box_of(block: Hashable) -> Hashable:
    """The box a round (:func:`round_of`) ran on: its machine and worker."""
    return block[2:] if isinstance(block, tuple) else block


@dataclass
class Pair:
    """How one metric of kernel K is compared with its base: ``base``/``new`` are the sides
    the verdict takes (flat per-round boot means when ``paired``, else {boot: runs});
    ``rounds`` the rounds holding one boot of each, ``boxes`` the boxes those ran on."""

    base: boots.Side
    new: boots.Side
    paired: bool
    rounds: int
    boxes: int
    runs_base: int = 0
    runs_new: int = 0
    warmup_dropped: bool = False

    def test(self, test: str) -> str:
        """The verdict's test as a table names it: paired, or unpaired and why."""
        if self.paired:
            return f"{PAIRED} ({self.boxes} box{'es' if self.boxes != 1 else ''})"
        return f"{test}, unpaired ({self.rounds} rounds hold both kernels)"


def _single(side: Mapping[Hashable, Sequence[float]], block_of: Mapping) -> dict:
    out: dict[Hashable, Hashable] = {}
    for k in side:
        r = block_of.get(k)
        if r is not None:
            out[r] = None if r in out else k  # two boots of a side: the round is out
    return out


def pair(
    base: Mapping[Hashable, Sequence[float]],
    new: Mapping[Hashable, Sequence[float]],
    block_of: Mapping[Hashable, Hashable],
    box: Mapping[Hashable, Hashable] | None = None,
) -> Pair:
    """The comparison of one metric of a pair (each side {boot: per-run values};
    ``block_of``: {boot: its round}; ``box``: {round: its box}, default :func:`box_of`). A
    round holds the pair when it has exactly one boot of each (adaptive rounds for other
    kernels, a lost boot, or the runs of another series on a reused build hold nothing).
    Paired when at least ``MIN_ROUNDS`` such rounds exist, on any number of boxes; the
    warm-up rule is then decided on the pair's own boots, as the unpaired test decides it."""
    at_b, at_n = _single(base, block_of), _single(new, block_of)
    both = [r for r, kb in at_b.items() if kb is not None and at_n.get(r) is not None]
    where = {box.get(r) if box is not None else box_of(r) for r in both}
    if len(both) < MIN_ROUNDS:
        return Pair(base, new, False, len(both), len(where))
    bb, nb = [base[at_b[r]] for r in both], [new[at_n[r]] for r in both]
    drop = any(len(x) > 1 for x in (*bb, *nb)) and boots.warmup_detected(
        [*boots.boots_of(dict(enumerate(bb))), *boots.boots_of(dict(enumerate(nb)))]
    )
    mb, mn = [_boot_mean(x, drop) for x in bb], [_boot_mean(x, drop) for x in nb]
    keep = [i for i in range(len(both)) if math.isfinite(mb[i]) and math.isfinite(mn[i])]
    return Pair(
        [mb[i] for i in keep], [mn[i] for i in keep], True, len(keep), len(where),
        sum(len(bb[i]) for i in keep), sum(len(nb[i]) for i in keep), drop,
    )  # fmt: skip


def _boot_mean(runs: Sequence[float], drop: bool) -> float:
    # a one-run boot is its own mean: most metrics, without an array per boot
    if len(runs) == 1:
        return float(runs[0])
    m = boots.boot_means(boots.boots_of({0: runs}), drop)
    return float(m[0]) if m.size else math.nan
