"""The plan of a comparison: which kernel boots when, and which runs each boot does.

"Run this plan of (kernel, job, runs)" is laid out as rounds of boots. Every round boots
every kernel of the comparison once, in a seeded, recorded order; every len(kernels) rounds
of a plan put each kernel once in each place of a round (:func:`balanced_orders`). The runs
of a kernel are spread over several boots (by default at least ``MIN_BOOTS``). The runs of one boot share that boot's state and the host's load while it
ran, so they are not independent samples; spreading them over boots, and interleaving the
kernels, keeps host drift from looking like a patch effect and lets the statistics treat
boots as the units. Every run records its boot (``boot_id``) and round (``boot_round``).

The plan is data: the in-process executor (:mod:`stackbench.jobs.driver.pipeline`) walks it boot by
boot; anything else that boots kernels can walk the same plan.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

# fewer boots than this cannot tell boot-to-boot noise from a patch effect
MIN_BOOTS = 3
# more runs than this in one boot add little: they share the boot's noise
MAX_RUNS_PER_BOOT = 4


@dataclass(frozen=True)
class Boot:
    """One boot of one kernel: the runs of each sub-job it does, numbered within the
    kernel's whole plan (``first`` is the first iteration, so numbers never repeat)."""

    round: int  # 1-based
    position: int  # 1-based place within its round (balanced_orders)
    kernel: str
    runs: int  # runs of every sub-job in this boot
    first: int  # iteration number of this boot's first run
    boot_id: str
    index: int = 0  # 0-based place of the round within this plan
    boots: int = 1  # boots of this kernel in this plan

    def iterations(self) -> range:
        return range(self.first, self.first + self.runs)

    def share(self, total_runs: int) -> tuple[int, int]:
        """(first iteration, runs) of a sub-job with ``total_runs`` runs in this boot: a
        sub-job's own runs spread over the plan's boots like the plan's (0 runs: not here)."""
        shares = (
            split_runs(total_runs, self.boots)
            if total_runs >= self.boots
            else [1 if i < total_runs else 0 for i in range(self.boots)]
        )
        return sum(shares[: self.index]), shares[self.index]


@dataclass
class Plan:
    kernels: list[str]
    runs: int  # runs of every sub-job per kernel, over all boots
    boots: int  # boots per kernel (= rounds)
    seed: int
    rounds: list[list[Boot]] = field(default_factory=list)

    def boots_in_order(self) -> list[Boot]:
        return [b for rnd in self.rounds for b in rnd]

    def describe(self) -> dict[str, Any]:
        """What series.meta keeps: enough to see, and redo, the order the kernels ran in."""
        return {
            "runs": self.runs,
            "boots_per_kernel": self.boots,
            "seed": self.seed,
            "order": [[b.kernel for b in rnd] for rnd in self.rounds],
        }


def boots_for(runs: int, boots: int | None = None) -> int:
    """Boots per kernel for ``runs`` runs: at least MIN_BOOTS (fewer when there are fewer
    runs), more when a boot would hold over MAX_RUNS_PER_BOOT runs; never more than runs."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, not {runs}")
    if boots is not None:
        if boots < 1:
            raise ValueError(f"boots must be at least 1, not {boots}")
        return min(boots, runs)
    return min(runs, max(MIN_BOOTS, math.ceil(runs / MAX_RUNS_PER_BOOT)))


def split_runs(runs: int, boots: int) -> list[int]:
    """``runs`` over ``boots`` as evenly as possible, the larger shares first."""
    base, extra = divmod(runs, boots)
    return [base + (1 if i < extra else 0) for i in range(boots)]


def make_plan(
    kernels: list[str],
    runs: int,
    *,
    boots: int | None = None,
    seed: int | None = None,
    tag: str = "plan",
    first_round: int = 1,
) -> Plan:
    """Rounds of boots for ``kernels`` (their keys, e.g. commits), ``runs`` runs each.

    ``seed`` fixes the shuffles (None: a fresh one, recorded in the plan); ``tag`` makes the
    boot ids unique to this execution (e.g. the series and attempt); ``first_round`` numbers
    the rounds of a plan that adds rounds to earlier ones."""
    if not kernels:
        raise ValueError("a plan needs at least one kernel")
    if len(set(kernels)) != len(kernels):
        raise ValueError("a kernel appears twice in the plan")
    n_boots = boots_for(runs, boots)
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    shares = split_runs(runs, n_boots)
    plan = Plan(kernels=list(kernels), runs=runs, boots=n_boots, seed=seed)
    orders = balanced_orders(list(kernels), len(shares), rng)
    for i, share in enumerate(shares):
        rnd = first_round + i
        order = orders[i]
        first = sum(shares[:i])
        plan.rounds.append(
            [
                Boot(
                    round=rnd,
                    position=pos,
                    kernel=k,
                    runs=share,
                    first=first,
                    boot_id=boot_id(tag, rnd, k),
                    index=i,
                    boots=n_boots,
                )
                for pos, k in enumerate(order, 1)
            ]
        )
    return plan


def balanced_orders(kernels: list[str], rounds: int, rng: random.Random) -> list[list[str]]:
    """``rounds`` orders of ``kernels`` whose every block of len(kernels) rounds is a Latin
    square: each kernel once in each place. Independent shuffles let one kernel take the
    first place round after round (in a test's seeded plan the base went first in 6 of 10
    rounds), and a drift within a round (the first boot after a round's start, the last
    while other workers idle) then falls on that kernel as if it were its effect. Each block
    is a cyclic square with its places, rows and kernels shuffled, so who follows whom
    changes from block to block as well."""
    k = len(kernels)
    out: list[list[str]] = []
    while len(out) < rounds:
        names, places, rows = list(kernels), list(range(k)), list(range(k))
        for x in (names, places, rows):
            rng.shuffle(x)
        for r in rows[: rounds - len(out)]:
            out.append([names[(places[j] + r) % k] for j in range(k)])
    return out


def boot_id(tag: str, rnd: int, kernel: str) -> str:
    """A boot's identity: stable for (execution, round, kernel), so a resumed execution
    stores a boot's runs once, and at most 128 characters (the column's size)."""
    raw = f"{tag}-r{rnd}-{kernel[:12]}"
    if len(raw) <= 128:
        return raw
    return f"{raw[:100]}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def stamp(run: Any, boot: Boot, first: int, series: int | None = None) -> Any:
    """A run collected from ``boot`` (numbered from 0 within it) as a run of the plan: its
    iteration numbered from ``first`` within the kernel's plan, its boot, round and series
    in ``meta`` (ingest stores them in ``run.boot_id`` / ``run.boot_round`` /
    ``run.series_id``), and an idempotency key that is unique per boot."""
    meta = {**run.meta, "boot_id": boot.boot_id, "boot_round": boot.round}
    if series is not None:
        meta["series"] = series
    meta["boot_position"] = boot.position
    stamped = replace(run, iteration=first + run.iteration, meta=meta, idempotency_key=None)
    stamped.idempotency_key = hashlib.sha256(
        f"{stamped.key()}\0{boot.boot_id}".encode()
    ).hexdigest()
    return stamped
