#!/usr/bin/env python3
"""How often each change rule cries wolf, and how often it sees a real change.

Simulates per-run benchmark results under realistic noise (normal and log-normal, CoV 1-10%,
with or without occasional bad runs) and prints, per rule:

* FPR: share of A/A comparisons (no real change) called changed,
* P2/P5/P10: share of comparisons with a real 2%, 5%, 10% throughput regression called changed,

for stackbench's sequential rule (starting at n runs per side and adding the runs it asks for,
up to its cap; mean and maximum runs per side used are printed), stackbench's rule judged once
at n runs without extra runs, LKP's range rule, mmtests' Welch t-test at p < 0.10 and mmtests'
interval-overlap rule. Then the floors the default policy must meet, and the latency (rank
test) path under skewed noise.

    .venv/bin/python bench/verdict_sim.py [--trials 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from stackbench.resultsdb import verdict
from stackbench.resultsdb.tables.lkp_rule import is_changed as lkp_is_changed
from stackbench.resultsdb.tables.mmtests_stats import overlap_significant, ttest_significant

COVS = (0.01, 0.02, 0.05, 0.10)
STARTS = (3, 5, 10)
SHIFTS = (0.0, 0.02, 0.05, 0.10)
OUTLIER_RATE = 0.05  # share of runs that hit a bad boot
OUTLIER_DROP = (0.10, 0.30)  # such a run loses 10-30% of its throughput
STAT = "vm-scalability.throughput"


@dataclass(frozen=True)
class Noise:
    name: str
    lognormal: bool
    outliers: bool

    def draw(self, rng: np.random.Generator, trials: int, runs: int, cov: float) -> np.ndarray:
        if self.lognormal:
            sigma = np.sqrt(np.log1p(cov**2))  # exact CoV, mean 1
            x = np.exp(rng.normal(-(sigma**2) / 2, sigma, (trials, runs)))
        else:
            x = 1.0 + cov * rng.normal(size=(trials, runs))
        if self.outliers:
            hit = rng.random((trials, runs)) < OUTLIER_RATE
            x = np.where(hit, x * (1 - rng.uniform(*OUTLIER_DROP, (trials, runs))), x)
        return x * 100000.0


NOISES = (
    Noise("normal", False, False),
    Noise("log-normal", True, False),
    Noise("normal + 5% bad runs", False, True),
    Noise("log-normal + 5% bad runs", True, True),
)


def sequential(
    base: np.ndarray, new: np.ndarray, start: int, kind: str, policy: verdict.Policy
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signed calls (-1/+1 changed, 0 not), runs per side used and final outcome codes when
    the pipeline follows ``runs_wanted``."""
    trials = base.shape[0]
    outcome = np.full(trials, verdict.UNDECIDED)
    sign = np.zeros(trials)
    used = np.full(trials, start)
    active = np.ones(trials, dtype=bool)
    n = start
    while True:
        res = verdict.decide_batch(base[active, :n], new[active, :n], kind=kind, policy=policy)
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


def once(base: np.ndarray, new: np.ndarray, rule: Callable[[list, list], bool]) -> np.ndarray:
    """An upstream rule judged once on each trial's runs (base, new)."""
    return np.array(
        [rule(b.tolist(), n.tolist()) for b, n in zip(base, new, strict=True)], dtype=bool
    )


UPSTREAM: dict[str, Callable[[list, list], bool]] = {
    # LKP's order: the kernel under test first, then the base
    "LKP": lambda base, new: bool(lkp_is_changed(new, base, STAT)),
    "mm-t": lambda a, b: bool(ttest_significant(a, b)),
    "mm-ovl": lambda a, b: bool(overlap_significant(a, b)),
}
RULES = ("stackbench", "sb-fixed", *UPSTREAM)


def cell(
    noise: Noise, cov: float, start: int, shift: float, trials: int, seed: int, policy
) -> dict[str, float]:
    rng = np.random.default_rng(
        [seed, NOISES.index(noise), int(cov * 1000), start, int(shift * 1000)]
    )
    cap = policy.max_runs
    base = noise.draw(rng, trials, cap, cov)
    new = noise.draw(rng, trials, cap, cov) * (1 - shift)
    out: dict[str, float] = {}
    sign, used, outcome = sequential(base, new, start, "throughput", policy.starting_at(start))
    out["unchanged"] = (outcome == verdict.UNCHANGED).mean()
    hit = sign < 0 if shift else sign != 0
    out["stackbench"] = hit.mean()
    out["runs_mean"] = used.mean()
    out["runs_max"] = used.max()
    # judged once: a single look may spend the whole error budget
    once_policy = replace(policy, looks=(start,))
    fixed = verdict.decide_batch(
        base[:, :start], new[:, :start], kind="throughput", policy=once_policy
    )
    fixed_hit = fixed.outcome == verdict.CHANGED
    out["sb-fixed"] = (fixed_hit & (fixed.sign < 0) if shift else fixed_hit).mean()
    for name, rule in UPSTREAM.items():
        out[name] = once(base[:, :start], new[:, :start], rule).mean()
    return out


def pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def print_tables(results: dict, trials: int) -> None:
    head1 = f"{'CoV':>4} {'n':>3} |"
    head2 = f"{'':>4} {'':>3} |"
    for r in RULES:
        head1 += f" {r:^23} |"
        head2 += "   FPR    P2    P5   P10 |"
    head1 += " sb runs/side: mean"
    head2 += "    A/A    5%  max"
    for noise in NOISES:
        print(f"\n== {noise.name} noise; {trials} trials per cell; % of comparisons called changed")
        print(head1)
        print(head2)
        for cov in COVS:
            for start in STARTS:
                line = f"{100 * cov:3.0f}% {start:3d} |"
                for r in RULES:
                    line += (
                        " " + " ".join(pct(results[noise, cov, start, s][r]) for s in SHIFTS) + " |"
                    )
                aa = results[noise, cov, start, 0.0]["runs_mean"]
                p5 = results[noise, cov, start, 0.05]["runs_mean"]
                rmax = max(results[noise, cov, start, s]["runs_max"] for s in SHIFTS)
                line += f"  {aa:5.1f} {p5:5.1f} {rmax:4.0f}"
                print(line)


def floors(results: dict, policy: verdict.Policy) -> bool:
    normal = NOISES[0]
    ref = results[normal, 0.02, 5, 0.0], results[normal, 0.02, 5, 0.05]
    worst = max(
        ((v["stackbench"], k) for k, v in results.items() if k[3] == 0.0), key=lambda x: x[0]
    )
    fpr, power = ref[0]["stackbench"], ref[1]["stackbench"]
    runs_mean = (ref[0]["runs_mean"], ref[1]["runs_mean"])
    runs_max = max(ref[0]["runs_max"], ref[1]["runs_max"])
    print(
        "\n== floors (default policy, normal noise, 2% CoV, start 5 runs/side, cap "
        f"{policy.max_runs})"
    )
    ok_fpr = fpr <= 0.01
    ok_pow = power >= 0.90
    ok_worst = worst[0] <= 0.01
    print(f"A/A false positives      {pct(fpr)}%  (floor <= 1%)   {'ok' if ok_fpr else 'FAIL'}")
    print(f"power, 5% regression     {pct(power)}%  (floor >= 90%)  {'ok' if ok_pow else 'FAIL'}")
    print(
        f"runs per side used       mean {runs_mean[0]:.1f} (A/A), {runs_mean[1]:.1f} (5%), "
        f"max {runs_max:.0f}"
    )
    print(
        f"A/A final outcomes       {pct(ref[0]['unchanged'])}% unchanged, "
        f"{pct(1 - ref[0]['unchanged'] - fpr)}% still undecided at the cap (never reported as "
        "a change)"
    )
    wn, wc, ws, _ = worst[1]
    print(
        f"worst A/A false positives over every noise model, CoV and start: {pct(worst[0])}% "
        f"({wn.name}, CoV {100 * wc:.0f}%, start {ws}) {'ok' if ok_worst else 'FAIL'}"
    )
    for r in RULES[1:]:
        print(f"  {r:<10} FPR {pct(ref[0][r])}%  power 5% {pct(ref[1][r])}%  (fixed 5 runs/side)")
    return ok_fpr and ok_pow and ok_worst


def latency_table(trials: int, seed: int, policy: verdict.Policy) -> None:
    """Latencies go through the rank test: skewed noise, 5 runs to start, 5% min effect."""
    print(
        f"\n== latency metrics (Mann-Whitney + Hodges-Lehmann path), start 5 runs/side, "
        f"{trials} trials; shifts are latency increases"
    )
    print(f"{'noise':<26} {'CoV':>4} |   FPR    P5   P10   P20 | runs mean  max")
    for noise in (NOISES[1], NOISES[3]):
        for cov in (0.02, 0.05, 0.10):
            line = f"{noise.name:<26} {100 * cov:3.0f}% |"
            used_all = []
            for shift in (0.0, 0.05, 0.10, 0.20):
                rng = np.random.default_rng([seed, 99, int(cov * 1000), int(shift * 1000)])
                base = noise.draw(rng, trials, policy.max_runs, cov) / 1000
                new = noise.draw(rng, trials, policy.max_runs, cov) / 1000 * (1 + shift)
                sign, used, _ = sequential(base, new, 5, "latency", policy)
                hit = sign > 0 if shift else sign != 0
                line += " " + pct(hit.mean())
                used_all.append(used)
            used = np.concatenate(used_all)
            line += f" | {used.mean():9.1f} {used.max():4d}"
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
        f"policy: alpha {policy.alpha} over looks {policy.looks}, equivalence alpha "
        f"{policy.equivalence_alpha}, min effect throughput "
        f"{100 * policy.effect_floor('throughput'):.0f}%, cap {policy.max_runs} runs/side"
    )
    print(
        "rules: stackbench = sequential rule from n runs/side; sb-fixed = the same judged "
        "once at n; LKP = range rule; mm-t = t-test p<0.10; mm-ovl = 95% interval overlap"
    )
    results = {}
    for noise in NOISES:
        for cov in COVS:
            for start in STARTS:
                for shift in SHIFTS:
                    results[noise, cov, start, shift] = cell(
                        noise, cov, start, shift, args.trials, args.seed, policy
                    )
    print_tables(results, args.trials)
    ok = floors(results, policy)
    latency_table(args.trials, args.seed, policy)
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
