"""What an A/A of one machine kind says about its noise: one kernel booted in two interleaved
sets, judged against itself by the verdict rule.

Per headline metric: whether the rule called the two sets changed (a false alarm: nothing
changed), the boot-to-boot spread (CoV of the boot means), and the smallest change a comparison of
the usual number of rounds detects with ``verdict.POWER``: the rule of
:func:`stackbench.resultsdb.evidence.smallest` that the report mails quote, on the A/A's own
boots resampled by round (:func:`smallest_change`), so the noise's shape, tails and drift
are the machine's and not a normal curve's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import evidence, verdict
from stackbench.resultsdb.models import Machine

TRIALS = 2000


@dataclass(frozen=True)
class Figures:
    metric: str
    boots: int  # boots per set
    false_alarm: bool  # the rule called the two sets of one kernel changed
    change_pct: float | None  # what it estimated between them
    spread_pct: float  # boot-to-boot CoV
    smallest_pct: float | None  # smallest change found with verdict.POWER at ``usual`` boots
    usual: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def split(boots: Sequence[float]) -> tuple[list[float], list[float]]:
    """Two interleaved sets in boot order: a slow spell of the host falls on both."""
    return list(boots[0::2]), list(boots[1::2])


def smallest_change(
    boots: Sequence[float],
    higher_is_better: bool | None,
    kind: str,
    usual: int,
    policy: verdict.Policy = verdict.DEFAULT,
    seed: int = 0,
) -> float | None:
    """The smallest change (in %, points for absolute kinds) that a comparison of ``usual``
    rounds calls changed in the worse direction with ``verdict.POWER``, by
    :func:`evidence.smallest`, the rule the report mails quote too. A comparison on this
    machine is paired by round (the driver plans rounds), so the noise is the night's own:
    consecutive boots (one of each set, minutes apart) are a round, resampled whole, so
    the host's slow drift cancels in them as in a round. None when no change under 100% is
    seen."""
    v = np.asarray(boots, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 4 or v.mean() == 0:
        return None
    absolute = kind in policy.absolute_kinds
    units = v - v.mean() + 100.0 if absolute else v / v.mean()
    a, b = units[0 : 2 * (units.size // 2) : 2], units[1 : 2 * (units.size // 2) : 2]
    pick = np.random.default_rng(seed).integers(a.size, size=(TRIALS, usual))
    worse = 1.0 if higher_is_better is False else -1.0
    found = evidence.smallest(a[pick], b[pick], kind, policy, paired=True, worse=worse)
    return None if math.isinf(found) else round(found * (1 if absolute else 100), 2)


def figures(
    metric: str,
    boots: Sequence[float],
    higher_is_better: bool | None,
    kind: str,
    usual: int,
    policy: verdict.Policy = verdict.DEFAULT,
) -> Figures:
    """The A/A figures of one metric from the boot means of one kernel, in boot order."""
    a, b = split(boots)
    v = verdict.judge(a, b, higher_is_better=higher_is_better, kind=kind, policy=policy)
    arr = np.asarray(boots, dtype=float)
    spread = float(arr.std(ddof=1) / abs(arr.mean()) * 100) if arr.size > 1 and arr.mean() else 0.0
    return Figures(
        metric=metric,
        boots=min(len(a), len(b)),
        false_alarm=v.outcome == "changed",
        change_pct=v.change_pct,
        spread_pct=round(spread, 3),
        smallest_pct=smallest_change(boots, higher_is_better, kind, usual, policy),
        usual=usual,
    )


def summary(meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per metric, what a machine's A/A nights say: the share of nights the rule called one
    kernel changed (the measured false-alarm rate), and the last night's spread and smallest
    change found with ``verdict.POWER``."""
    nights = (meta or {}).get("aa") or []
    per: dict[str, dict[str, Any]] = {}
    for n in nights:
        for f in n["figures"]:
            row = per.setdefault(f["metric"], {"metric": f["metric"], "nights": 0, "false": 0})
            row["nights"] += 1
            row["false"] += int(bool(f["false_alarm"]))
            row.update(
                spread_pct=f["spread_pct"],
                smallest_pct=f["smallest_pct"],
                usual=f["usual"],
                at=n["at"],
            )
    for row in per.values():
        row["false_rate"] = row["false"] / row["nights"]
    return list(per.values())


def of_machines(s: Session, names: Iterable[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(machine, metric): its :func:`summary` row} of the named machines' A/A nights."""
    wanted = set(names)
    out = {}
    for m in s.scalars(select(Machine).where(Machine.name.in_(wanted))):
        for row in summary(m.meta):
            out[(m.name, row["metric"])] = row
    return out


def describe(row: dict[str, Any]) -> str:
    """One A/A summary row in words, as the comparison pages and the report mails say it."""
    if row["smallest_pct"] is None:
        smallest = f"nothing under 100% at {row['usual']} boots"
    else:
        smallest = f"{row['smallest_pct']:g}% at {row['usual']} boots"
    return (
        f"A/A: false alarms {100 * row['false_rate']:.0f}% of {row['nights']} "
        f"night{'s' if row['nights'] != 1 else ''}, "
        f"spread {row['spread_pct']:.2f}%, smallest change seen with "
        f"{100 * verdict.POWER:.0f}% power {smallest}"
    )
