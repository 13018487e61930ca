"""One pair by round: :func:`blocks.pair` keeps the rounds holding one boot of each kernel and
pairs them (on several boxes or one); the verdict's paired test is scipy's paired t below 20
rounds and the trimmed one from 20 on."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stackbench.resultsdb import blocks, verdict


def test_the_paired_test_is_scipys_paired_t_below_twenty_rounds():
    rng = np.random.default_rng(3)
    box = rng.normal(0, 3000, (1, 6))  # each round's box offset, shared by both kernels
    base = 1e5 + box + rng.normal(0, 200, (1, 6))
    new = 0.97e5 + box + rng.normal(0, 200, (1, 6))
    res = verdict.decide_batch(base, new, kind="throughput", paired=True)
    want = stats.ttest_rel(new[0], base[0])
    assert res.p_value[0] == pytest.approx(want.pvalue, rel=1e-9)
    ci = want.confidence_interval(res.level)
    mb = base[0].mean()
    assert res.ci_low_pct[0] == pytest.approx(100 * ci.low / mb, rel=1e-9)
    assert res.ci_high_pct[0] == pytest.approx(100 * ci.high / mb, rel=1e-9)
    assert res.outcome[0] == verdict.CHANGED and res.test == blocks.PAIRED
    # unpaired, the same boots cannot see the change through the box spread
    plain = verdict.decide_batch(base, new, kind="throughput")
    assert plain.outcome[0] == verdict.UNDECIDED


def test_one_bad_round_neither_decides_nor_reads_unchanged():
    """At 10 rounds the paired test is untrimmed (trimming one round per end cost more power
    than bad boots do: docs/verdict.md): a 25% slow boot cannot make an unchanged patch
    changed, nor make a 5% regression read "~"; it leaves it undecided. From 20 rounds the
    trimmed test sets it aside and finds the change."""
    rng = np.random.default_rng(4)
    pol = verdict.Policy(max_runs=20, looks=(3, 5, 10, 20))
    base = 1e5 * (1 + 0.01 * rng.normal(size=(1, 20)))
    same = 1e5 * (1 + 0.01 * rng.normal(size=(1, 20)))
    slow = 0.95e5 * (1 + 0.01 * rng.normal(size=(1, 20)))
    for x in (same, slow):
        x[0, 3] *= 0.75  # one boot of the patch 25% slow
    for n in (10, 20):
        aa = verdict.decide_batch(base[:, :n], same[:, :n], kind="throughput", paired=True)
        assert aa.outcome[0] != verdict.CHANGED
    ten = verdict.decide_batch(base[:, :10], slow[:, :10], kind="throughput", paired=True)
    assert ten.outcome[0] == verdict.UNDECIDED
    found = verdict.decide_batch(base, slow, kind="throughput", paired=True, policy=pol)
    assert found.outcome[0] == verdict.CHANGED and found.sign[0] < 0


def _box(r: int) -> tuple:
    return ("s", r, "qemu-vm", f"w{r % 3}")


def test_pair_keeps_the_rounds_with_one_boot_of_each_kernel():
    block_of = {f"{k}{r}": _box(r) for k in "bn" for r in range(1, 6)}
    block_of |= {"b9": _box(1)}  # a second base boot in round 1: ambiguous
    # the first run of a boot now higher, now lower: no warm-up to drop
    base = {f"b{r}": [100.0 + r, 100.5 + r][:: (-1) ** r] for r in range(1, 6)} | {"b9": [90.0]}
    new = {f"n{r}": [98.0 + r * 1.1] for r in (1, 2, 3, 5)} | {"n7": [1.0]}  # n7: no round
    p = blocks.pair(base, new, block_of)
    # rounds 2, 3, 5: round 1 has two base boots, round 4 no patch boot
    assert p.paired and (p.rounds, p.boxes, p.runs_base, p.runs_new) == (3, 2, 6, 3)
    np.testing.assert_allclose(p.base, [102.25, 103.25, 105.25])
    np.testing.assert_allclose(p.new, [100.2, 101.3, 103.5])
    assert p.test("yuen-welch") == f"{blocks.PAIRED} (2 boxes)" and not p.warmup_dropped


def test_pair_is_paired_on_one_box_too_and_unpaired_with_too_few_rounds():
    # one host: its speed drifts, and a round's kernels boot one after another on it
    one_box = {f"{k}{r}": ("s", r, "qemu-vm", "w1") for k in "bn" for r in range(1, 7)}
    base = {f"b{r}": [100.0 + r] for r in range(1, 7)}
    new = {f"n{r}": [99.0 + r] for r in range(1, 7)}
    p = blocks.pair(base, new, one_box)
    assert p.paired and (p.rounds, p.boxes) == (6, 1)
    assert p.test("yuen-welch") == f"{blocks.PAIRED} (1 box)"
    few = {f"{k}{r}": _box(r) for k in "bn" for r in range(1, 7)}
    p = blocks.pair(base, {k: new[k] for k in ("n1", "n2")}, few)
    assert not p.paired and p.test("yuen-welch") == (
        "yuen-welch, unpaired (2 rounds hold both kernels)"
    )


def test_the_warm_up_is_decided_on_the_pairs_own_boots():
    block_of = {f"{k}{r}": _box(r) for k in "bn" for r in range(1, 7)}
    # every boot's first run 5% low, on both kernels: dropped
    base = {f"b{r}": [95.0 + r, 100.0 + r, 100.1 + r] for r in range(1, 7)}
    new = {f"n{r}": [95.0 + r, 100.0 + r, 100.2 + r] for r in range(1, 7)}
    p = blocks.pair(base, new, block_of)
    assert p.warmup_dropped and p.base[0] == pytest.approx(101.05)
