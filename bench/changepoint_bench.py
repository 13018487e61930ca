#!/usr/bin/env python3
"""The nightly change-point rule (results-db/changepoints.py) on simulated branch histories:
false alarms, detection and re-fires per kind of noise, beside the floors.

A history is 60 nights of one tracked branch; every night boots the head 5 times (the
nightly's start; ``--head-boots``) and its point is the mean of those boots. A night is a
run: its boots' values are ``level * drift * n * r``, with the run offset ``n`` drawn
(with replacement) from the stored runs' means over their kernel's mean and each boot
offset ``r`` from the stored boots' values over their run's mean
(bench/data/demo_boots.json: the demo's A/A, boot CoV 2.41%, run CoV 1.14%, a -7.5% tail),
both spreads scaled together to the row's boot CoV. The rows:

* ``cov 2%``, ``cov 3%``, ``cov 5%``: those offsets at a boot CoV of 2, 3 and 5% (the run
  spread scaled alike: 0.95, 1.42, 2.37%);
* ``t tails``: boot offsets from Student's t with 3 degrees of freedom at a CoV of 3%, the
  run offsets of ``cov 3%``;
* ``outliers``: ``cov 3%`` with 3% of the boots 25% slow (a boot that hit a busy host);
* ``AR drift``: ``cov 2%`` on a host whose level drifts slowly from night to night: AR(1),
  rho 0.9, a stationary CoV of ``--drift`` (1.5%).

Beside each history, the same nights' A/A of the baseline on the same hosts (20 boots, its
own run offsets, the host's drift): the nightly judges with the nights' covariance measured
on them (:func:`changepoints.reference`); ``--no-aa`` judges as a machine without A/A
nights does (the residuals' own dependence).

Per row, step-free histories and histories whose level drops by 5% from a random night on
(at least 5 nights before the end). The rule night by night, as jobs/tracking/history.py
runs it: tonight's shifts (:func:`changepoints.shifts`), the alerts already raised follow
the change point that claims them (:func:`changepoints.follow`: their date is refined) and
every worse shift unclaimed is an alert. Figures:

* false alarms per 100 step-free histories: every alert (floor: at most 2, every row);
* detected: a 5% step alerted on one of its first 5 nights, the step's own first (floor:
  95% at ``cov 3%``); the median and worst nights from the step to the alert (0: its night);
* ceiling: the share of the same 5% steps a test that knows more than any rule can would
  alert within 5 nights: it knows the step's night and the variance of a night's point
  (measured on 20,000 simulated nights of the row), and compares the nights before the
  step with those after it on each night the rule could alert (3 to 5 nights at the new
  level), at the rule's own p-value and magnitude floor. No rule of that threshold detects
  more; rows with host drift have no such variance and print "-";
* re-fires: a later alert dated within ``max_move`` nights of the step once it was alerted,
  with no other change point at the step that night: it took the step's place, the step
  alerted again (floor: 0, every row). An alert before the step, dated further away or
  beside the step's still standing change point is a false alarm (``false/100 st``, no
  floor: a spurious shift beside a real one).

The exit status is 1 when a floor is missed. ``--show`` prints the alerts of every history
with a false alarm or a re-fire.

    .venv/bin/python bench/changepoint_bench.py [--histories 200] [--seed 1] [--rows cov3,...]
        [--no-aa]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from stackbench.resultsdb import changepoints as cp

NIGHTS = 60
BOOTS = 5  # boots of the head per night (the nightly's start)
AA_BOOTS = 20  # boots of the baseline's nightly A/A (2 x 10)
STEP = 0.05
WITHIN = 5  # nights from the step, its own the first
LEVEL = 100000.0
DEMO_BOOTS = Path(__file__).resolve().parent / "data" / "demo_boots.json"

FLOOR_FALSE = 2.0  # per 100 step-free histories
FLOOR_DETECTED = 0.95  # of 5% steps within 5 nights, at boot CoV 3%
DETECTION_ROW = "cov 3%"


@dataclass(frozen=True)
class Noise:
    boots: np.ndarray  # a boot's value / its run's mean
    runs: np.ndarray  # a run's mean / its kernel's mean


def demo_noise(path: Path) -> Noise:
    """The relative boot and run offsets of the stored real boots."""
    try:
        doc = json.loads(path.read_text())
        by_kernel: dict[str, list[float]] = {}
        boot_offs: list[float] = []
        for run in doc["runs"]:
            v = np.asarray(run["boots"], dtype=float)
            boot_offs.extend(v / v.mean())
            by_kernel.setdefault(str(run["kernel"]), []).append(float(v.mean()))
    except OSError as exc:
        raise SystemExit(f"changepoint_bench: {path}: {exc.strerror}") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise SystemExit(f"changepoint_bench: {path}: not runs of boot values: {exc}") from None
    if len(boot_offs) < 4:
        raise SystemExit("changepoint_bench: need at least 4 real boots to resample from")
    runs = [m / np.mean(ms) for ms in by_kernel.values() for m in ms]
    return Noise(np.asarray(boot_offs), np.asarray(runs))


def scaled(offs: np.ndarray, cov: float, now: float) -> np.ndarray:
    return 1.0 + (offs - 1.0) * (cov / now if now else 0.0)


# a night's boot offsets: (generator, how many) -> offsets around 1
Boots = Callable[[np.random.Generator, int], np.ndarray]


@dataclass(frozen=True)
class Row:
    name: str
    boots: Boots
    runs: np.ndarray  # run offsets to draw from
    drift: float = 0.0  # stationary CoV of the AR(1) host drift
    rho: float = 0.9


def rows(noise: Noise, drift: float) -> list[Row]:
    boot_cov = float(noise.boots.std(ddof=1))

    def demo(cov: float) -> Boots:
        offs = scaled(noise.boots, cov, boot_cov)
        return lambda rng, n: rng.choice(offs, n)

    def runs(cov: float) -> np.ndarray:
        return scaled(noise.runs, cov, boot_cov)

    def t_tails(rng: np.random.Generator, n: int) -> np.ndarray:
        # t(3) has variance 3: scaled to a CoV of 3%
        return 1.0 + 0.03 * rng.standard_t(3, n) / np.sqrt(3.0)

    cov3 = demo(0.03)

    def outliers(rng: np.random.Generator, n: int) -> np.ndarray:
        return cov3(rng, n) * np.where(rng.random(n) < 0.03, 0.75, 1.0)

    return [
        Row("cov 2%", demo(0.02), runs(0.02)),
        Row("cov 3%", cov3, runs(0.03)),
        Row("cov 5%", demo(0.05), runs(0.05)),
        Row("t tails", t_tails, runs(0.03)),
        Row("outliers", outliers, runs(0.03)),
        Row("AR drift", demo(0.02), runs(0.02), drift=drift),
    ]


Nights = list[list[float]]


def history(
    rng: np.random.Generator, row: Row, step: float, at: int, boots: int = BOOTS
) -> tuple[Nights, Nights]:
    """The nights' boots (``boots`` of the head a night): a level, the host's drift, the
    night's run offset, the boots; and the same nights' A/A of the baseline (``AA_BOOTS``
    boots, its own run offsets, the same host drift: it boots on the same hosts that
    night), step-free."""
    drift = np.zeros(NIGHTS)
    if row.drift:
        shock = row.drift * np.sqrt(1 - row.rho**2)
        drift[0] = row.drift * rng.standard_normal()
        for n in range(1, NIGHTS):
            drift[n] = row.rho * drift[n - 1] + shock * rng.standard_normal()
    run = rng.choice(row.runs, NIGHTS)
    head = [
        list(
            LEVEL * (1 - step if n >= at else 1.0) * (1 + drift[n]) * run[n] * row.boots(rng, boots)
        )
        for n in range(NIGHTS)
    ]
    aa_run = rng.choice(row.runs, NIGHTS)
    aa = [
        list(LEVEL * (1 + drift[n]) * aa_run[n] * row.boots(rng, AA_BOOTS)) for n in range(NIGHTS)
    ]
    return head, aa


# (the night it is raised, the night it says the change began (its last date), the nights
# of the other change points found the night it was raised)
Alert = tuple[int, int, tuple[int, ...]]


def alerts(nights: Nights, aa: Nights | None) -> list[Alert]:
    """The rule night by night, as the nightly runs it (``aa``: the machine's A/A nights,
    None for a machine without them)."""
    alerted: list[int] = []  # each alert's date, refined as the change points move
    raised: list[tuple[int, tuple[int, ...]]] = []
    for n in range(1, NIGHTS + 1):
        ref = cp.reference(aa[:n], nights[:n]) if aa is not None else None
        every = cp.shifts(nights[:n], True, ref=ref)
        alerted, new = cp.follow(every, alerted)
        for s in new:
            alerted.append(s.night)
            raised.append((n - 1, tuple(o.night for o in every if o is not s)))
    return [(r, d, o) for (r, o), d in zip(raised, alerted, strict=True)]


@dataclass
class Tally:
    histories: int = 0
    false_alarms: int = 0
    detected: int = 0
    delays: list[int] = field(default_factory=list)
    refires: int = 0
    ceiling: int = 0


def night_sd(
    row: Row, rng: np.random.Generator, nights: int = 20000, boots: int = BOOTS
) -> float | None:
    """The relative standard deviation of a night's point (:func:`changepoints.night_means`
    of the head's boots, times the night's run offset); None for a row with host drift,
    whose nights are not independent draws of one variance."""
    if row.drift:
        return None
    drawn = np.stack([row.boots(rng, boots) for _ in range(nights)])
    points = cp.night_means(drawn.tolist(), cp.DEFAULT_RULE.trim)
    return float(np.std(np.asarray(points) * rng.choice(row.runs, nights)))


def ceiling_hit(nights: Nights, at: int, sd: float) -> bool:
    """Whether a test that knows the step's night and the night's variance ``sd`` alerts the
    step on one of the nights the rule could (``min_after`` to ``WITHIN`` nights at the new
    level), at the rule's p-value (one-sided: only a drop alerts) and magnitude floor."""
    rule = cp.DEFAULT_RULE
    points = np.asarray(cp.night_means(nights, rule.trim), dtype=float)
    before = points[:at].mean()
    for after in range(rule.min_after, WITHIN + 1):
        drop = (before - points[at : at + after].mean()) / before
        z = drop / (sd * np.sqrt(1 / at + 1 / after))
        if drop >= rule.min_magnitude and stats.norm.sf(z) < rule.max_pvalue / 2:
            return True
    return False


