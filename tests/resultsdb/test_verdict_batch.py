"""judge_many judges metrics in batches; every verdict must be the one judge() gives the
metric alone, then Benjamini-Hochberg across them, as judge_many did metric by metric."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np
import pytest

from stackbench.resultsdb import boots as bt
from stackbench.resultsdb import verdict as vd


def _one_by_one(pairs, policy=vd.DEFAULT):
    """judge_many as it was before batching: judge() per metric, then BH."""
    out = {}
    tested = []
    for name, (base, new, hib, kind) in pairs.items():
        v = vd.judge(base, new, higher_is_better=hib, kind=kind, policy=policy, metric=name)
        out[name] = v
        if v.outcome != "n/a":
            tested.append((name, v.q_value if v.q_value is not None else 1.0))
    if not tested:
        return out
    qs = vd.bh_adjust([q for _, q in tested])
    for (name, _), q in zip(tested, qs, strict=True):
        v = out[name]
        if v.outcome == "changed" and q > policy.fdr_q:
            wanted = policy.next_look(min(v.n_base, v.n_new))
            v = replace(v, outcome="undecided", direction="none", runs_wanted=wanted)
        out[name] = replace(v, q_value=float(q))
    return out


def _side(rng, kind, mean, size, boots, ties):
    if kind == "latency" and ties:
        vals = list(np.round(rng.lognormal(math.log(mean), 0.3, size)))
    elif kind == "latency":
        vals = list(mean * rng.lognormal(0, 0.3, size))
    elif ties:
        vals = [mean] * size  # no variance at all: the exact path
    else:
        vals = list(mean * (1 + 0.02 * rng.normal(size=size)))
    if rng.random() < 0.05:
        vals[0] = float("nan")  # a lost sample: dropped on either path
    if not boots:
        return vals
    if boots == "single":
        return {("boot", i): [x] for i, x in enumerate(vals)}
    out: dict = {}
    for i, x in enumerate(vals):
        warm = 1.2 if boots == "warm" and i % 3 == 0 else 1.0
        out.setdefault(("boot", i // 3), []).append(x * warm)
    return out


def _pairs(seed: int, count: int):
    rng = np.random.default_rng(seed)
    kinds = ["throughput", "latency", "count", "percent", "duration", ""]
    pairs = {}
    for i in range(count):
        kind = kinds[rng.integers(len(kinds))]
        sizes = (int(rng.choice([1, 2, 3, 5, 6, 10, 12])), int(rng.choice([1, 2, 5, 10, 11])))
        boots = rng.choice(["", "", "plain", "warm", "single"])
        ties = rng.random() < 0.1
        mean = float(rng.choice([0.0, 1.0, 50.0, 1e6])) if kind != "latency" else 900.0
        factor = float(rng.choice([1.0, 1.0, 1.03, 0.7, 1.5]))
        hib = [True, False, None][int(rng.integers(3))]
        base = _side(rng, kind, mean, sizes[0], boots, ties)
        new = _side(rng, kind, mean * factor, sizes[1], boots, ties)
        pairs[f"m{i}"] = (base, new, hib, kind)
    return pairs


def _same(a: vd.Verdict, b: vd.Verdict) -> bool:
    # NaN-aware equality of every field (a NaN is the same result as a NaN)
    for (ka, xa), (_kb, xb) in zip(asdict(a).items(), asdict(b).items(), strict=True):
        if isinstance(xa, float) and isinstance(xb, float) and math.isnan(xa) and math.isnan(xb):
            continue
        if xa != xb or type(xa) is not type(xb):
            print("differs:", ka, xa, xb)
            return False
    return True


@pytest.mark.parametrize("seed", range(6))
def test_batched_verdicts_equal_metric_by_metric(seed):
    pairs = _pairs(seed, 400)
    policy = vd.DEFAULT if seed % 2 else vd.DEFAULT.starting_at(3)
    got = vd.judge_many(pairs, policy)
    want = _one_by_one(pairs, policy)
    assert list(got) == list(want)
    outcomes = {v.outcome for v in want.values()}
    assert {"changed", "unchanged", "undecided", "n/a"} <= outcomes  # the data reach all
    assert {v.test for v in want.values()} >= {"yuen-welch", "mann-whitney"}
    for name in want:
        assert _same(got[name], want[name]), name


def test_empty_and_all_untestable():
    assert vd.judge_many({}) == {}
    pairs = {"a": ([1.0], [2.0], True, ""), "b": ([], [1.0, 2.0], None, "count")}
    assert vd.judge_many(pairs) == _one_by_one(pairs)


def _units_in_full(base, new):
    """boots.units without its shortcut for one-run boots."""
    bb, nb = bt.boots_of(base), bt.boots_of(new)
    drop = bt.warmup_detected([*bb, *nb])
    runs = sum(b.size for b in bb), sum(b.size for b in nb)
    return bt.boot_means(bb, drop), bt.boot_means(nb, drop), *runs, drop


def _means_in_full(boots_, drop):
    return np.asarray([(b[1:] if drop and b.size > 1 else b).mean() for b in boots_])


@pytest.mark.parametrize("seed", range(3))
def test_units_shortcuts_equal_the_full_reduction(seed):
    for base, new, _hib, _kind in _pairs(seed, 300).values():
        got, want = bt.units(base, new), _units_in_full(base, new)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert got[2:] == want[2:]
        for side in (base, new):
            for drop in (False, True):
                b = bt.boots_of(side)
                assert np.array_equal(bt.boot_means(b, drop), _means_in_full(b, drop))


def test_per_boot_shortcut_equals_the_mean_of_clean_samples():
    rng = np.random.default_rng(7)
    values = {}
    for run_id in range(200):
        samples = list(rng.normal(1e3, 50, int(rng.integers(0, 12))))
        if samples and rng.random() < 0.1:
            samples[int(rng.integers(len(samples)))] = float(rng.choice([np.nan, np.inf]))
        values[run_id] = samples
    boot_of = {r: ("b", r // 3) for r in range(0, 200, 2)}
    want: dict = {}
    for run_id in sorted(values):
        arr = np.asarray(values[run_id], dtype=float)
        arr = arr[np.isfinite(arr)]
        if arr.size:
            key = boot_of.get(run_id, ("run", run_id))
            want.setdefault(key, []).append(float(arr.mean()))
    assert bt.per_boot(values, boot_of) == want
