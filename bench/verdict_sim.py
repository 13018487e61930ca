#!/usr/bin/env python3
"""What the live verdict rule does over a series' adaptive looks: false alarms, power, a
noisier unchanged commit, and whether a pair reads the same alone and on the series' page.

A series boots its base and K - 1 commits in rounds (every kernel once per round, shuffled),
3 rounds first, then more rounds of the base and the commits still undecided up to the looks
of :meth:`stackbench.resultsdb.verdict.Policy.schedule` (3/5/10 boots per kernel). Each boot
mean is ``level * (1 + box or host) * (1 + boot noise) * (1 + run noise / sqrt(3))`` (boot
CoV 2%, run CoV 1%, 3 runs per boot). Two settings:

* lab: 8 boxes of one kind, box offsets CoV 3%, every round whole on one random box;
* host: one host (no box offset; its speed drifts only in the "drift" noise).

Noises: normal boot offsets; t with 3 degrees of freedom (heavy tails, same CoV); 2% of boots
10% slow (outlier boots); AR(1) drift (coefficient 0.9, stationary sd 2%) of each box's offset
round by round, or of the host's speed boot by boot.

Each pair is judged as :func:`stackbench.resultsdb.tables.verdict.compare` judges it: paired
by round wherever at least ``blocks.MIN_ROUNDS`` rounds hold both kernels
(:func:`stackbench.resultsdb.blocks.pair`, on the lab's boxes and on the one host alike), by
:func:`stackbench.resultsdb.verdict.decide_batch`. Per cell:

* A/A: share of unchanged commits called changed at the end (floor <= 1%);
* power: a commit 5% worse called worse within 10 boots (floor >= 90%, >= 80% with outlier
  boots);
* noisy: a commit with boot CoV 5%, unchanged, called changed (floor <= 1%);
* views: of ``--views`` series per cell stored as datasets with real runs, rounds and boxes,
  the share of pairs whose verdict (label, interval, q) differs between ``compare BASE K``
  (a dataset of the two kernels) and the series' report (all K kernels) (floor 0).

    .venv/bin/python bench/verdict_sim.py [--trials 4000] [--views 40] [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from stackbench.resultsdb import blocks, query, verdict
from stackbench.resultsdb.tables import verdict as table

BOXES = 8
BOX_COV = 0.03
BOOT_COV = 0.02
NOISY_COV = 0.05
RUN_COV = 0.01
RUNS = 3
SHIFT = 0.05
OUTLIER_RATE, OUTLIER_DROP = 0.02, 0.10
DRIFT_PHI, DRIFT_SD = 0.9, 0.02
NOISES = ("normal", "t3", "outliers", "drift")
SETTINGS = ("lab", "host")
FLOORS = {"aa": 0.01, "power": 0.90, "power_outliers": 0.80, "noisy": 0.01, "views": 0.0}


def _ar1(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """AR(1) along the last axis with stationary sd DRIFT_SD."""
    e = rng.normal(size=shape) * DRIFT_SD * np.sqrt(1 - DRIFT_PHI**2)
    out = np.empty(shape)
    out[..., 0] = rng.normal(size=shape[:-1]) * DRIFT_SD
    for i in range(1, shape[-1]):
        out[..., i] = DRIFT_PHI * out[..., i - 1] + e[..., i]
    return out


def series(
    rng: np.random.Generator, trials: int, k: int, noise: str, setting: str, shift: float,
    noisy: bool, rounds: int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(boot means (T, K, R), box of each round (T, R)): every kernel booted in every round
    (the adaptive loop then uses what it booted)."""
    shape = (trials, k, rounds)
    cov = np.full((1, k, 1), BOOT_COV)
    if noisy:
        cov[0, 1, 0] = NOISY_COV
    if noise == "t3":
        boot = cov * rng.standard_t(3, shape) / np.sqrt(3)
    else:
        boot = cov * rng.normal(size=shape)
    if noise == "outliers":
        boot = np.where(rng.random(shape) < OUTLIER_RATE, (1 + boot) * (1 - OUTLIER_DROP) - 1, boot)
    box = rng.integers(0, BOXES, (trials, rounds))
    if setting == "lab":
        offsets = rng.normal(size=(trials, BOXES)) * BOX_COV
        shared = np.take_along_axis(offsets, box, axis=1)[:, None, :]
        if noise == "drift":
            drift = _ar1(rng, (trials, BOXES, rounds))
            shared = shared + np.take_along_axis(drift, box[:, None, :], axis=1)
    else:
        box[:] = 0
        shared = np.zeros((trials, 1, rounds))
        if noise == "drift":
            # the host's speed at each boot slot: a round's kernels boot one after another
            order = np.argsort(rng.random(shape), axis=1)
            slots = _ar1(rng, (trials, k * rounds)).reshape(trials, rounds, k).transpose(0, 2, 1)
            shared = np.take_along_axis(slots, order, axis=1)
    level = np.ones((1, k, 1))
    level[0, 1, 0] = 1 - shift
    runs = 1 + RUN_COV / np.sqrt(RUNS) * rng.normal(size=shape)
    return 100000.0 * level * (1 + shared) * (1 + boot) * runs, box


