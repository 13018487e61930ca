"""Rounds as blocks: the verdict's Welch test on :func:`blocks.block_sides` is the block
design's test (the paired t-test for two kernels), and a box offset shared by a round's
kernels changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stackbench.resultsdb import blocks, verdict


def test_two_kernels_are_the_paired_t_test():
    rng = np.random.default_rng(3)
    x = 1000.0 * (1.0 + 0.02 * rng.normal(size=(50, 2, 8)))
    b, n = blocks.block_sides(x, 1)
    res = verdict.decide_batch(b, n, kind="throughput")
    want = stats.ttest_rel(x[:, 1], x[:, 0], axis=1)
    np.testing.assert_allclose(res.p_value, want.pvalue, rtol=1e-9)
    diff = (x[:, 1] - x[:, 0]).mean(axis=1) / x[:, 0].mean(axis=1) * 100
    np.testing.assert_allclose(res.change_pct, diff, rtol=1e-9)


def test_a_rounds_box_offset_cancels_and_residuals_pool_over_kernels():
    rng = np.random.default_rng(4)
    x = 1000.0 * (1.0 + 0.01 * rng.normal(size=(20, 4, 10)))
    boxed = x + 1000.0 * 0.05 * rng.normal(size=(20, 1, 10))  # one offset per round
    plain = verdict.decide_batch(*blocks.block_sides(x, 2), kind="throughput")
    shifted = verdict.decide_batch(*blocks.block_sides(boxed, 2), kind="throughput")
    np.testing.assert_allclose(shifted.p_value, plain.p_value, rtol=1e-9)
    # unblocked, the same offsets swamp the comparison
    loose = verdict.decide_batch(boxed[:, 0], boxed[:, 2], kind="throughput")
    assert np.median(loose.ci_high_pct - loose.ci_low_pct) > 3 * np.median(
        shifted.ci_high_pct - shifted.ci_low_pct
    )


def test_a_block_design_needs_two_rounds_and_a_later_kernel():
    with pytest.raises(ValueError):
        blocks.block_sides(np.ones((1, 2, 1)), 1)
    with pytest.raises(ValueError):
        blocks.block_sides(np.ones((1, 2, 3)), 0)


def test_by_round_keeps_the_rounds_with_one_boot_of_each_kernel():
    block_of = {f"{k}{r}": ("s", r, "qemu-vm", "") for k in "bn" for r in range(1, 6)}
    block_of |= {"b9": ("s", 1, "qemu-vm", "")}  # a second base boot in round 1: ambiguous
    # the first run of a boot now higher, now lower: no warm-up to drop
    base = {f"b{r}": [100.0 + r, 100.5 + r][:: (-1) ** r] for r in range(1, 6)} | {"b9": [90.0]}
    new = {f"n{r}": [98.0 + r * 1.1] for r in (1, 2, 3, 5)} | {"n7": [1.0]}  # n7: no round
    rounds = blocks.by_round([base, new], block_of)
    p = rounds.block(1)
    # rounds 2, 3, 5: round 1 has two base boots, round 4 no patch boot
    both = np.isfinite(rounds.means).all(axis=0)
    np.testing.assert_allclose(rounds.means[0, both], [102.25, 103.25, 105.25])
    np.testing.assert_allclose(rounds.means[1, both], [100.2, 101.3, 103.5])
    assert (p.kernels, p.rounds, p.runs_base, p.runs_new, p.warmup_dropped) == (2, 3, 6, 3, False)
    ((b, n),) = blocks.block_sides_of([p])
    res = verdict.decide_batch(np.array([b]), np.array([n]), kind="throughput")
    want = stats.ttest_rel(rounds.means[1, both], rounds.means[0, both])
    np.testing.assert_allclose(res.p_value[0], want.pvalue, rtol=1e-9)


def test_kernels_join_the_design_only_with_a_boot_in_each_of_its_rounds():
    present = np.ones((5, 6), dtype=bool)
    present[1, 5] = False  # the judged kernel missed round 5: the design has rounds 0-4
    present[2, 5] = False  # ... so kernel 2, missing only round 5, joins
    present[3, 2] = False  # kernel 3 missed a round of the design: left out
    present[0, 0] = False  # the base missed round 0
    kernels, cols = blocks.design(present, 1)
    assert kernels == [0, 1, 2, 4] and cols.tolist() == [1, 2, 3, 4]
    # on values the same rule drops those rounds and kernels and is block_sides on the rest
    rng = np.random.default_rng(5)
    x = 1000.0 * (1.0 + 0.02 * rng.normal(size=(30, 5, 6)))
    x[:, ~present] = np.nan
    got = blocks.live_sides(x, 1)
    want = blocks.block_sides(x[:, [0, 1, 2, 4]][:, :, [1, 2, 3, 4]], 1)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    # no other kernel complete: the paired test of the pair's rounds
    present[2:] = False
    assert blocks.design(present, 1)[0] == [0, 1]
