"""stackbench's per-metric verdict: direction, the three outcomes, adaptive runs, FDR across
metrics, the rank path for latencies and the edge cases (fixed seeds throughout)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from stackbench.resultsdb import mannwhitney
from stackbench.resultsdb import verdict as vd
from stackbench.resultsdb.verdict import DEFAULT, Policy, judge, judge_many, runs_needed


def noisy(rng, mean: float, cov: float, n: int) -> list[float]:
    return list(mean * (1 + cov * rng.normal(size=n)))


def lognoisy(rng, mean: float, cov: float, n: int) -> list[float]:
    sigma = math.sqrt(math.log1p(cov**2))
    return list(mean * np.exp(rng.normal(-(sigma**2) / 2, sigma, n)))


# ------------------------------------------------------------------ direction


@pytest.mark.parametrize(
    ("higher_is_better", "kind", "factor", "direction"),
    [
        (True, "throughput", 0.90, "worse"),  # throughput down
        (True, "throughput", 1.10, "better"),
        (False, "duration", 1.10, "worse"),  # takes longer
        (False, "duration", 0.90, "better"),
        (False, "latency", 1.30, "worse"),
        (False, "latency", 0.70, "better"),
    ],
)
def test_clear_changes_have_the_right_direction(higher_is_better, kind, factor, direction):
    rng = np.random.default_rng(11)
    base = noisy(rng, 1000.0, 0.01, 10)
    new = noisy(rng, 1000.0 * factor, 0.01, 10)
    v = judge(base, new, higher_is_better=higher_is_better, kind=kind, metric="m")
    assert (v.outcome, v.direction, v.runs_wanted) == ("changed", direction, 0)
    assert v.metric == "m" and v.n_base == v.n_new == 10
    assert v.change_pct == pytest.approx(100 * (factor - 1), abs=2.5)
    assert v.ci_low_pct < v.change_pct < v.ci_high_pct
    assert v.test == ("mann-whitney" if kind == "latency" else "yuen-welch")


def test_change_of_a_metric_without_preferred_direction():
    rng = np.random.default_rng(3)
    v = judge(noisy(rng, 100, 0.01, 5), noisy(rng, 150, 0.01, 5), higher_is_better=None)
    assert (v.outcome, v.direction, v.label) == ("changed", "none", "changed")


def test_the_interval_is_yuens_at_the_looks_level():
    """What is shown is what is decided: the interval is scipy's Yuen-Welch interval at
    1 - the look's alpha, and the verdict says that level."""
    rng = np.random.default_rng(5)
    base, new = noisy(rng, 200, 0.03, 10), noisy(rng, 190, 0.05, 10)
    v = judge(base, new, higher_is_better=True, kind="throughput")
    alpha = DEFAULT.look_alpha(10)
    ref = stats.ttest_ind(new, base, equal_var=False, trim=vd.TRIM)
    assert v.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    ci = ref.confidence_interval(1 - alpha)
    mb = stats.trim_mean(base, vd.TRIM)
    assert v.level == pytest.approx(1 - alpha)
    assert v.ci_low_pct == pytest.approx(100 * ci.low / mb, rel=1e-9)
    assert v.ci_high_pct == pytest.approx(100 * ci.high / mb, rel=1e-9)
    assert v.level_text == f"{100 * (1 - alpha):.2f}%"


def test_changed_and_unchanged_read_off_the_shown_interval():
    rng = np.random.default_rng(12)
    for _ in range(200):
        shift = rng.choice([0.0, 0.02, 0.05])
        base, new = noisy(rng, 1e5, 0.02, 10), noisy(rng, 1e5 * (1 - shift), 0.02, 10)
        v = judge(base, new, higher_is_better=True, kind="throughput")
        excludes = v.ci_low_pct > 0 or v.ci_high_pct < 0
        inside = v.ci_low_pct > -2 and v.ci_high_pct < 2
        if v.outcome == "changed":
            assert excludes and abs(v.change_pct) >= 2
        elif v.outcome == "unchanged":
            assert inside
        else:
            assert not inside and not (excludes and abs(v.change_pct) >= 2)


# ------------------------------------------------------------------ A/A and undecided


def test_a_a_is_never_called_changed():
    rng = np.random.default_rng(2024)
    outcomes = set()
    for _ in range(300):
        cov = rng.choice([0.01, 0.02, 0.05, 0.10])
        v = judge(noisy(rng, 1e5, cov, 5), noisy(rng, 1e5, cov, 5), higher_is_better=True)
        outcomes.add(v.outcome)
    assert "changed" not in outcomes
    assert outcomes <= {"unchanged", "undecided"}