def _judge(base: list[np.ndarray], new: list[np.ndarray], paired: bool, pol) -> np.ndarray:
    """Outcome codes (and sign) of T pairs of possibly different sizes, batched by size."""
    out = np.zeros((len(base), 2))
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (b, n) in enumerate(zip(base, new, strict=True)):
        groups.setdefault((b.size, n.size), []).append(i)
    for idx in groups.values():
        res = verdict.decide_batch(
            np.stack([base[i] for i in idx]), np.stack([new[i] for i in idx]),
            kind="throughput", policy=pol, paired=paired,
        )  # fmt: skip
        out[idx, 0], out[idx, 1] = res.outcome, res.sign
    return out


def adaptive(x: np.ndarray, box: np.ndarray, setting: str, pol) -> tuple[np.ndarray, list]:
    """The series' looks: (final outcome and sign per (trial, commit), (T, K-1, 2)), and the
    rounds each kernel booted per trial."""
    trials, k, _r = x.shape
    looks = pol.schedule()
    active = np.ones((trials, k - 1), dtype=bool)
    rounds_of = [[[] for _ in range(k)] for _ in range(trials)]
    done = 0
    for look in looks:
        for t in range(trials):
            if active[t].any():
                for kk in [0, *(1 + np.flatnonzero(active[t])).tolist()]:
                    rounds_of[t][kk].extend(range(done, look))
        done = look
        res = _final(x, box, rounds_of, setting, pol)
        active &= res[:, :, 0] == verdict.UNDECIDED
    return _final(x, box, rounds_of, setting, pol), rounds_of


def _final(x: np.ndarray, box: np.ndarray, rounds_of: list, setting: str, pol) -> np.ndarray:
    trials, k, _r = x.shape
    out = np.zeros((trials, k - 1, 2))
    for kk in range(1, k):
        paired_idx, unpaired_idx = [], []
        for t in range(trials):
            both = sorted(set(rounds_of[t][0]) & set(rounds_of[t][kk]))
            # the design decides: rounds holding both kernels, paired (blocks.pair)
            if len(both) >= blocks.MIN_ROUNDS:
                paired_idx.append((t, both))
            else:
                unpaired_idx.append(t)
        if paired_idx:
            b = [x[t, 0, r] for t, r in paired_idx]
            n = [x[t, kk, r] for t, r in paired_idx]
            out[[t for t, _ in paired_idx], kk - 1] = _judge(b, n, True, pol)
        if unpaired_idx:
            b = [x[t, 0, rounds_of[t][0]] for t in unpaired_idx]
            n = [x[t, kk, rounds_of[t][kk]] for t in unpaired_idx]
            out[unpaired_idx, kk - 1] = _judge(b, n, False, pol)
    return out


