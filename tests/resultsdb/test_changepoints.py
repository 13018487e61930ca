"""Change points of a nightly history (results-db/changepoints.py over Apache Otava): a step is
found and dated, a spike is not a step, and a shift alerts once however many nights follow."""

from __future__ import annotations

import numpy as np
import pytest

from stackbench.resultsdb import changepoints as cp


def history(rng, levels, boots=5, cov=0.01):
    return [list(level * (1 + cov * rng.standard_normal(boots))) for level in levels]


def test_a_step_is_dated_to_its_first_night_with_both_levels():
    rng = np.random.default_rng(1)
    nights = history(rng, [1000.0] * 20 + [950.0] * 6)
    (s,) = cp.shifts(nights, higher_is_better=True)
    assert s.night == 20 and s.direction == "worse"
    assert abs(s.before - 1000) < 5 and abs(s.after - 950) < 5
    assert -6 < s.change_pct < -4
    segs = cp.segments(nights, [s])
    assert [(g.start, g.stop) for g in segs] == [(0, 20), (20, 26)]
    # the same numbers where lower is better: an improvement
    (b,) = cp.shifts(nights, higher_is_better=False)
    assert b.direction == "better"


def test_a_spike_is_no_level_until_three_nights_agree():
    rng = np.random.default_rng(2)
    flat = [1000.0] * 20
    assert cp.shifts(history(rng, [*flat, 900.0]), True) == []
    assert cp.shifts(history(rng, [*flat, 900.0, 900.0]), True) == []
    # a spike followed by nights at the old level drags a short segment's mean, not its median
    assert cp.shifts(history(rng, [*flat, 850.0, 1000.0, 1000.0, 1000.0]), True) == []
    assert [s.night for s in cp.shifts(history(rng, [*flat, 900.0, 900.0, 900.0]), True)] == [20]


def alerts(nights, alerted=None):
    """The rule night by night, as the nightly and the bench run it: (raised, last date)."""
    alerted, raised = list(alerted or []), []
    for n in range(1, len(nights) + 1):
        alerted, new = cp.follow(cp.shifts(nights[:n], True), alerted)
        for s in new:
            alerted.append(s.night)
            raised.append(n - 1)
    return list(zip(raised, alerted, strict=False))


def test_a_shift_alerts_once_and_the_nights_after_it_never_again():
    rng = np.random.default_rng(3)
    nights = history(rng, [1000.0] * 15 + [940.0] * 25)
    assert alerts(nights) == [(17, 15)]  # raised on the third night at the new level


def test_a_small_shift_below_the_floor_is_no_change_point():
    rng = np.random.default_rng(4)
    nights = history(rng, [1000.0] * 20 + [992.0] * 20, cov=0.002)
    assert cp.shifts(nights, True) == []  # -0.8%: significant, but below the 3% floor
    # -2.5%: above the verdict's 2% floor, but a run offset can make that much over three
    # nights (bench/changepoints.md), so it is left to the first look
    nights = history(rng, [1000.0] * 20 + [975.0] * 20, cov=0.002)
    assert cp.shifts(nights, True) == []
    nights = history(rng, [1000.0] * 20 + [965.0] * 20, cov=0.002)
    assert [s.night for s in cp.shifts(nights, True)] == [20]


def test_nights_without_boots_are_skipped_and_keep_their_place():
    rng = np.random.default_rng(5)
    nights = history(rng, [1000.0] * 10 + [900.0] * 4)
    nights[3] = []
    nights[11] = [float("nan")]
    (s,) = cp.shifts(nights, True)
    assert s.night == 10
    assert cp.night_means(nights)[3] is None


def test_an_alert_dated_early_is_not_raised_again_when_its_step_is_dated_right():
    """The re-fire of the audit: the first alert dated a step nights early, the step's
    change point later moved to its real night. The alert claims it and follows it."""
    rng = np.random.default_rng(3)
    nights = history(rng, [1000.0] * 20 + [950.0] * 10)
    (step,) = cp.shifts(nights, True)
    assert step.night == 20
    assert cp.unclaimed([step], []) == [step]  # nobody alerted it: new
    dates, new = cp.follow([step], [14])  # alerted six nights early
    assert new == [] and dates == [20]  # the alert's date is refined, nothing re-fires
    # too far to be that alert's step (beyond max_move): a step of its own
    assert cp.unclaimed([step], [20 - cp.DEFAULT_RULE.max_move - 1]) == [step]

    # two alerts, two steps: each claims the nearest, so a second step still alerts once
    def at(night):
        return cp.Shift(night, 1000.0, 960.0, -4.0, 1e-5, "worse")

    first, second = at(20), at(27)
    assert cp.follow([first, second], [18]) == ([20], [second])
    assert cp.follow([first, second], [20, 27]) == ([20, 27], [])
    # a better shift is no alert's
    better = cp.Shift(21, 960.0, 1000.0, 4.0, 1e-5, "better")
    assert cp.claimed([better], [20]) == {}
    # and in a whole history: the early alert is carried, the step never alerts again
    assert alerts(nights, alerted=[14]) == []


