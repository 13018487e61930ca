"""How well any change-point rule could do on the nightly history's data: the floors of
issue 37 (at most 2 false alarms per 100 step-free histories of 60 nights, a 5% step alerted
within 5 nights in at least 95% at boot CoV 3%) against scan statistics calibrated exactly.

    .venv/bin/python bench/changepoint_bounds.py [--histories 4000] [--seed 1] [--night-sd 1.78]

The nights are the kindest model there is: independent, normal, one point a night with the
spread of ``cov 3%`` in bench/changepoint_bench.py (1.78% at 5 boots a night: the boots
and the night's run offset; 1.53% at 10, ``--night-sd``). A step of 5% down starts at a
random night 5..54, as there.
Each rule looks every night at every cut with at least 3 nights on each side (the
live rule's ``min_after``) and alarms when the most negative standardized difference of
the two sides' means is below a threshold. The threshold is not a p-value: it is the
quantile of the step-free histories' own minimum, so each row has exactly the false-alarm
rate it is printed with, a calibration no rule that runs in production can have. A step
counts as found when the first alarm of its history falls on its night or one of the 4
after it. The variance each row gets to divide by:

- ``exact``: the true one (a machine whose A/A ran for ever);
- ``A/A, aligned``: estimated from the A/A nights booted the same nights as the history so
  far (what ``history.aa_values`` gives the live rule), ``n - 1`` degrees of freedom;
- ``A/A + residuals``: that A/A pooled with the history's own residuals around the cut
  tested (``n - 2`` more);
- ``A/A, 60 older``: the aligned A/A with 60 A/A nights from before the branch was tracked.

If even these bounds miss a floor, no rule on the same data meets both floors together.
Figures and what follows from them: bench/changepoints.md.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from changepoint_bench import FLOOR_DETECTED, FLOOR_FALSE, NIGHTS, STEP, WITHIN

from stackbench.resultsdb import changepoints as cp

NIGHT_SD = 1.78  # % of the level: a night's point at cov 3%, 5 boots (bench/changepoints.md)
MIN_SIDE = cp.DEFAULT_RULE.min_after  # nights on each side of a cut
EARLY = 15  # steps before this night are told apart


def scan(
    x: np.ndarray, aa: np.ndarray | None, older: int, pooled: bool, night_sd: float
) -> np.ndarray:
    """Per history and night, the most negative standardized after-minus-before difference
    over the cuts of the nights so far (``inf`` before a cut is possible). ``aa``: the A/A
    nights (``older`` of them before the history's first), None for the exact variance."""
    hist, nights = x.shape
    cs = np.concatenate([np.zeros((hist, 1)), np.cumsum(x, 1)], 1)
    cq = np.concatenate([np.zeros((hist, 1)), np.cumsum(x * x, 1)], 1)
    out = np.full((hist, nights), np.inf)
    for n in range(2 * MIN_SIDE, nights + 1):
        c = np.arange(MIN_SIDE, n - MIN_SIDE + 1)
        before, after = cs[:, c], cs[:, [n]] - cs[:, c]
        if aa is None:
            sd = np.full((hist, 1), night_sd)
        else:
            a = aa[:, : older + n]
            ss = ((a - a.mean(1, keepdims=True)) ** 2).sum(1)[:, None]
            df = a.shape[1] - 1
            if pooled:
                ss = ss + (cq[:, c] - before**2 / c) + (cq[:, [n]] - cq[:, c] - after**2 / (n - c))
                df += n - 2
            sd = np.sqrt(ss / df)
        z = (after / (n - c) - before / c) / (sd * np.sqrt(1 / c + 1 / (n - c)))
        out[:, n - 1] = z.min(1)
    return out


def first_alarm(m: np.ndarray, threshold: float) -> np.ndarray:
    hit = m < threshold
    return np.where(hit.any(1), hit.argmax(1), NIGHTS + WITHIN)


def row(
    rng: np.random.Generator, histories: int, aa: bool, older: int, pooled: bool, night_sd: float
) -> list[tuple[float, float]]:
    """Per false-alarm rate (1 and 2 per 100): the share of the steps found, and of the
    early ones."""

    def draw() -> tuple[np.ndarray, np.ndarray | None]:
        a = rng.normal(0, night_sd, (histories, NIGHTS + older)) if aa else None
        return rng.normal(0, night_sd, (histories, NIGHTS)), a

    flat, flat_aa = draw()
    null_min = scan(flat, flat_aa, older, pooled, night_sd).min(1)
    steps = rng.integers(5, NIGHTS - 5, histories)
    stepped, stepped_aa = draw()
    stepped -= 100 * STEP * (np.arange(NIGHTS)[None, :] >= steps[:, None])
    st = scan(stepped, stepped_aa, older, pooled, night_sd)
    out = []
    for false in (1.0, FLOOR_FALSE):
        first = first_alarm(st, float(np.quantile(null_min, false / 100)))
        found = (first >= steps) & (first < steps + WITHIN)
        out.append((float(found.mean()), float(found[steps < EARLY].mean())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=4000, help="per row, each kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--night-sd", type=float, default=NIGHT_SD, help="a night point's SD, %%")
    a = ap.parse_args()
    if a.histories < 100:
        raise SystemExit("changepoint_bounds: --histories must be at least 100")
    if a.night_sd <= 0:
        raise SystemExit("changepoint_bounds: --night-sd must be above 0")
    started = time.monotonic()
    rng = np.random.default_rng(a.seed)
    print(
        f"{a.histories} step-free and {a.histories} stepped ({100 * STEP:.0f}%) histories per row, "
        f"{NIGHTS} nights, night point SD {a.night_sd}%, seed {a.seed}; found within {WITHIN} "
        f"nights (in brackets: steps before night {EARLY})"
    )
    print(f"{'variance':<16} | {'false 1/100':>16} | {'false 2/100':>16}")
    best = 0.0
    for name, aa, older, pooled in (
        ("exact", False, 0, False),
        ("A/A, aligned", True, 0, False),
        ("A/A + residuals", True, 0, True),
        ("A/A, 60 older", True, 60, False),
    ):
        found = row(rng, a.histories, aa, older, pooled, a.night_sd)
        if name != "exact":
            best = max(best, found[1][0])
        cells = [f"{100 * f:5.1f}% ({100 * e:5.1f}%)" for f, e in found]
        print(f"{name:<16} | {cells[0]:>16} | {cells[1]:>16}")
    print(
        f"floors: <= {FLOOR_FALSE:g} false alarms per 100, >= {100 * FLOOR_DETECTED:.0f}% "
        f"found; best of the estimated variances at 2/100: {100 * best:.1f}%"
    )
    print(f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
