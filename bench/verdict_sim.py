#!/usr/bin/env python3
"""How often the verdict cries wolf, how often it sees a real change, and what it costs, with
noise that has the structure of real runs: boots as units.

Every simulated run is ``level * boot offset * (1 + run noise)``: each boot of a kernel draws
one offset (normal or log-normal, CoV = the cell's boot CoV; with "bad boots", 5% of boots
lose 10-30% more) shared by all of its runs, and each run adds its own noise (CoV 1%). With
"warm-up" the first run of every boot is 5% slower. A kernel is measured in boots of R runs
(R = 1: one run per boot; R = 5: the issue's "5 runs per boot"); the verdict sees the runs with
their boot keys, exactly as :func:`stackbench.resultsdb.verdict.judge` does (warm-up rule,
then one mean per boot, then the rule). Per cell it prints:

* FPR: share of A/A comparisons (no real change) called changed,
* P2/P5/P10: share of comparisons with a real 2%, 5%, 10% regression called worse,
* mean boots and runs per side the sequential rule used (A/A and 5% shift),
* naive: the same rule fed every run as an independent sample (what stackbench did before
  boots were units), on the same boots; with every run of a kernel in ONE boot, as the
  pipeline measured, it is worse still (issue 11 measured 40%).

Then the floors the default policy must meet, and the latency (rank test) path.

    .venv/bin/python bench/verdict_sim.py [--trials 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from stackbench.resultsdb import verdict
from stackbench.resultsdb.boots import warmup_batch

RUN_COV = 0.01  # run-to-run noise inside one boot
BOOT_COVS = (0.01, 0.02, 0.05, 0.10)
PER_BOOT = (1, 5)
STARTS = (3, 5)
SHIFTS = (0.0, 0.02, 0.05, 0.10)
BAD_BOOT_RATE = 0.05
BAD_BOOT_DROP = (0.10, 0.30)
WARMUP = 0.05  # the first run of a boot is this much slower (the "warm-up" noise)


@dataclass(frozen=True)
class Noise:
    name: str
    lognormal: bool = False
    bad_boots: bool = False
    warmup: bool = False

    def draw(
        self, rng: np.random.Generator, trials: int, boots: int, per_boot: int, boot_cov: float
    ) -> np.ndarray:
        """(trials, boots, per_boot) runs around 100000."""
        shape = (trials, boots, 1)
        if self.lognormal:
            sigma = np.sqrt(np.log1p(boot_cov**2))  # exact CoV, mean 1
            offset = np.exp(rng.normal(-(sigma**2) / 2, sigma, shape))
        else:
            offset = 1.0 + boot_cov * rng.normal(size=shape)
        if self.bad_boots:
            hit = rng.random(shape) < BAD_BOOT_RATE
            offset = np.where(hit, offset * (1 - rng.uniform(*BAD_BOOT_DROP, shape)), offset)
        x = offset * (1.0 + RUN_COV * rng.normal(size=(trials, boots, per_boot)))
        if self.warmup:
            x[:, :, 0] *= 1 - WARMUP
        return x * 100000.0


NOISES = (
    Noise("normal"),
    Noise("log-normal", lognormal=True),
    Noise("normal + 5% bad boots", bad_boots=True),
    Noise("normal + warm-up run", warmup=True),
)


def boot_units(base: np.ndarray, new: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` boots of each side as the verdict sees them: the warm-up rule over
    both sides' boots, then one mean per boot."""
    x = np.concatenate([base[:, :n], new[:, :n]], axis=1)
    means = x.mean(axis=2)
    if x.shape[2] >= 2:
        drop = warmup_batch(x[:, :, 0] - x[:, :, 1:].mean(axis=2))
        means = np.where(drop[:, None], x[:, :, 1:].mean(axis=2), means)
    return means[:, :n], means[:, n:]


