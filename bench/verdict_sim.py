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

Then the floors the default policy must meet, the latency (rank test) path, and the
false-discovery family: a page of several commits with a few headline metrics and hundreds of
counters each, judged with the verdict's family (one commit and job, headline metrics apart)
and with one family for the whole page. Last, a lab of pooled boxes whose offsets the
rounds share, and one shared host with load periods and drift (the ground-truth test's
setting): the live comparison's rule (every kernel of the rounds as blocks,
:func:`stackbench.resultsdb.blocks.live_sides`) beside each kernel paired with the base alone
and the same boots compared unblocked.

    .venv/bin/python bench/verdict_sim.py [--trials 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from stackbench.resultsdb import blocks, verdict
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


# one job's page as the demo shows it: three later kernels, each with a few headline
# metrics and hundreds of side counters (the demo's page held 1,896 rows for 4 kernels)
FAMILY_KERNELS = 3
FAMILY_HEADLINES = 6
FAMILY_COUNTERS = 150
FAMILY_COUNTER_COV = 0.10


def _fdr(q: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg per trial (rows), on p-values times the looks, as the verdict."""
    return stats.false_discovery_control(np.clip(q, 0.0, 1.0), axis=1, method="bh")


def _family_calls(
    rng: np.random.Generator,
    trials: int,
    n: int,
    cov: float,
    shift: np.ndarray,
    kind: str,
    policy: verdict.Policy,
) -> tuple[np.ndarray, np.ndarray]:
    """(trials, metrics) p-values times the looks, and the rule's own calls (a shifted
    metric's call counts only in the right direction), at ``n`` boots per side."""
    shape = (trials, *shift.shape, n)
    base = 1.0 + cov * rng.normal(size=shape)
    new = (1.0 + cov * rng.normal(size=shape)) * (1.0 - shift[None, :, None])
    res = verdict.decide_batch(
        base.reshape(-1, n), new.reshape(-1, n), kind=kind, policy=policy, rank=False
    )
    ok_call = (res.outcome == verdict.CHANGED).reshape(trials, -1)
    worse = ok_call & (res.sign < 0).reshape(trials, -1)
    return np.minimum(1.0, res.p_value * policy.n_looks).reshape(trials, -1), np.where(
        shift[None, :] > 0, worse, ok_call
    )


def family_table(trials: int, seed: int, policy: verdict.Policy) -> bool:
    """Power and false positives of headline metrics under the false-discovery family the
    verdict uses (one later kernel and job, headline metrics apart) and under one family
    for every row of the page, at a fixed look of boots per side (one run per boot, boot
    CoV 2%; counters CoV 10%, unchanged). One headline metric of one kernel is 5% worse."""
    rng = np.random.default_rng(seed + 7)
    h, c, k = FAMILY_HEADLINES, FAMILY_COUNTERS, FAMILY_KERNELS
    print(
        f"\n== false-discovery family: {k} later kernels x ({h} headline metrics + {c} "
        f"counters) = {k * (h + c)} rows; one headline 5% worse, the rest unchanged; boot CoV "
        f"2%, counters {100 * FAMILY_COUNTER_COV:.0f}% =="
    )
    print(
        f"{'boots/side':>10} | {'power: alone':>12} {'family':>7} {'page':>6} | FPR headline family"
    )
    ok = True
    for n in policy.looks:
        shift = np.zeros(k * h)
        shift[0] = 0.05  # the first headline metric of the first kernel
        q_head, call_head = _family_calls(rng, trials, n, 0.02, shift, "throughput", policy)
        q_side, _ = _family_calls(
            rng, trials, n, FAMILY_COUNTER_COV, np.zeros(k * c), "count", policy
        )
        fam = np.concatenate([_fdr(q_head[:, i * h : (i + 1) * h]) for i in range(k)], axis=1)
        page = _fdr(np.concatenate([q_head, q_side], axis=1))[:, : k * h]
        survive = call_head & (fam <= policy.fdr_q)
        power_alone = call_head[:, 0].mean()
        power_family = survive[:, 0].mean()
        power_page = (call_head & (page <= policy.fdr_q))[:, 0].mean()
        fpr = survive[:, 1:].mean()
        print(
            f"{n:>10} | {pct(power_alone):>12} {pct(power_family):>7} {pct(power_page):>6} | "
            f"{pct(fpr)}"
        )
        ok &= fpr <= 0.01 and power_family >= power_alone - 0.02
    print(
        "family floor: A/A false positives <= 1% per headline metric, and the family costs "
        "a headline metric at most 2 points of the power it has alone"
        + ("  ok" if ok else "  FAIL")
    )
    return ok


# a lab of pooled boxes: every round of boots runs whole on one box, whose offset all the
# round's kernels share; the rounds land on whichever box is free
LAB_BOXES = 8
LAB_BOX_COV = 0.03
LAB_BOOT_COV = 0.02
LAB_BOOTS = 10  # per kernel: the verdict must be reached within them
LAB_KERNELS = 4  # a series' base and three commits, every round boots them all
LAB_SHIFT = 0.05


def _lab_boots(rng: np.random.Generator, trials: int, shift: float) -> np.ndarray:
    """(trials, LAB_KERNELS, LAB_BOOTS) boot values, kernel 1 shifted; round i of every
    kernel on the same box, the box drawn per round."""
    box_offset = 1.0 + LAB_BOX_COV * rng.normal(size=(trials, 1, LAB_BOXES))
    box = rng.integers(0, LAB_BOXES, size=(trials, 1, LAB_BOOTS))
    shared = np.take_along_axis(box_offset, box, axis=2)
    shape = (trials, LAB_KERNELS, LAB_BOOTS)
    boot = 1.0 + LAB_BOOT_COV * rng.normal(size=shape)
    x = shared * boot * (1.0 + RUN_COV * rng.normal(size=shape)) * 1e5
    x[:, 1] *= 1 - shift
    return x


# how the kernel is judged against the base on (trials, kernels, rounds) boot values: as
# independent samples, paired with the base alone by round, or by the live comparison's rule
# (blocks.live_sides, which tables/verdict.py uses: every kernel with a boot in each of the
# pair's rounds joins the block design; here every round holds every kernel)
LIVE = "live"
RULES = {
    "unblocked": lambda x: (x[:, 0], x[:, 1]),
    "paired": lambda x: blocks.block_sides(x[:, :2], 1),
    LIVE: lambda x: blocks.live_sides(x, 1),
}


def _calls(x: np.ndarray, shift: float, rule: str, policy: verdict.Policy,
           cap: int) -> tuple[float, float]:  # fmt: skip
    """Share of trials where kernel 1 is called changed against the base (in the shift's
    direction) at any look up to ``cap`` boots, and the mean boots per side used."""
    called = np.zeros(x.shape[0], dtype=bool)
    used = np.full(x.shape[0], cap)
    undecided = np.ones(x.shape[0], dtype=bool)
    for n in (n for n in policy.schedule() if n <= cap):
        b, w = RULES[rule](x[:, :, :n])
        res = verdict.decide_batch(b, w, kind="throughput", policy=policy)
        hit = (res.outcome == verdict.CHANGED) & ((res.sign < 0) if shift else True)
        called |= undecided & hit
        decided = undecided & (res.outcome != verdict.UNDECIDED)
        used = np.where(decided, n, used)
        undecided &= ~decided
    return float(called.mean()), float(used.mean())


def lab_table(trials: int, seed: int, policy: verdict.Policy) -> bool:
    """A/A false positives and power at a 5% shift in a lab of pooled boxes, a series of
    LAB_KERNELS kernels: the live comparison's rule (the design of every kernel of the
    rounds, :func:`blocks.live_sides`) beside the kernel paired with the base alone and the
    same boots compared unblocked; the rule's looks up to LAB_BOOTS boots per side, one run per boot."""
    looks = [n for n in policy.schedule() if n <= LAB_BOOTS]
    print(
        f"\n== a lab: {LAB_BOXES} pooled boxes, box offsets CoV {100 * LAB_BOX_COV:.0f}%, boot "
        f"CoV {100 * LAB_BOOT_COV:.0f}%, run CoV {100 * RUN_COV:.0f}%, {LAB_KERNELS} kernels, a "
        "round on one box; "
        f"looks at {looks} boots per side; {trials} trials =="
    )
    print(f"{'':<11} | {'A/A FPR':>7} {'P5':>5} | boots/side A/A   5%")
    rng = np.random.default_rng([seed, 8, LAB_BOXES])
    aa, shifted = _lab_boots(rng, trials, 0.0), _lab_boots(rng, trials, LAB_SHIFT)
    ok = True
    for rule in RULES:
        fpr, used_aa = _calls(aa, 0.0, rule, policy, LAB_BOOTS)
        power, used_5 = _calls(shifted, LAB_SHIFT, rule, policy, LAB_BOOTS)
        print(f"{rule:<11} | {pct(fpr):>7} {pct(power):>5} | {used_aa:14.1f} {used_5:4.1f}")
        if rule == LIVE:
            ok = fpr <= 0.01 and power >= 0.90
    print(
        f"lab floor (live: blocks of every kernel of the rounds): A/A false positives <= 1% and power >= 90% at a "
        f"{100 * LAB_SHIFT:.0f}% shift within {LAB_BOOTS} boots per kernel"
        + ("  ok" if ok else "  FAIL")
    )
    return ok


# one shared host (the CI's): the demo's base and three commits booted one after another,
# each round in a shuffled order; host-load periods of HOST_LOAD_SLOTS consecutive boots
# (another job's build) slow every boot they cover, across kernels and rounds alike, and
# the host drifts slowly (an AR(1) over the boots in time order)
HOST_KERNELS = 4
HOST_BOOTS = 15  # the ground-truth test's cap
HOST_START = 5
HOST_BOOT_COV = 0.01
HOST_LOAD_RATE = 0.03  # a load period starts at a boot with this probability
HOST_LOAD_SLOTS = (1, 6)  # boots a load period lasts, uniform
HOST_LOAD_DROP = (0.03, 0.08)
HOST_DRIFT = (0.9, 0.01)  # AR(1) coefficient and stationary sd of the host's speed


def _host_boots(rng: np.random.Generator, trials: int, shift: float) -> np.ndarray:
    """(trials, HOST_KERNELS, HOST_BOOTS) boot values on one host, kernel 1 shifted."""
    slots = HOST_KERNELS * HOST_BOOTS
    speed = np.ones((trials, slots))
    starts = rng.random((trials, slots)) < HOST_LOAD_RATE
    length = rng.integers(HOST_LOAD_SLOTS[0], HOST_LOAD_SLOTS[1] + 1, size=(trials, slots))
    depth = rng.uniform(*HOST_LOAD_DROP, size=(trials, slots))
    for t0 in range(slots):
        hit = starts[:, t0]
        for dt in range(HOST_LOAD_SLOTS[1]):
            if t0 + dt < slots:
                on = hit & (dt < length[:, t0])
                speed[on, t0 + dt] *= 1 - depth[on, t0]
    rho, sd = HOST_DRIFT
    drift = np.zeros((trials, slots))
    drift[:, 0] = sd * rng.normal(size=trials)
    for t in range(1, slots):
        drift[:, t] = rho * drift[:, t - 1] + sd * np.sqrt(1 - rho**2) * rng.normal(size=trials)
    speed *= 1 + drift
    # kernel k of round r booted at slot r * K + its place in the round's shuffled order
    order = np.argsort(rng.random((trials, HOST_BOOTS, HOST_KERNELS)), axis=2)
    slot = np.arange(HOST_BOOTS)[None, :, None] * HOST_KERNELS + order
    host = np.take_along_axis(speed, slot.reshape(trials, -1), axis=1)
    host = host.reshape(trials, HOST_BOOTS, HOST_KERNELS).transpose(0, 2, 1)
    shape = (trials, HOST_KERNELS, HOST_BOOTS)
    x = host * (1 + HOST_BOOT_COV * rng.normal(size=shape)) * (1 + RUN_COV * rng.normal(size=shape))
    x[:, 1] *= 1 - shift
    return x * 1.43e6


def host_table(trials: int, seed: int, policy: verdict.Policy) -> bool:
    """The CI failure's setting: A/A false positives and power at a 5% shift of one kernel
    of the demo against its base on one loaded host, the ground-truth test's looks."""
    pol = replace(policy, max_runs=HOST_BOOTS).starting_at(HOST_START)
    looks = [n for n in pol.schedule() if n <= HOST_BOOTS]
    print(
        f"\n== one shared host: {HOST_KERNELS} kernels, rounds in shuffled order, boot CoV "
        f"{100 * HOST_BOOT_COV:.0f}%, run CoV {100 * RUN_COV:.0f}%, load periods of "
        f"{HOST_LOAD_SLOTS[0]}-{HOST_LOAD_SLOTS[1]} boots ({100 * HOST_LOAD_DROP[0]:.0f}-"
        f"{100 * HOST_LOAD_DROP[1]:.0f}% slower) starting at {100 * HOST_LOAD_RATE:.0f}% of "
        f"boots, drift sd {100 * HOST_DRIFT[1]:.0f}%; looks at {looks}; {trials} trials =="
    )
    print(f"{'':<11} | {'A/A FPR':>7} {'P5':>5} | boots/side A/A   5%")
    rng = np.random.default_rng([seed, 9, HOST_KERNELS])
    aa, shifted = _host_boots(rng, trials, 0.0), _host_boots(rng, trials, LAB_SHIFT)
    ok = True
    for rule in RULES:
        fpr, used_aa = _calls(aa, 0.0, rule, pol, HOST_BOOTS)
        power, used_5 = _calls(shifted, LAB_SHIFT, rule, pol, HOST_BOOTS)
        print(f"{rule:<11} | {pct(fpr):>7} {pct(power):>5} | {used_aa:14.1f} {used_5:4.1f}")
        if rule == LIVE:
            ok = fpr <= pol.alpha
    print(
        f"host floor (live: blocks of every kernel of the rounds): A/A false positives <= alpha ({100 * pol.alpha:.1f}%)"
        + ("  ok" if ok else "  FAIL")
    )
    return ok


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
    ok = family_table(args.trials, args.seed, policy) and ok
    ok = lab_table(args.trials, args.seed, policy) and ok
    ok = host_table(5 * args.trials, args.seed, policy) and ok
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