def _dataset(
    x: np.ndarray, box: np.ndarray, rounds: list, kernels: list[int], seed: int
) -> query.Dataset:
    """One series' stored boots as a dataset of ``kernels``: real runs with their boot, round
    and box, as the plan's executors store them (a boot's runs the same in every dataset)."""
    ks = [query.Kernel(100 + kk, f"{kk:040x}", f"k{kk}", "cfg", "gcc") for kk in kernels]
    job = query.JobRow(1, "vm-scalability", "anon-w-seq", {}, "builtin-1", "builtin")
    metric = query.MetricRow(1, "vm-scalability.throughput", "KB/s", True, "throughput")
    ds = query.Dataset(ks, {1: job}, {1: metric})
    rid = 0
    for kk in kernels:
        for r in rounds[kk]:
            m = x[0, kk, r]
            z = np.random.default_rng((seed, kk, r)).normal(size=RUNS)
            for i, v in enumerate(m + RUN_COV * m * (z - z.mean())):
                rid += 1
                meta = {"series": 1, "boot_round": r, "worker": f"box{box[0, r]}"}
                ds.runs[rid] = query.RunRow(
                    rid, 1, 100 + kk, "qemu", "qemu", i, "done", {}, meta,
                    boot_id=f"s1-r{r}-k{kk}", boot_round=r,
                )  # fmt: skip
                ds.values[(1, 1)][100 + kk][rid] = [float(v)]
    return ds


def views(x: np.ndarray, box: np.ndarray, rounds_of: list, n: int, seed: int) -> float:
    """Share of pairs whose label, interval or q differ between the pair's own comparison
    and the series' report, on the same stored boots."""
    k = x.shape[1]
    differ = total = 0
    for t in range(min(n, x.shape[0])):
        sub = (x[t : t + 1], box[t : t + 1], rounds_of[t])
        full = table.compare(_dataset(*sub, list(range(k)), seed + t))
        for kk in range(1, k):
            alone = table.compare(_dataset(*sub, [0, kk], seed + t))
            a = alone[0][2][0][3]
            f = next(rows for _j, kern, rows in full if kern.id == 100 + kk)[0][3]
            total += 1
            key = lambda v: (v.label, v.ci_low_pct, v.ci_high_pct, v.q_value, v.test)  # noqa: E731
            differ += key(a) != key(f)
    return differ / max(total, 1)


def cell(k: int, noise: str, setting: str, trials: int, n_views: int, seed: int, pol) -> dict:
    rng = np.random.default_rng(seed)
    r = max(pol.schedule())
    got = {}
    for name, shift, noisy in (("aa", 0.0, False), ("power", SHIFT, False), ("noisy", 0.0, True)):
        x, box = series(rng, trials, k, noise, setting, shift, noisy, r)
        res, rounds_of = adaptive(x, box, setting, pol)
        changed = res[:, :, 0] == verdict.CHANGED
        if name == "aa":
            got["aa"] = changed.mean()
            got["views"] = views(x, box, rounds_of, n_views, seed)
        elif name == "power":
            got["power"] = (changed[:, 0] & (res[:, 0, 1] < 0)).mean()
        else:
            got["noisy"] = changed[:, 0].mean()
    return got


def _mark(name: str, value: float, noise: str) -> str:
    if name == "power":
        floor = FLOORS["power_outliers" if noise == "outliers" else "power"]
        ok = value >= floor
        return f"{100 * value:5.1f}% (>={100 * floor:.0f}% {'ok' if ok else 'MISSED'})"
    floor = FLOORS[name]
    ok = value <= floor
    return f"{100 * value:5.1f}% (<={100 * floor:g}% {'ok' if ok else 'MISSED'})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--views", type=int, default=40, help="series per cell through the views")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    pol = verdict.DEFAULT
    t0 = time.monotonic()
    print(
        f"live rule: alpha {pol.alpha:g} per metric over looks {pol.schedule()} "
        f"(per look {', '.join(f'{a:.2g}' for a in pol.spending())}), trim {verdict.TRIM:g}; "
        f"{args.trials} series per cell, {args.views} through the views"
    )
    head = f"{'K':>2} {'setting':<5} {'noise':<9} {'A/A':<20} {'power at 5%':<20} "
    print(head + f"{'noisy commit':<20} {'views differ':<20}")
    missed = 0
    for k in (2, 4):
        for setting in SETTINGS:
            for i, noise in enumerate(NOISES):
                seed = args.seed * 1000 + 100 * k + 10 * SETTINGS.index(setting) + i
                got = cell(k, noise, setting, args.trials, args.views, seed, pol)
                cells = [_mark(n, got[n], noise) for n in ("aa", "power", "noisy", "views")]
                missed += sum("MISSED" in c for c in cells)
                print(f"{k:>2} {setting:<5} {noise:<9} " + " ".join(f"{c:<20}" for c in cells))
                sys.stdout.flush()
    print(f"{missed} figure(s) missed their floor; {time.monotonic() - t0:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
