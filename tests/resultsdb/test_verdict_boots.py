"""Boots as the unit of the verdict: runs of one boot share its noise, the warm-up rule, and the
per-kind equivalence margins."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from stackbench.resultsdb import boots
from stackbench.resultsdb import verdict as vd


def _boots(rng, n_boots, per_boot, level=1000.0, boot_cov=0.02, run_cov=0.01, warmup=0.0):
    out = {}
    for b in range(n_boots):
        offset = level * (1 + boot_cov * rng.normal())
        runs = offset * (1 + run_cov * rng.normal(size=per_boot))
        runs[0] *= 1 - warmup
        out[f"boot-{b}"] = runs.tolist()
    return out


def test_runs_of_few_boots_are_not_independent_samples():
    # two boots per kernel, ten tight runs each: the boots differ by 2-4%, the kernels not
    base = {"b1": [1000 + 0.1 * i for i in range(10)], "b2": [1020 + 0.1 * i for i in range(10)]}
    new = {"n1": [1040 + 0.1 * i for i in range(10)], "n2": [1060 + 0.1 * i for i in range(10)]}
    flat = vd.judge(
        [x for v in base.values() for x in v], [x for v in new.values() for x in v],
        higher_is_better=True, kind="throughput",
    )  # fmt: skip
    assert flat.label == "better"  # what judging runs as samples said
    v = vd.judge(base, new, higher_is_better=True, kind="throughput")
    assert v.outcome == "undecided"
    assert (v.n_base, v.n_new, v.runs_base, v.runs_new) == (2, 2, 20, 20)
    assert v.runs_wanted == 3  # boots per side at the first look


def test_a_a_with_boot_noise_keeps_false_positives_rare():
    # the model: boot offset CoV 2% on top of 1% run noise, 5 runs per boot
    rng = np.random.default_rng(11)
    boot_calls = flat_calls = 0
    trials = 300
    for _ in range(trials):
        base, new = _boots(rng, 5, 5), _boots(rng, 5, 5)
        v = vd.judge(base, new, higher_is_better=True, kind="throughput")
        boot_calls += v.outcome == "changed"
        flat = vd.judge(
            [x for r in base.values() for x in r], [x for r in new.values() for x in r],
            higher_is_better=True, kind="throughput",
        )  # fmt: skip
        flat_calls += flat.outcome == "changed"
    assert boot_calls <= 3  # at most 1%
    assert flat_calls >= 15  # the old unit: at least 5% false "changed"


def test_one_boot_per_side_asks_for_boots_not_runs():
    v = vd.judge({"a": [1.0, 1.1, 0.9]}, {"b": [2.0, 2.1, 1.9]}, higher_is_better=True)
    assert v.outcome == "undecided" and v.test == "one boot per side"
    assert v.direction == "none" and v.runs_wanted == vd.DEFAULT.start_runs
    assert vd.judge({"a": [1.0]}, {"b": [2.0]}, higher_is_better=True).outcome == "n/a"


def test_a_slow_first_run_of_every_boot_is_dropped():
    rng = np.random.default_rng(3)
    base = _boots(rng, 5, 5, warmup=0.10)
    new = _boots(rng, 5, 5, level=1100.0, warmup=0.10)
    v = vd.judge(base, new, higher_is_better=True, kind="throughput")
    assert v.warmup_dropped
    later = [np.mean(r[1:]) for r in base.values()], [np.mean(r[1:]) for r in new.values()]
    expect = 100 * (np.mean(later[1]) / np.mean(later[0]) - 1)
    assert v.change_pct == pytest.approx(expect)
    assert v.runs_base == 25  # dropped runs are still counted as measured


def test_first_runs_like_the_others_are_kept():
    rng = np.random.default_rng(4)
    base, new = _boots(rng, 6, 5), _boots(rng, 6, 5)
    v = vd.judge(base, new, higher_is_better=True, kind="throughput")
    assert not v.warmup_dropped
    means = [np.mean(r) for r in base.values()], [np.mean(r) for r in new.values()]
    assert v.change_pct == pytest.approx(100 * (np.mean(means[1]) / np.mean(means[0]) - 1))


def test_warmup_needs_enough_boots_and_is_decided_on_both_sides_together():
    slow_first = [np.array([900.0, 1000.0, 1001.0]) for _ in range(3)]
    assert not boots.warmup_detected(slow_first)  # 3 boots: too few to tell
    assert boots.warmup_detected(slow_first + [np.array([905.0, 1000.0, 999.0])])
    # single-run boots carry no contrast at all
    assert not boots.warmup_detected([np.array([1.0])] * 10)
    # the decision is the same whichever side the boots are on
    rng = np.random.default_rng(5)
    a, b = _boots(rng, 3, 4, warmup=0.05), _boots(rng, 3, 4, warmup=0.05)
    assert boots.units(a, b)[4] == boots.units(b, a)[4] is True


def test_boot_key_prefers_the_column_then_meta_then_the_run():
    assert boots.boot_key(SimpleNamespace(id=7, boot_id="b-1", meta={"boot_id": "x"})) == "b-1"
    assert boots.boot_key(SimpleNamespace(id=7, meta={"boot_id": "x"})) == "x"
    assert boots.boot_key(SimpleNamespace(id=7, boot_id=None, meta={})) == ("run", 7)


def test_per_boot_groups_runs_in_run_order():
    values = {3: [2.0, 4.0], 1: [1.0], 2: [5.0], 4: [float("nan")]}
    grouped = boots.per_boot(values, {1: "a", 3: "a", 2: "b"})
    assert grouped == {"a": [1.0, 3.0], "b": [5.0]}
    assert boots.per_boot({1: [1.0], 2: [2.0]}) == {("run", 1): [1.0], ("run", 2): [2.0]}


@pytest.mark.parametrize("kind", ["throughput", "latency", "duration", "count", "percent", ""])
def test_equivalence_margin_is_the_minimum_effect(kind):
    # "~" may hide nothing that "changed" would report
    assert vd.DEFAULT.equivalence_margin(kind) == vd.DEFAULT.effect_floor(kind)
    wide = vd.Policy(min_effect={"": 0.07})
    assert wide.equivalence_margin(kind) == wide.effect_floor(kind)


def test_a_three_percent_change_is_not_hidden_behind_the_margin_once_it_is_significant():
    rng = np.random.default_rng(8)
    base = rng.normal(1000, 5, 20).tolist()
    new = rng.normal(970, 5, 20).tolist()
    v = vd.judge(base, new, higher_is_better=True, kind="throughput")
    assert v.label == "worse"


def test_unchanged_needs_the_decisions_interval_inside_the_minimum_effect():
    rng = np.random.default_rng(9)
    quiet = noisy = 0
    for _ in range(100):
        v = vd.judge(
            _boots(rng, 5, 1, boot_cov=0.002, run_cov=0), _boots(rng, 5, 1, boot_cov=0.002, run_cov=0),
            higher_is_better=True, kind="throughput",
        )  # fmt: skip
        quiet += v.outcome == "unchanged"
        w = vd.judge(
            _boots(rng, 5, 1, boot_cov=0.02), _boots(rng, 5, 1, boot_cov=0.02),
            higher_is_better=True, kind="throughput",
        )  # fmt: skip
        # a 2% boot CoV cannot show at 5 boots that a 2% change is absent: never "~"
        noisy += w.outcome == "unchanged"
    assert quiet >= 80 and noisy == 0
