"""Quarantine: a machine whose nightly A/A went bad gets no new rounds of boots until a later
A/A is healthy, so its noise does not fall on anyone's verdict meanwhile.

An A/A night is bad when, for a headline metric, the verdict rule called one kernel changed
(a false verdict), when the boot-to-boot spread is well above the machine's own usual spread
(the median of its earlier nights), or when the machine's spread history has a step up that
lasts to tonight (the change points of :mod:`changepoints` over one point per night). The
state lives in the machine's ``meta["quarantine"]`` (why, since when); the dispatcher hands
the names of quarantined machines to Buildbot with every batch of rounds, and the benchmark
builders' ``canStartBuild`` keeps those rounds off them (jobs/executors/buildbot/workers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import changepoints
from stackbench.resultsdb.models import Machine

# a spread this many times the machine's usual one is not its noise any more
SPREAD_FACTOR = 2.0
USUAL_NIGHTS = 3  # earlier nights needed before "usual" means anything
# a spread estimate from a dozen boots moves by a fifth from night to night: only a step of
# half the level again is a machine that changed
SPREAD_STEP = changepoints.Rule(min_magnitude=0.5)


def reasons(nights: Sequence[dict[str, Any]]) -> list[str]:
    """Why the last of a machine's A/A nights (``meta["aa"]``, oldest first) is bad; empty
    when it is healthy."""
    if not nights:
        return []
    last = nights[-1]
    out = []
    for f in last["figures"]:
        metric = f["metric"]
        if f["false_alarm"]:
            change = f.get("change_pct")
            said = f" ({change:+.1f}%)" if change is not None else ""
            out.append(f"{metric}: the A/A called one kernel changed{said}")
        earlier = [
            g["spread_pct"] for n in nights[:-1] for g in n["figures"] if g["metric"] == metric
        ]
        usual = float(np.median(earlier)) if len(earlier) >= USUAL_NIGHTS else None
        if usual and f["spread_pct"] > SPREAD_FACTOR * usual:
            out.append(
                f"{metric}: spread {f['spread_pct']:.2f}% is over {SPREAD_FACTOR:g}x its usual "
                f"{usual:.2f}%"
            )
        history = [[s] for s in [*earlier, f["spread_pct"]]]
        steps = changepoints.shifts(history, higher_is_better=False, rule=SPREAD_STEP)
        if steps and steps[-1].direction == "worse":
            at = nights[steps[-1].night - len(history) + len(nights)]["at"][:10]
            out.append(f"{metric}: its A/A spread stepped up {steps[-1].change_pct:+.0f}% on {at}")
    return out


def judged(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The machine's meta with its quarantine set (since the first bad night) or lifted,
    after its last A/A night."""
    out = dict(meta or {})
    nights = out.get("aa") or []
    why = reasons(nights)
    if not why:
        out.pop("quarantine", None)
        return out
    since = (out.get("quarantine") or {}).get("since") or nights[-1]["at"]
    out["quarantine"] = {"since": since, "why": why}
    return out


def avoided(s: Session) -> list[str]:
    """Names of the quarantined machines that new rounds keep off: those with a healthy
    machine of their kind to go to (a kind with none left still runs, on what it has)."""
    machines = list(s.scalars(select(Machine)))
    sick = {m.name for m in machines if (m.meta or {}).get("quarantine")}
    healthy_kinds = {m.kind for m in machines if m.name not in sick}
    return sorted(m.name for m in machines if m.name in sick and m.kind in healthy_kinds)