def sequential(
    base: np.ndarray,
    new: np.ndarray,
    start: int,
    kind: str,
    policy: verdict.Policy,
    naive: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signed calls (-1/+1 changed, 0 not), boots per side used and final outcome codes when
    the pipeline follows ``runs_wanted`` (boots per side). ``naive``: every run judged as an
    independent sample, looks counted in runs as the rule did before boots were units."""
    trials, _, per_boot = base.shape
    outcome = np.full(trials, verdict.UNDECIDED)
    sign = np.zeros(trials)
    used = np.full(trials, start)
    active = np.ones(trials, dtype=bool)
    n = start
    while True:
        if naive:
            b = base[active].reshape(int(active.sum()), -1)[:, : n * per_boot]
            w = new[active].reshape(int(active.sum()), -1)[:, : n * per_boot]
        else:
            b, w = boot_units(base[active], new[active], n)
        res = verdict.decide_batch(b, w, kind=kind, policy=policy)
        outcome[active] = res.outcome
        sign[active] = res.sign
        n_next = policy.next_look(n)
        active &= outcome == verdict.UNDECIDED
        if n_next == 0 or not active.any():
            break
        n = n_next
        used[active] = n
    # a call in the wrong direction is not a detection (and under A/A it is a false call)
    return np.where(outcome == verdict.CHANGED, sign, 0.0), used, outcome


def cell(
    noise: Noise,
    boot_cov: float,
    per_boot: int,
    start: int,
    shift: float,
    trials: int,
    seed: int,
    policy: verdict.Policy,
) -> dict[str, float]:
    rng = np.random.default_rng(
        [seed, NOISES.index(noise), int(boot_cov * 1000), per_boot, start, int(shift * 1000)]
    )
    cap = policy.max_runs
    base = noise.draw(rng, trials, cap, per_boot, boot_cov)
    new = noise.draw(rng, trials, cap, per_boot, boot_cov) * (1 - shift)
    pol = policy.starting_at(start)
    sign, used, outcome = sequential(base, new, start, "throughput", pol)
    out: dict[str, float] = {
        "unchanged": (outcome == verdict.UNCHANGED).mean(),
        "called": (sign < 0 if shift else sign != 0).mean(),
        "boots_mean": used.mean(),
        "runs_mean": used.mean() * per_boot,
        "boots_max": used.max(),
    }
    if per_boot > 1 and shift == 0.0:
        # the old rule, runs as independent samples, same number of runs to start with
        naive_sign, _, _ = sequential(base, new, start, "throughput", pol, naive=True)
        out["naive"] = (naive_sign != 0).mean()
    return out


def pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def print_tables(results: dict, trials: int) -> None:
    for noise in NOISES:
        print(
            f"\n== {noise.name}: boot offset CoV as given + {100 * RUN_COV:.0f}% run noise; "
            f"{trials} trials per cell; % of comparisons called changed"
        )
        print(
            f"{'boot CoV':>8} {'runs/boot':>9} {'start':>5} |   FPR    P2    P5   P10 | "
            "boots/side A/A   5%  max | runs/side A/A   5% | naive FPR"
        )
        for cov in BOOT_COVS:
            for per_boot in PER_BOOT:
                for start in STARTS:
                    r = {s: results[noise, cov, per_boot, start, s] for s in SHIFTS}
                    line = f"{100 * cov:7.0f}% {per_boot:9d} {start:5d} |"
                    line += " " + " ".join(pct(r[s]["called"]) for s in SHIFTS) + " |"
                    bmax = max(r[s]["boots_max"] for s in SHIFTS)
                    line += (
                        f" {r[0.0]['boots_mean']:14.1f} {r[0.05]['boots_mean']:4.1f} {bmax:4.0f} |"
                    )
                    line += f" {r[0.0]['runs_mean']:13.1f} {r[0.05]['runs_mean']:4.1f} |"
                    naive = r[0.0].get("naive")
                    line += f" {pct(naive)}" if naive is not None else "         -"
                    print(line)


def floors(results: dict, policy: verdict.Policy) -> bool:
    normal = NOISES[0]
    ok = True
    print(
        f"\n== floors (default policy: looks {policy.looks} boots per side, cap "
        f"{policy.max_runs}; throughput: min effect {100 * policy.effect_floor('throughput'):.0f}%"
        f", equivalence margin {100 * policy.equivalence_margin('throughput'):.0f}%)"
    )
    boot = results[normal, 0.02, 5, 5, 0.0]
    line = (
        f"boot noise (offset CoV 2% + run 1%, 5 runs per boot, start 5 boots): A/A false "
        f"positives {pct(boot['called'])}% (floor <= 1%); naive runs-as-samples "
        f"{pct(boot['naive'])}%"
    )
    ok_boot = boot["called"] <= 0.01
    print(line + ("  ok" if ok_boot else "  FAIL"))
    worst = max(((v["called"], k) for k, v in results.items() if k[4] == 0.0), key=lambda x: x[0])
    wn, wc, wr, ws, _ = worst[1]
    ok_worst = worst[0] <= 0.01
    print(
        f"worst A/A false positives over every noise model, CoV, runs per boot and start: "
        f"{pct(worst[0])}% ({wn.name}, boot CoV {100 * wc:.0f}%, {wr} runs/boot, start {ws})"
        f"  {'ok' if ok_worst else 'FAIL'}"
    )
    ok = ok_boot and ok_worst
    for cov in (0.02, 0.05):
        for per_boot in PER_BOOT:
            aa, p5 = results[normal, cov, per_boot, 5, 0.0], results[normal, cov, per_boot, 5, 0.05]
            head = f"cost, normal, boot CoV {100 * cov:.0f}% + run 1%, {per_boot} run(s)/boot, start 5:"
            print(
                f"{head} A/A {aa['runs_mean']:.1f} runs ({aa['boots_mean']:.1f} boots) per side, "
                f"FPR {pct(aa['called']).strip()}%, {pct(aa['unchanged']).strip()}% judged ~, "
                f"{pct(1 - aa['unchanged'] - aa['called']).strip()}% undecided at the cap; "
                f"power at 5% {pct(p5['called']).strip()}% with {p5['runs_mean']:.1f} runs"
            )
    cost = results[normal, 0.02, 1, 5, 0.0], results[normal, 0.02, 1, 5, 0.05]
    ok_cost = cost[0]["runs_mean"] <= 11 and cost[0]["called"] <= 0.01
    ok_cost = ok_cost and cost[1]["called"] >= 0.90
    print(
        "cost floor (boot CoV 2%, one run per boot): A/A mean runs per side <= 11, FPR <= 1%, "
        f"power at 5% >= 90%  {'ok' if ok_cost else 'FAIL'}"
    )
    return ok and ok_cost


def latency_table(trials: int, seed: int, policy: verdict.Policy) -> None:
    """Latencies go through the rank test on boot means: skewed boot offsets."""
    print(
        f"\n== latency metrics (Mann-Whitney + Hodges-Lehmann on boot means), log-normal boot "
        f"offsets + 1% run noise, 5 runs/boot, start 5 boots, {trials} trials; shifts are "
        "latency increases"
    )
    print(f"{'noise':<26} {'CoV':>4} |   FPR    P5   P10   P20 | boots mean  max")
    for noise in (NOISES[1], Noise("log-normal + bad boots", lognormal=True, bad_boots=True)):
        for cov in (0.02, 0.05, 0.10):
            line = f"{noise.name:<26} {100 * cov:3.0f}% |"
            used_all = []
            for shift in (0.0, 0.05, 0.10, 0.20):
                rng = np.random.default_rng([seed, 99, int(cov * 1000), int(shift * 1000)])
                base = noise.draw(rng, trials, policy.max_runs, 5, cov) / 1000
                new = noise.draw(rng, trials, policy.max_runs, 5, cov) / 1000
                # a bad boot makes a latency higher, not lower
                base, new = 1e4 / base, 1e4 / new * (1 + shift)
                sign, used, _ = sequential(base, new, 5, "latency", policy)
                hit = sign > 0 if shift else sign != 0
                line += " " + pct(hit.mean())
                used_all.append(used)
            used = np.concatenate(used_all)
            line += f" | {used.mean():10.1f} {used.max():4d}"
            print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    policy = verdict.DEFAULT
    t0 = time.monotonic()
    print(f"stackbench verdict simulation: {args.trials} trials per cell, seed {args.seed}")
    print(
        f"policy: alpha {policy.alpha} over looks {policy.looks} (boots per side), equivalence "
        f"alpha {policy.equivalence_alpha}, throughput min effect "
        f"{100 * policy.effect_floor('throughput'):.0f}% and margin "
        f"{100 * policy.equivalence_margin('throughput'):.0f}%, cap {policy.max_runs} boots/side"
    )
    results = {}
    for noise in NOISES:
        for cov in BOOT_COVS:
            for per_boot in PER_BOOT:
                for start in STARTS:
                    for shift in SHIFTS:
                        results[noise, cov, per_boot, start, shift] = cell(
                            noise, cov, per_boot, start, shift, args.trials, args.seed, policy
                        )
    print_tables(results, args.trials)
    ok = floors(results, policy)
    latency_table(args.trials, args.seed, policy)
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