def test_quiet_a_a_is_unchanged():
    rng = np.random.default_rng(8)
    v = judge(noisy(rng, 1e5, 0.002, 5), noisy(rng, 1e5, 0.002, 5), higher_is_better=True)
    assert (v.outcome, v.label, v.runs_wanted) == ("unchanged", "~", 0)


def test_undecided_asks_for_the_next_look_until_the_cap():
    rng = np.random.default_rng(17)
    # 5% regression at 5% CoV: three or five boots per side cannot tell
    base, new = noisy(rng, 1e5, 0.05, 10), noisy(rng, 0.95e5, 0.05, 10)
    v3 = judge(base[:3], new[:3], higher_is_better=True, kind="throughput")
    assert v3.outcome == "undecided" and v3.runs_wanted == 5
    v5 = judge(base[:5], new[:7], higher_is_better=True, kind="throughput")
    assert v5.outcome == "undecided" and v5.runs_wanted == 10  # the smaller side counts
    assert runs_needed(v5) == 10
    # at the cap the rule stays undecided rather than guess, and asks for nothing
    at_cap = judge(noisy(rng, 1e5, 0.10, 10), noisy(rng, 0.98e5, 0.10, 10), higher_is_better=True)
    assert at_cap.outcome == "undecided" and at_cap.runs_wanted == 0


def test_sequential_rule_keeps_false_positives_rare_and_finds_real_changes():
    """The bench's floor, on a fixed seed: A/A at most 1% changed over all looks, a 5% shift
    at 2% CoV found at least 90% of the time over the looks 3/5/10."""
    rng = np.random.default_rng(99)
    trials = 1000

    def run(shift: float) -> tuple[np.ndarray, np.ndarray]:
        base = 1 + 0.02 * rng.normal(size=(trials, 10))
        new = (1 + 0.02 * rng.normal(size=(trials, 10))) * (1 - shift)
        outcome = np.full(trials, vd.UNDECIDED)
        sign = np.zeros(trials)
        active = np.ones(trials, dtype=bool)
        n = DEFAULT.start_runs
        while n:
            res = vd.decide_batch(base[active, :n], new[active, :n], kind="throughput")
            outcome[active], sign[active] = res.outcome, res.sign
            active &= outcome == vd.UNDECIDED
            n = DEFAULT.next_look(n) if active.any() else 0
        return outcome, sign

    outcome, _ = run(0.0)
    assert (outcome == vd.CHANGED).mean() <= 0.01
    outcome, sign = run(0.05)
    assert ((outcome == vd.CHANGED) & (sign < 0)).mean() >= 0.90


def test_policy_schedule():
    assert DEFAULT.schedule() == (3, 5, 10)
    assert [DEFAULT.next_look(n) for n in (2, 3, 5, 7, 10, 19)] == [3, 5, 10, 10, 0, 0]
    p20 = Policy(max_runs=20, looks=(5, 10, 20), start_runs=5).starting_at(3)
    assert p20.looks == (3, 5, 10, 20) and p20.n_looks == 4 and p20.next_look(3) == 5
    assert Policy(max_runs=8).next_look(5) == 8


def test_error_is_spent_obrien_fleming_type_over_the_looks():
    spent = DEFAULT.spending()
    assert sum(spent) == pytest.approx(DEFAULT.alpha)
    assert spent[0] < spent[1] < spent[2]  # little early, most where the power is
    # the Lan-DeMets function at the information fractions 3/10, 5/10, 1
    z = stats.norm.isf(DEFAULT.alpha / 2)
    assert spent[0] == pytest.approx(2 * stats.norm.sf(z / math.sqrt(0.3)))
    assert spent[0] + spent[1] == pytest.approx(2 * stats.norm.sf(z / math.sqrt(0.5)))
    # data between looks never spends more than the look it reached
    assert [DEFAULT.look_alpha(n) for n in (2, 3, 4, 5, 9, 10, 40)] == [
        spent[0], spent[0], spent[0], spent[1], spent[1], spent[2], spent[2]
    ]  # fmt: skip
    assert DEFAULT.equivalence_margin("throughput") == DEFAULT.effect_floor("throughput")


# ------------------------------------------------------------------ minimum effect


def test_significant_but_below_the_minimum_effect_is_not_a_change():
    rng = np.random.default_rng(4)
    # a real 0.5% throughput change measured very precisely: real, but it does not matter
    v = judge(noisy(rng, 1e5, 0.001, 10), noisy(rng, 1.005e5, 0.001, 10), higher_is_better=True)
    assert v.p_value < 1e-6
    assert v.outcome == "unchanged"