def score(t: Tally, found: list[Alert], at: int | None) -> None:
    """After the step: the first alert within ``WITHIN`` nights detects it; the first alert
    dated within ``max_move`` nights of it is its alert (late when not the detection); a
    later one dated there while no other change point that night is within 3 nights of the
    step took the step's place: a re-fire. Every other alert is a false alarm."""
    t.histories += 1
    if at is None:
        t.false_alarms += len(found)
        return
    t.false_alarms += sum(1 for raised, _d, _o in found if raised < at)
    after = [a for a in found if a[0] >= at]
    alerted = False
    if after and after[0][0] - at < WITHIN:
        t.detected += 1
        t.delays.append(after[0][0] - at)
        alerted, after = True, after[1:]
    for _raised, dated, others in after:
        near = abs(dated - at) <= cp.DEFAULT_RULE.max_move
        if near and not alerted:
            alerted = True
        elif near and not any(abs(o - at) <= 3 for o in others):
            t.refires += 1
        else:
            t.false_alarms += 1


def run_row(
    row: Row, histories: int, seed: int, show: bool, use_aa: bool = True, boots: int = BOOTS
) -> tuple[Tally, Tally]:
    rng = np.random.default_rng(seed)
    flat, stepped = Tally(), Tally()
    sd = night_sd(row, np.random.default_rng(seed + 1000), boots=boots)

    def found_in(h: tuple[Nights, Nights]) -> list[Alert]:
        return alerts(h[0], h[1] if use_aa else None)

    for _ in range(histories):
        found = found_in(history(rng, row, 0.0, NIGHTS, boots))
        score(flat, found, None)
        if show and found:
            shown = [(r, d) for r, d, _o in found]
            print(f"  {row.name}: step-free, alerts (raised, dated) {shown}")
    for _ in range(histories):
        at = int(rng.integers(5, NIGHTS - 5))
        h = history(rng, row, STEP, at, boots)
        found = found_in(h)
        score(stepped, found, at)
        stepped.ceiling += sd is not None and ceiling_hit(h[0], at, sd)
        if show and (len(found) > 1 or any(r < at for r, _d, _o in found)):
            shown = [(r, d) for r, d, _o in found]
            print(f"  {row.name}: step at night {at}, alerts (raised, dated) {shown}")
    return flat, stepped


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=100, help="per row, each kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--boots", type=Path, default=DEMO_BOOTS, help="stored runs of boots")
    ap.add_argument("--drift", type=float, default=0.015, help="AR drift's stationary CoV")
    ap.add_argument(
        "--head-boots", type=int, default=BOOTS, help="boots of the head a night (its point)"
    )
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    ap.add_argument("--show", action="store_true", help="print histories with false alarms")
    ap.add_argument(
        "--no-aa", action="store_true", help="judge without the A/A nights (their residuals)"
    )
    a = ap.parse_args()
    if a.histories < 1:
        raise SystemExit("changepoint_bench: --histories must be at least 1")
    if a.head_boots < 2:
        raise SystemExit("changepoint_bench: --head-boots must be at least 2")
    every = rows(demo_noise(a.boots), a.drift)
    wanted = [w.strip() for w in a.rows.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in {r.name for r in every}]
    if unknown:
        names = ", ".join(r.name for r in every)
        raise SystemExit(f"changepoint_bench: no row {', '.join(unknown)} (rows: {names})")
    started = time.monotonic()
    print(
        f"{a.histories} step-free and {a.histories} stepped ({100 * STEP:.0f}%) histories per "
        f"row, {NIGHTS} nights, {a.head_boots} boots a night, seed {a.seed}; AR drift: rho 0.9, "
        f"CoV {100 * a.drift:.1f}%; "
        + (
            "no A/A nights"
            if a.no_aa
            else f"the nights' covariance from {AA_BOOTS}-boot A/A nights"
        )
    )
    print(
        f"{'row':<9} | {'false/100':>9} {'':6} | {'detected':>8} {'':6} {'med':>3} {'max':>3} | "
        f"{'ceiling':>7} | {'re-fires':>8} {'':6} | {'false/100 st':>12}"
    )
    ok = True
    for row in every:
        if wanted and row.name not in wanted:
            continue
        flat, st = run_row(row, a.histories, a.seed, a.show, not a.no_aa, a.head_boots)
        fa = 100 * flat.false_alarms / flat.histories
        det = st.detected / st.histories
        checks = [fa <= FLOOR_FALSE, det >= FLOOR_DETECTED, st.refires == 0]
        det_mark = verdict(checks[1]) if row.name == DETECTION_ROW else "-"
        if row.name != DETECTION_ROW:
            checks[1] = True
        ok = ok and all(checks)
        med = f"{np.median(st.delays):3.0f}" if st.delays else "  -"
        mx = f"{max(st.delays):3d}" if st.delays else "  -"
        top = "-" if row.drift else f"{100 * st.ceiling / st.histories:.1f}%"
        print(
            f"{row.name:<9} | {fa:9.1f} {verdict(checks[0]):6} | {100 * det:7.1f}% "
            f"{det_mark:6} {med} {mx} | {top:>7} | {st.refires:8d} {verdict(checks[2]):6} | "
            f"{100 * st.false_alarms / st.histories:12.1f}"
        )
    print(
        f"floors: false alarms <= {FLOOR_FALSE:g} per 100 step-free histories (every row), "
        f"a {100 * STEP:.0f}% step detected within {WITHIN} nights in >= "
        f"{100 * FLOOR_DETECTED:.0f}% ({DETECTION_ROW}), 0 re-fires (every row)"
    )
    print(f"{time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
