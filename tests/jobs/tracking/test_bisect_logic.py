"""Bisect logic against a simulated, noisy benchmark (the real-kernel bisect is exercised by
the nightly end-to-end test)."""

from __future__ import annotations

import math

import numpy as np

from stackbench.jobs.tracking.bisect import bisect
from stackbench.resultsdb.verdict import DEFAULT


class Simulated:
    """Throughput 1000 with 2% noise; commits from ``bad_from`` on lose ``drop``; commits in
    ``broken`` cannot be built. Stored runs are reused when more are asked for."""

    def __init__(self, commits, bad_from, drop=0.2, broken=(), seed=1):
        self.commits = list(commits)
        self.bad_from = bad_from
        self.drop = drop
        self.broken = set(broken)
        self.rng = np.random.default_rng(seed)
        self.runs: dict[str, list[float]] = {}
        self.builds: set[str] = set()

    def measure(self, commit, runs):
        if commit in self.broken:
            self.builds.add(commit)
            return None
        have = self.runs.setdefault(commit, [])
        self.builds.add(commit)
        idx = self.commits.index(commit)
        mean = 1000 * (1 - self.drop) if idx >= self.bad_from else 1000
        while len(have) < runs:
            have.append(float(self.rng.normal(mean, 20)))
        return list(have)

    def built(self):
        return len(self.builds)


def test_finds_planted_regression_within_log2_plus_two_kernels():
    commits = [f"c{i}" for i in range(7)]  # c0 is the good kernel
    sim = Simulated(commits, bad_from=4, broken={"c2"})
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    assert res.state == "found" and res.culprit == "c4" and res.parent == "c3"
    assert res.confidence is not None and res.confidence > 0.99
    n = len(commits) - 1
    # good and bad were built by the nightly run; the steps may add ceil(log2(n)) + 2 more
    assert res.kernels_built - 2 <= math.ceil(math.log2(n)) + 2
    assert all(s.verdict in ("good", "bad", "skip") for s in res.steps)


def test_build_failure_is_skip_never_bad():
    commits = [f"c{i}" for i in range(9)]
    sim = Simulated(commits, bad_from=6, broken={"c3", "c4"})
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    skipped = [s for s in res.steps if s.commit in ("c3", "c4")]
    assert all(s.verdict == "skip" for s in skipped)
    assert skipped and res.culprit == "c6"


def test_skips_that_hide_the_answer_make_it_inconclusive_with_candidates():
    commits = [f"c{i}" for i in range(6)]
    sim = Simulated(commits, bad_from=3, broken={"c2"})
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    # c2 cannot be judged, so c2 or c3 introduced the drop
    assert res.state == "inconclusive" and res.culprit is None
    assert res.candidates == ["c2", "c3"]


def test_lower_is_better_latency_regression():
    commits = [f"c{i}" for i in range(5)]
    sim = Simulated(commits, bad_from=2, drop=-0.5)  # latency rises by half: worse
    res = bisect(sim, commits[1:], "c0", higher_is_better=False, kind="throughput")
    assert res.state == "found" and res.culprit == "c2"


def test_no_regression_at_all_is_not_blamed_on_the_last_commit():
    commits = [f"c{i}" for i in range(5)]
    sim = Simulated(commits, bad_from=99)
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    assert res.state == "inconclusive" and res.culprit is None


class Recording(Simulated):
    """Simulated, remembering every list of values it handed out."""

    def __init__(self, *args, fluke=None, fluke_runs=0, **kw):
        super().__init__(*args, **kw)
        self.handed: list[tuple[str, list[float]]] = []
        self.fluke = fluke  # this commit's first ``fluke_runs`` runs are 30% low
        self.fluke_runs = fluke_runs

    def measure(self, commit, runs):
        values = super().measure(commit, runs)
        if values is not None and commit == self.fluke:
            values = [v * 0.7 if i < self.fluke_runs else v for i, v in enumerate(values)]
        if values is not None:
            self.handed.append((commit, list(values)))
        return values


def _confirm_values(sim: Recording, res, commit: str) -> list[float]:
    """The values of ``commit`` in its last measurement that its bisect step had not seen."""
    before = max(s.runs for s in res.steps if s.commit == commit)
    mine = [v for c, v in sim.handed if c == commit]
    return mine[-1][before:]


def test_confirmation_uses_fresh_runs_and_reports_the_verdicts_confidence():
    from stackbench.resultsdb.verdict import DEFAULT, judge

    commits = [f"c{i}" for i in range(7)]
    sim = Recording(commits, bad_from=4, drop=0.04, seed=3)
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    assert res.state == "found" and res.culprit == "c4"
    parent, culprit = _confirm_values(sim, res, "c3"), _confirm_values(sim, res, "c4")
    # fresh: at least the first look's worth, none of which a step had seen
    assert len(parent) == len(culprit) >= DEFAULT.start_runs
    v = judge(parent, culprit, higher_is_better=True, kind="throughput")
    assert v.label == "worse"
    pol = DEFAULT
    assert res.confidence == 1 - min(1.0, v.p_value * pol.alpha / pol.look_alpha(len(culprit)))


def test_a_fluke_step_is_refuted_by_fresh_runs_and_the_range_stays_open():
    # c2's first runs (the ones its step judged) are a fluke; the real drop is at c4
    commits = [f"c{i}" for i in range(6)]
    sim = Recording(commits, bad_from=4, drop=0.3, fluke="c2", fluke_runs=5)
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    assert [s.commit for s in res.steps if s.verdict == "bad"][:1] == ["c2"]
    assert res.state == "inconclusive" and res.culprit is None
    assert "c4" in res.candidates and res.candidates != ["c2"]
    assert "fresh runs do not confirm c2" in res.message


class RefusesAgain(Simulated):
    """Measures each commit once; asked for more runs later, ``dead`` no longer boots."""

    def __init__(self, *args, dead, **kw):
        super().__init__(*args, **kw)
        self.dead = dead
        self.asked: dict[str, int] = {}

    def measure(self, commit, runs):
        first = self.asked.setdefault(commit, runs)
        if commit == self.dead and runs > first:
            return None
        return super().measure(commit, runs)


def test_a_culprit_that_cannot_be_measured_again_is_not_confirmed():
    commits = [f"c{i}" for i in range(5)]
    sim = RefusesAgain(commits, bad_from=2, dead="c2")
    # from 5 boots the steps decide at their first look (3 boots spend almost no alpha), so
    # only the confirmation asks c2 for more
    pol = DEFAULT.starting_at(5)
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput", policy=pol)
    assert res.state == "inconclusive" and res.culprit is None and res.confidence is None
    assert res.candidates == ["c2"]  # the steps found it; only the confirmation is missing
    assert res.message == "the culprit or its parent cannot be measured again"


class SideBySide(Simulated):
    """A measurer that can boot kernels side by side: records what it was asked to pair."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.paired: list[tuple[tuple[str, ...], int]] = []

    def together(self, commits, runs):
        self.paired.append((tuple(commits), runs))


def test_each_step_measures_the_commit_beside_the_good_kernel():
    commits = [f"c{i}" for i in range(7)]
    sim = SideBySide(commits, bad_from=4)
    res = bisect(sim, commits[1:], "c0", higher_is_better=True, kind="throughput")
    assert res.culprit == "c4"
    # every classified step asked first for its commit and the good one in shared rounds
    assert {p[0] for p in sim.paired} == {(s.commit, "c0") for s in res.steps}
    assert all(runs >= 1 for _, runs in sim.paired)