def test_percent_metrics_use_percentage_points():
    rng = np.random.default_rng(6)
    base = noisy(rng, 95.0, 0.001, 10)
    half_point = [x + 0.5 for x in noisy(rng, 95.0, 0.001, 10)]
    two_points = [x + 2.0 for x in noisy(rng, 95.0, 0.001, 10)]
    assert judge(base, half_point, higher_is_better=True, kind="percent").outcome == "unchanged"
    v = judge(base, two_points, higher_is_better=True, kind="percent")
    assert (v.outcome, v.direction) == ("changed", "better")


# ------------------------------------------------------------------ many metrics


def test_fdr_keeps_false_calls_rare_across_many_null_metrics():
    rng = np.random.default_rng(1234)
    pairs = {
        f"null.{i}": (noisy(rng, 1e4, 0.05, 10), noisy(rng, 1e4, 0.05, 10), True, "throughput")
        for i in range(300)
    }
    pairs["real"] = (noisy(rng, 1e4, 0.01, 10), noisy(rng, 0.9e4, 0.01, 10), True, "throughput")
    out = judge_many(pairs)
    false_calls = [k for k, v in out.items() if v.outcome == "changed" and k != "real"]
    assert len(false_calls) <= 1
    assert out["real"].outcome == "changed" and out["real"].direction == "worse"
    assert all(v.q_value is not None and v.q_value >= v.p_value for v in out.values())


def test_fdr_demotes_a_lone_call_among_many_metrics():
    rng = np.random.default_rng(7)
    p20 = Policy(max_runs=20, looks=(3, 5, 10, 20))
    base, new = noisy(rng, 1e4, 0.02, 10), noisy(rng, 0.96e4, 0.02, 10)
    alone = judge(base, new, higher_is_better=True, kind="throughput", policy=p20)
    assert alone.outcome == "changed" and alone.q_value > DEFAULT.fdr_q / 1000
    crowd = {"it": (base, new, True, "throughput")}
    # many metrics that did not move at all: BH must now ask for more evidence
    for i in range(1000):
        crowd[f"flat.{i}"] = ([1.0, 1.0], [1.0, 1.0], True, "throughput")
    crowd.update(
        {f"noisy.{i}": (noisy(rng, 1, 0.5, 5), noisy(rng, 1, 0.5, 5), True, "") for i in range(5)}
    )
    v = judge_many(crowd, p20)["it"]
    assert v.q_value > DEFAULT.fdr_q
    assert (v.outcome, v.direction, v.runs_wanted) == ("undecided", "none", 20)
    assert runs_needed(judge_many(crowd, p20), p20) == 20


def test_bh_adjust():
    q = vd.bh_adjust([0.01, 0.04, 0.03, 0.20])
    # sorted 0.01 0.03 0.04 0.20 -> p*m/rank 0.04 0.06 0.0533 0.20, then running minimum
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert vd.bh_adjust([]).size == 0


# ------------------------------------------------------------------ edge cases


def test_under_two_runs_is_not_applicable():
    for base, new in (([1.0], [1.0, 2.0]), ([1.0, 2.0], []), ([], [])):
        v = judge(base, new, higher_is_better=True)
        assert v.outcome == "n/a" and v.label == "n/a"
        assert v.change_pct is None and v.p_value is None and v.q_value is None
        assert v.runs_wanted == DEFAULT.start_runs
    # NaNs are missing values, not samples
    v = judge([1.0, float("nan")], [1.0, 2.0], higher_is_better=True)
    assert v.outcome == "n/a" and v.n_base == 1
    assert judge_many({"x": ([1.0], [2.0], True, "")})["x"].outcome == "n/a"


def test_zero_variance():
    same = judge([5.0] * 4, [5.0] * 4, higher_is_better=True)
    assert (same.outcome, same.p_value, same.change_pct) == ("unchanged", 1.0, 0.0)
    assert same.ci_low_pct == same.ci_high_pct == 0.0
    up = judge([5.0] * 4, [6.0] * 4, higher_is_better=True)
    assert (up.outcome, up.direction, up.p_value) == ("changed", "better", 0.0)
    assert up.change_pct == pytest.approx(20.0)
    tiny = judge([100.0] * 4, [100.5] * 4, higher_is_better=True)
    assert tiny.outcome == "unchanged"  # certain, and below the 2% that matters
    # one side constant, the other not: an ordinary Welch test
    mixed = judge([10.0] * 10, [10.0, 10.1, 9.9, 10.05, 9.95] * 2, higher_is_better=True)
    assert mixed.outcome == "unchanged" and 0 < mixed.p_value <= 1
    zero_base = judge([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], higher_is_better=False, kind="latency")
    assert zero_base.outcome == "unchanged" and zero_base.change_pct is None


