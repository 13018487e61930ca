"""Change points over a tracked branch's nightly history of one job and metric: the nights
where the level shifted, the segments between them, and which shift is new enough to open a
regression.

The detector is Apache Otava's (Hunter: E-Divisive means over sliding windows, then a merge
step that keeps only the change points whose two sides differ by Student's t at
``max_pvalue`` and by at least ``min_magnitude``); docs/changepoints.md says why Otava and
how the figures below were chosen (bench/changepoint_bench.py measures them). Each night is
one point, the mean of its boots: boots of one night share that night's host, so a night and
not a boot is the independent unit of a history, as a boot and not a run is of a verdict.

A shift is alerted once: :func:`new_shift` skips a change point within ``same_shift``
nights of one already alerted (Otava may move a change point by a night or two as nights
are added), and the nights after a shift belong to its segment, so they are compared with
the new level and never alert again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from otava.analysis import compute_change_points


@dataclass(frozen=True)
class Rule:
    max_pvalue: float = 0.001  # Otava's default: t-test p of the two sides of a change point
    # a level shift smaller than this is no change point. Above the verdict's 2% throughput
    # floor: a night is one run, and runs of one kernel wander (the demo's: CoV 1.14%,
    # boots 2.41%), so three nights drawn low look like a 2-3% level; at 2% that made 6.5
    # false alarms per 100 step-free histories, at 3% 0.5 (bench/changepoints.md). Smaller
    # regressions are left to the head-versus-last-good first look.
    min_magnitude: float = 0.03
    # a night or two at a new level may be a spike or a noisy spell; three are a level
    min_after: int = 3
    window: int = 30  # Otava's sliding window, in nights
    same_shift: int = 3  # nights: a change point this close to an alerted one is that shift
    # a change point may move further as nights are added: with no other change point
    # nearer, one this close to an alerted one is still that shift
    max_move: int = 10
    history: int = 120  # nights looked at: older ones cannot date tonight's shift


DEFAULT_RULE = Rule()


@dataclass(frozen=True)
class Shift:
    night: int  # the first night at the new level (an index into the history)
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    change_pct: float
    p_value: float
    direction: str  # worse | better | "" (no direction)

    def as_dict(self) -> dict[str, float | int | str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Segment:
    start: int  # first night (index)
    stop: int  # one past the last night
    mean: float


def night_means(nights: Sequence[Sequence[float]]) -> list[float | None]:
    """One point per night: the mean of its finite boot values (None: nothing measured)."""
    out: list[float | None] = []
    for boots in nights:
        v = np.asarray([x for x in boots if x is not None], dtype=float)
        v = v[np.isfinite(v)]
        out.append(float(v.mean()) if v.size else None)
    return out


def _direction(change: float, higher_is_better: bool | None) -> str:
    if higher_is_better is None or change == 0:
        return ""
    return "better" if (change > 0) == higher_is_better else "worse"


def shifts(
    nights: Sequence[Sequence[float]],
    higher_is_better: bool | None,
    rule: Rule = DEFAULT_RULE,
) -> list[Shift]:
    """The level shifts of a history (one list of boot values per night, oldest first),
    oldest first. A shift needs ``rule.min_after`` measured nights at its new level."""
    means = night_means(nights)
    first = max(0, len(means) - rule.history)
    idx = [i for i in range(first, len(means)) if means[i] is not None]
    series = [float(means[i]) for i in idx]  # type: ignore[arg-type]
    if len(series) < 2 * rule.min_after:
        return []
    points, _weak = compute_change_points(
        series,
        window_len=rule.window,
        max_pvalue=rule.max_pvalue,
        min_magnitude=rule.min_magnitude,
    )
    # a segment shorter than min_after nights is a spike (or a level not yet seen long
    # enough), not a level: shortest first, it joins a neighbour, and what is left is judged
    # again (the medians below then reject what the spike alone made)
    cuts = [cp.index for cp in points]
    pvalue = {cp.index: float(cp.stats.pvalue) for cp in points}
    while cuts:
        bounds = [0, *cuts, len(series)]
        lens = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
        k = int(np.argmin(lens))
        if lens[k] >= rule.min_after:
            break
        # the short segment joins the one before it (the first one, the one after)
        del cuts[max(k - 1, 0)]
    out = []
    bounds = [0, *cuts, len(series)]
    for k, at in enumerate(cuts):
        left, right = series[bounds[k] : at], series[at : bounds[k + 2]]
        before, after = float(np.mean(left)), float(np.mean(right))
        med_left, med_right = float(np.median(left)), float(np.median(right))
        if before == 0 or med_left == 0:
            continue  # no relative change from zero
        # relative to the magnitude, so that a drop of a negative metric is a drop
        change = (after - before) / abs(before) * 100.0
        # a spike drags a short segment's mean but not its median: the typical night on
        # each side must show the shift too, in the same direction
        typical = (med_right - med_left) / abs(med_left)
        if abs(typical) < rule.min_magnitude or typical * change <= 0:
            continue
        out.append(
            Shift(
                night=idx[at],
                before=before,
                after=after,
                change_pct=round(change, 3),
                p_value=pvalue[at],
                direction=_direction(change, higher_is_better),
            )
        )
    return out


def segments(nights: Sequence[Sequence[float]], found: Sequence[Shift]) -> list[Segment]:
    """The history cut at the shifts, each segment with the mean of its nights."""
    means = night_means(nights)
    cuts = [0, *(s.night for s in found), len(means)]
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        vals = [m for m in means[a:b] if m is not None]
        if b > a and vals:
            out.append(Segment(a, b, float(np.mean(vals))))
    return out


def dated_by(shift: Shift, every: Sequence[Shift], night: int, rule: Rule = DEFAULT_RULE) -> bool:
    """Whether an alert dated ``night`` is this shift: it is within ``same_shift`` nights, or
    the change point moved further (up to ``max_move``, as nights were added) with no other
    change point of ``every`` (all shifts found tonight) nearer to or between the two."""
    d = abs(shift.night - night)
    if d <= rule.same_shift:
        return True
    if d > rule.max_move:
        return False
    lo, hi = sorted((shift.night, night))
    return not any(o is not shift and lo <= o.night <= hi for o in every) and all(
        abs(o.night - night) >= d for o in every
    )


def new_shift(
    nights: Sequence[Sequence[float]],
    higher_is_better: bool | None,
    alerted: Sequence[int],
    rule: Rule = DEFAULT_RULE,
) -> Shift | None:
    """The oldest worse shift that no alert has dated yet: ``alerted`` holds the nights of the
    shifts already alerted (or regressions already open) for this job and metric."""
    every = shifts(nights, higher_is_better, rule)
    for s in every:
        if s.direction == "worse" and not any(dated_by(s, every, a, rule) for a in alerted):
            return s
    return None