def test_a_merged_segment_is_tested_again_not_kept_at_otavas_p():
    """Otava's p of a change point is of the segments it saw before the short one between
    them was merged; the rule tests each change point again against what it separates."""
    from otava.analysis import compute_change_points

    rng = np.random.default_rng(13)
    # two nights up, then three down: Otava sees 1060 -> 965 at night 14 (p ~ 1e-5); merged,
    # the two nights up widen the old level and 3 nights do not tell it from 965 yet
    nights = history(rng, [1000.0] * 12 + [1060.0] * 2 + [965.0] * 3)
    means = cp.night_means(nights, cp.DEFAULT_RULE.trim)
    rule = cp.DEFAULT_RULE
    otava, _ = compute_change_points(
        means, window_len=rule.window, max_pvalue=rule.max_pvalue, min_magnitude=0.03
    )
    assert [p.index for p in otava] == [12, 14] and otava[1].stats.pvalue < rule.max_pvalue
    assert cp.shifts(nights, True) == []
    # a step that stands carries the p of its two final segments, not Otava's
    rng = np.random.default_rng(6)
    nights = history(rng, [1000.0] * 20 + [880.0] * 2 + [955.0] * 20)
    (s,) = cp.shifts(nights, True)
    means = cp.night_means(nights, rule.trim)
    assert s.night == 20
    otava, _ = compute_change_points(
        means, window_len=rule.window, max_pvalue=rule.max_pvalue, min_magnitude=0.03
    )
    assert s.p_value > 1e6 * min(p.stats.pvalue for p in otava)


def test_on_independent_nights_the_p_is_students_t_of_the_two_sides():
    from scipy import stats

    rng = np.random.default_rng(1)
    nights = history(rng, [1000.0] * 20 + [950.0] * 6)
    (s,) = cp.shifts(nights, True)
    means = cp.night_means(nights, cp.DEFAULT_RULE.trim)
    assert s.p_value == pytest.approx(stats.ttest_ind(means[:20], means[20:]).pvalue)


def test_nights_that_lean_on_their_neighbours_weigh_less():
    """A host drifting slowly (AR(1), rho 0.9) makes neighbouring nights alike: the same
    nights in no order (same means, same spread) would make the shift far more certain."""
    rng = np.random.default_rng(8)
    drift = np.zeros(40)
    for n in range(1, 40):
        drift[n] = 0.9 * drift[n - 1] + 0.01 * rng.standard_normal()
    drift[20:] -= 0.04
    series = 1000.0 * (1 + drift)
    shuffled = np.concatenate([rng.permutation(series[:20]), rng.permutation(series[20:])])
    ((p_drift, _ok),) = cp._judge(series, [20], cp.DEFAULT_RULE)
    ((p_white, _ok),) = cp._judge(shuffled, [20], cp.DEFAULT_RULE)
    assert p_drift > 100 * p_white


def test_zero_and_negative_levels():
    # from zero there is no relative change; a negative metric that drops got worse
    assert cp.shifts([[0.0] * 3] * 10 + [[1.0] * 3] * 5, True) == []
    (s,) = cp.shifts([[-5.0]] * 10 + [[-10.0]] * 5, True)
    assert s.direction == "worse" and s.change_pct == -100.0


def _drifting(seed: int, step: float = 0.0, at: int = 45):
    """60 nights of a head (5 boots) and of the machine's A/A (20 boots) on one host whose
    level drifts slowly (AR(1), rho 0.9, CoV 1.5%), each night a run of its own (CoV 1%)."""
    rng = np.random.default_rng(seed)
    drift = np.zeros(60)
    drift[0] = 0.015 * rng.standard_normal()
    for n in range(1, 60):
        drift[n] = 0.9 * drift[n - 1] + 0.015 * np.sqrt(0.19) * rng.standard_normal()

    def night(n: int, boots: int, moved: float) -> list[float]:
        run = 1 + 0.01 * rng.standard_normal()
        return list(1000 * (1 + drift[n]) * moved * run * (1 + 0.02 * rng.standard_normal(boots)))

    head = [night(n, 5, 1 - step if n >= at else 1.0) for n in range(60)]
    return head, [night(n, 20, 1.0) for n in range(60)]


def test_the_machines_aa_nights_measure_the_drift_the_cuts_hide():
    """Cut at the turns of a slow drift, the residuals look independent and the wander
    reads as two 3-4% levels (p 1e-9); the same nights' A/A of the baseline on the same
    host is step-free, so its covariance is the drift's, and with it the wander is none."""
    head, aa = _drifting(19)
    assert [s.night for s in cp.shifts(head, True)] == [25, 44]
    ref = cp.reference(aa, head)
    assert ref is not None and ref.cov[0] > 0.3 * ref.var  # neighbouring nights alike
    assert cp.shifts(head, True, ref=ref) == []
    # a 5% step on the same host still stands, dated to its night
    head, aa = _drifting(4, step=0.05)
    (s,) = cp.shifts(head, True, ref=cp.reference(aa, head))
    assert s.night == 45 and s.direction == "worse"


def test_independent_aa_nights_count_no_dependence():
    rng = np.random.default_rng(3)
    aa = history(rng, [1000.0] * 40, boots=20, cov=0.02)
    head = history(rng, [1000.0] * 40, boots=5, cov=0.02)
    ref = cp.reference(aa, head)
    assert ref is not None and not any(ref.cov)
    # a night's variance is the head's own boots' (5 a night, the lowest and highest
    # dropped), not the A/A's 20
    means = np.asarray(cp.night_means(head, cp.DEFAULT_RULE.trim)) / 1000
    assert 0.5 < ref.var / means.var(ddof=1) < 2
    assert cp.reference(aa[:5], head) is None  # too few A/A nights: the residuals' rule
