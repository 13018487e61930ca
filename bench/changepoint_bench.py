#!/usr/bin/env python3
"""The nightly change-point rule against today's head-versus-last-good rule, on histories
whose noise is resampled from stored boots of real runs.

A history is 60 nights of one tracked branch; every night boots the head 5 times (the
nightly's start). A night is a run: its boots' values are ``level * n * r``, with the run
offset ``n`` drawn (with replacement) from the stored runs' means divided by their kernel's
mean, and each boot offset ``r`` from the stored boots' values divided by their run's mean, so
the spread within a night, the spread from night to night and their tails are the real ones,
not a normal curve. The default source is bench/data/demo_boots.json: the demo's base kernel
and its comment-only kernel (an A/A), two runs of 15 boots each, vm-scalability throughput
(the file says where they come from); ``--boots FILE`` takes another file of that shape, or a
JSON list of lists of boot means (one list per run, each its own kernel: no run spread).
``--scale`` multiplies both spreads (2: a noisier lab with the same shape).

Per history with a step, the level drops by 3%, 5% or 10% from a random night on (at least
5 nights before the end). The two rules, night by night:

* change point (:func:`stackbench.resultsdb.changepoints.new_shift`): an alert when a worse
  shift appears that is not within ``same_shift`` nights of one already alerted;
* head vs last good (:func:`stackbench.resultsdb.verdict.judge`, with extra boots of both
  kernels while a headline metric is undecided, up to the cap, as jobs/tracking/nightly.py does):
  an alert when the head is worse and no alert is open against this baseline; the baseline
  moves to the head on a night that is not worse (so a false "worse" on a noisy baseline
  stays until then).

It prints, per rule: detection rate (an alert within ``--within`` nights of the step, the
step's night counting as the first), the median and worst nights from the step to the alert
(0: the step's own night), false alarms per 100 histories (in step-free histories every
alert; with a step, alerts before it and later alerts that date a change more than
``max_move`` nights away from it or beside a change point still at it), and re-fires (later
alerts that date the same step again, in its place: what a rule does when a shift that stays
keeps alerting). Then the floors: a 5% step detected
in >= 95% of histories within 5 nights, <= 2 false alarms per 100 step-free histories, 0
re-fires (exit status 1 when one is missed). ``--show`` prints the alerts of every history
with a false alarm or a re-fire.

    .venv/bin/python bench/changepoint_bench.py [--histories 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stackbench.resultsdb import changepoints as cp
from stackbench.resultsdb import verdict

NIGHTS = 60
BOOTS = 5  # boots of the head per night (the nightly's start)
STEPS = (0.03, 0.05, 0.10)
LEVEL = 100000.0
DEMO_BOOTS = Path(__file__).resolve().parent / "data" / "demo_boots.json"


@dataclass(frozen=True)
class Noise:
    boots: np.ndarray  # a boot's value / its run's mean
    runs: np.ndarray  # a run's mean / its kernel's mean (all 1.0: no run spread known)


def real_noise(path: Path | None, scale: float) -> Noise:
    """The relative boot and run offsets of stored real boots (see the module's docstring)."""
    src = path or DEMO_BOOTS
    try:
        doc = json.loads(src.read_text())
        if isinstance(doc, dict):
            runs = [(str(r["kernel"]), r["boots"]) for r in doc["runs"]]
        else:
            runs = [(str(i), boots) for i, boots in enumerate(doc)]
        by_kernel: dict[str, list[float]] = {}
        boot_offs = []
        for kernel, boots in runs:
            v = np.asarray(boots, dtype=float)
            if v.size >= 2:
                boot_offs.extend(v / v.mean())
                by_kernel.setdefault(kernel, []).append(float(v.mean()))
    except OSError as exc:
        raise SystemExit(f"changepoint_bench: {src}: {exc.strerror}") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise SystemExit(f"changepoint_bench: {src}: not runs of boot values: {exc}") from None
    if len(boot_offs) < 4:
        raise SystemExit("changepoint_bench: need at least 4 real boots to resample from")
    run_offs = [m / np.mean(means) for means in by_kernel.values() for m in means]
    return Noise(
        boots=1.0 + scale * (np.asarray(boot_offs) - 1.0),
        runs=1.0 + scale * (np.asarray(run_offs) - 1.0),
    )


@dataclass
class Tally:
    histories: int = 0
    detected: int = 0
    delays: list[int] = field(default_factory=list)
    false_alarms: int = 0  # in step-free histories; before a step or dated away from it
    refires: int = 0
    boots: int = 0  # boots measured by the rule (head and, for the verdict, the baseline)


def history(
    rng: np.random.Generator, noise: Noise, step: float, at: int
) -> tuple[list[list], np.ndarray]:
    """The nights' boots, and each night's run offset (its later boots share it)."""
    night_offs = rng.choice(noise.runs, NIGHTS)
    nights = [
        list(
            LEVEL * (1 - step if n >= at else 1.0) * night_offs[n] * rng.choice(noise.boots, BOOTS)
        )
        for n in range(NIGHTS)
    ]
    return nights, night_offs


# (the night it is raised, the night it says the change began, the nights of the other
# change points found that night)
Alert = tuple[int, int, tuple[int, ...]]


def changepoint_alerts(nights: list[list[float]]) -> list[Alert]:
    alerted: list[int] = []
    out = []
    for n in range(1, NIGHTS + 1):
        s = cp.new_shift(nights[:n], True, alerted)
        if s is not None:
            alerted.append(s.night)
            others = tuple(o.night for o in cp.shifts(nights[:n], True) if o.night != s.night)
            out.append((n - 1, s.night, others))
    return out


def verdict_alerts(
    rng: np.random.Generator,
    noise: Noise,
    nights: list[list[float]],
    night_offs: np.ndarray,
    step: float,
    at: int,
) -> tuple[list[Alert], int]:
    """Today's rule; the nights it alerted and the extra boots it took."""
    offs = noise.boots
    pol = verdict.DEFAULT.starting_at(BOOTS)
    base = list(nights[0])
    base_level = float(night_offs[0])
    open_alert = False
    out, extra = [], 0
    for n in range(1, NIGHTS):
        head = list(nights[n])
        level = (1 - step if n >= at else 1.0) * night_offs[n]
        while True:
            v = verdict.judge(base, head, higher_is_better=True, kind="throughput", policy=pol)
            want = min(v.runs_wanted or 0, pol.max_runs)
            if v.outcome != "undecided" or want <= len(head):
                break
            # both kernels topped up in the same rounds, as judge_job does
            extra += (want - len(head)) + max(0, want - len(base))
            head += list(LEVEL * level * rng.choice(offs, want - len(head)))
            if len(base) < want:
                base += list(LEVEL * base_level * rng.choice(offs, want - len(base)))
        worse = v.outcome == "changed" and v.direction == "worse"
        if worse:
            if not open_alert:
                out.append((n, n, ()))  # the first look dates a change to its own night
                open_alert = True
        else:
            base, base_level, open_alert = head, level, False
    return out, extra


def score(t: Tally, alerts: list[Alert], at: int | None, within: int) -> None:
    """A re-fire is a later alert for the same step: it dates a change within ``max_move``
    nights of the step while no other change point found that night dates the step (it
    took the step's place). A later alert beside a change point still at the step is a
    false alarm of its own."""
    rule = cp.DEFAULT_RULE
    t.histories += 1
    if at is None:
        t.false_alarms += len(alerts)
        return
    t.false_alarms += sum(1 for raised, _d, _o in alerts if raised < at)
    after = [a for a in alerts if a[0] >= at]
    if after and after[0][0] - at < within:
        t.detected += 1
        t.delays.append(after[0][0] - at)
    for _raised, dated, others in after[1:]:
        step_still_found = any(abs(o - at) <= rule.same_shift for o in others)
        if abs(dated - at) <= rule.max_move and not step_still_found:
            t.refires += 1
        else:
            t.false_alarms += 1


def run(
    histories: int, seed: int, noise: Noise, within: int, show: bool = False
) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    out: dict[str, dict] = {}
    for step in (0.0, *STEPS):
        tallies = {"change point": Tally(), "head vs last good": Tally()}
        for _ in range(histories):
            at = int(rng.integers(5, NIGHTS - 5)) if step else None
            nights, night_offs = history(rng, noise, step, at if at is not None else NIGHTS)
            cps = changepoint_alerts(nights)
            score(tallies["change point"], cps, at, within)
            if show and (len([a for a, _d, _o in cps if at is None or a < at]) or len(cps) > 1):
                shown = [(a, d) for a, d, _o in cps]
                print(f"  step {100 * step:.0f}% at night {at}: alerts (raised, dated) {shown}")
            alerts, extra = verdict_alerts(rng, noise, nights, night_offs, step, at or NIGHTS)
            score(tallies["head vs last good"], alerts, at, within)
            tallies["head vs last good"].boots += extra
        out[f"{100 * step:.0f}%"] = tallies
    return out


def report(results: dict[str, dict], histories: int, within: int) -> bool:
    print(
        f"\n{histories} histories per row, {NIGHTS} nights, {BOOTS} boots of the head a night;"
        f" detected = alert within {within} nights of the step"
    )
    print(
        f"{'step':>5} {'rule':<18} | {'detected':>8} {'nights med':>10} {'max':>4} | "
        f"{'false/100':>9} {'re-fires':>8} | {'extra boots/hist':>16}"
    )
    for step, tallies in results.items():
        for name, t in tallies.items():
            det = f"{100 * t.detected / t.histories:7.1f}%" if step != "0%" else "       -"
            med = f"{np.median(t.delays):10.1f}" if t.delays else "         -"
            mx = f"{max(t.delays):4d}" if t.delays else "   -"
            print(
                f"{step:>5} {name:<18} | {det} {med} {mx} | "
                f"{100 * t.false_alarms / t.histories:9.1f} {t.refires:8d} | "
                f"{t.boots / t.histories:16.1f}"
            )
    c5 = results["5%"]["change point"]
    c0 = results["0%"]["change point"]
    refires = sum(results[k]["change point"].refires for k in results)
    checks = [
        ("5% step detected within 5 nights >= 95%", c5.detected / c5.histories >= 0.95),
        (
            "false alarms per 100 step-free histories <= 2",
            100 * c0.false_alarms / c0.histories <= 2,
        ),
        ("re-fires after a detected step == 0", refires == 0),
    ]
    print("\nfloors (change-point rule):")
    for text, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {text}")
    return all(ok for _t, ok in checks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--within", type=int, default=5, help="nights from the step, its own first")
    ap.add_argument("--boots", type=Path, help=f"runs of real boot means (default {DEMO_BOOTS})")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the offsets' spread")
    ap.add_argument("--show", action="store_true", help="print histories with false alarms")
    a = ap.parse_args()
    noise = real_noise(a.boots, a.scale)
    for what, offs in (("boot", noise.boots), ("run", noise.runs)):
        print(
            f"real {what} offsets: {offs.size}, CoV {100 * offs.std(ddof=1):.2f}%, "
            f"range {100 * (offs.min() - 1):+.2f}% .. {100 * (offs.max() - 1):+.2f}%"
        )
    started = time.monotonic()
    results = run(a.histories, a.seed, noise, a.within, a.show)
    ok = report(results, a.histories, a.within)
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