def test_skewed_latency_uses_the_rank_path():
    rng = np.random.default_rng(21)
    base = lognoisy(rng, 1000, 0.08, 10)
    base[3] *= 8  # one very bad run
    new = lognoisy(rng, 1400, 0.08, 10)
    v = judge(base, new, higher_is_better=False, kind="latency")
    assert v.test == "mann-whitney"
    ref = stats.mannwhitneyu(new, base, method="exact")
    assert v.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    # Hodges-Lehmann: the median of all pairwise log ratios, inside its interval
    logs = np.log(new)[:, None] - np.log(base)[None, :]
    assert v.change_pct == pytest.approx(100 * np.expm1(np.median(logs)), rel=1e-9)
    assert v.ci_low_pct <= v.change_pct <= v.ci_high_pct
    assert (v.outcome, v.direction) == ("changed", "worse")
    # the bad run would have hidden the change from a t-test on the raw values
    assert stats.ttest_ind(new, base, equal_var=False).pvalue * 3 > DEFAULT.alpha
    # ties or non-positive values leave the exact rank test: Welch instead
    tied = judge([1.0, 2.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0], higher_is_better=False, kind="latency")
    assert tied.test == "yuen-welch"
    zero = judge([0.0, 1, 2], [1.0, 2, 3], higher_is_better=False, kind="latency")
    assert zero.test == "yuen-welch"


def test_rank_path_decides_from_ten_boots():
    # complete separation: exact two-sided p = 2/C(2n, n); the looks of 5 (and 7, judged at
    # the 5-boot look's alpha) cannot reach their share, 10 boots can
    base = [10.0 + 0.1 * i for i in range(10)]
    new = [20.0 + 0.1 * i for i in range(10)]
    v = judge(base[:5], new[:5], higher_is_better=False, kind="latency")
    assert v.p_value == pytest.approx(2 / 252)
    assert (v.outcome, v.runs_wanted) == ("undecided", 10)
    v7 = judge(base[:7], new[:7], higher_is_better=False, kind="latency")
    assert v7.p_value == pytest.approx(2 / 3432) and v7.outcome == "undecided"
    v10 = judge(base, new, higher_is_better=False, kind="latency")
    assert v10.p_value == pytest.approx(2 / 184756)
    assert (v10.outcome, v10.direction) == ("changed", "worse")


def test_exact_mann_whitney_distribution():
    for n, m in ((1, 1), (3, 4), (7, 5), (12, 12)):
        cdf = mannwhitney.null_cdf(n, m)
        u = np.arange(n * m + 1)
        ref = stats.mannwhitneyu
        assert cdf[-1] == pytest.approx(1.0)
        # symmetric null distribution
        assert np.allclose(cdf[:-1], 1 - cdf[::-1][1:])
        x, y = np.arange(n, dtype=float), np.arange(m, dtype=float) + 0.5
        p = ref(x, y, method="exact", alternative="less").pvalue
        assert cdf[int((x[:, None] > y[None, :]).sum())] == pytest.approx(p)
        assert u.size == cdf.size


def test_judge_matches_the_batch_rule_and_is_deterministic():
    rng = np.random.default_rng(31)
    base = 1 + 0.03 * rng.normal(size=(50, 7))
    new = (1 + 0.03 * rng.normal(size=(50, 7))) * 0.97
    res = vd.decide_batch(base, new, kind="throughput")
    for i in range(50):
        v = judge(base[i], new[i], higher_is_better=True, kind="throughput")
        assert v.outcome == ("unchanged", "changed", "undecided")[res.outcome[i]]
        assert v.p_value == res.p_value[i]
        assert v == judge(base[i], new[i], higher_is_better=True, kind="throughput")


def test_per_run_value_is_the_mean_of_each_run():
    assert vd.per_run({7: [1.0, 3.0], 2: [10.0], 9: []}) == [10.0, 2.0]


def _bh_reference(p):
    """The hand-written Benjamini-Hochberg that scipy's false_discovery_control replaced."""
    arr = np.asarray(p, dtype=float)
    m = arr.size
    order = np.argsort(arr, kind="stable")
    ranked = np.minimum.accumulate((arr[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(ranked, 1.0)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=40))
def test_bh_adjust_matches_the_hand_written_version(p):
    # p-values scaled to the total alpha may exceed 1; scipy rejects those, bh_adjust clips
    assert vd.bh_adjust(p) == pytest.approx(_bh_reference(p), rel=1e-12, abs=0)


def test_bh_adjust_nan_counts_as_no_evidence():
    q = vd.bh_adjust([0.001, float("nan"), 0.002])
    assert list(q) == pytest.approx([0.003, 1.0, 0.003])
