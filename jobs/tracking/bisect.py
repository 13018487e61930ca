"""Noise-aware bisection of a performance regression.

A step is a commit whose metric is measured as often as the verdict needs: compared with the
known-good kernel's runs, a step that is *worse* (by stackbench's verdict) is bad, one that is
unchanged is good; a commit that does not build or boot, or stays undecided at the run cap,
is skipped, never called bad. A step still undecided against the good kernel is also
judged against the known-bad one: equivalent to it is bad, clearly better than it and nearer
the good kernel is good (host load drifts over a bisect's minutes, so a commit may sit outside
both ends' noise bands yet plainly on one side). The first bad commit is then confirmed against its parent with
fresh runs (none a step has seen), and the result carries a confidence, 1 - p times the
policy's looks (Bonferroni, as the rule spends alpha); when skips hide the answer, or fresh
runs refute the culprit, the result is inconclusive and lists the candidates.

Measuring is injected (:class:`Measurer`) so the same logic runs against real kernels (the
pipeline builds, boots and runs the job, reusing stored builds and runs) and in unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from stackbench.resultsdb.verdict import DEFAULT, Policy, Verdict, judge

StepVerdict = Literal["good", "bad", "skip"]


# one commit's values: one per run (every run its own boot) or {boot: per-run values}, boots
# in the order they ran
Values = list[float] | dict[str, list[float]]


class Measurer(Protocol):
    def measure(self, commit: str, runs: int) -> Values | None:
        """At least ``runs`` units (boots; runs when every run is its own boot) of the
        metric on ``commit`` (stored ones count), or None when the commit cannot be measured
        (build or boot failure)."""

    def built(self) -> int:
        """How many kernels had to be built so far (reused builds do not count)."""

    # optional: ``together(commits, runs)`` brings every commit to ``runs`` units in shared
    # rounds of boots before they are measured one by one (see _Seen.together)


@dataclass
class Step:
    commit: str
    verdict: StepVerdict
    runs: int
    change_pct: float | None = None
    reason: str = ""

    def as_dict(self) -> dict:
        return {
            "commit": self.commit,
            "verdict": self.verdict,
            "runs": self.runs,
            "change_pct": self.change_pct,
            "reason": self.reason,
        }


@dataclass
class BisectResult:
    state: Literal["found", "inconclusive", "failed"]
    culprit: str | None
    parent: str | None
    confidence: float | None
    steps: list[Step] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    kernels_built: int = 0
    message: str = ""


def _mean(values: Values) -> float:
    """The mean of the units (boot means, or runs)."""
    if isinstance(values, dict):
        units = [sum(v) / len(v) for v in values.values() if v]
    else:
        units = list(values)
    return sum(units) / len(units)


def _after(values: Values, before: int) -> Values:
    """The units after the first ``before`` (boots keep the order they ran in)."""
    if isinstance(values, dict):
        return dict(list(values.items())[before:])
    return values[before:]


class _Seen:
    """The measurer, remembering how many values of each commit a step has seen, so the
    confirmation can ask for runs no step has used."""

    def __init__(self, m: Measurer) -> None:
        self.m = m
        self.seen: dict[str, int] = {}

    def measure(self, commit: str, runs: int) -> Values | None:
        values = self.m.measure(commit, runs)
        if values is not None:
            self.seen[commit] = max(self.seen.get(commit, 0), len(values))
        return values

    def together(self, commits: list[str], runs: int) -> None:
        """Let a measurer that boots kernels measure ``commits`` side by side (interleaved
        rounds) before each is read; one without ``together`` measures them one by one."""
        hook = getattr(self.m, "together", None)
        if hook is not None:
            hook(commits, runs)

    def mark(self, commit: str) -> int | None:
        """How many units of ``commit`` exist before the confirmation: those a step has
        seen, and runs stored before the bisection (the nightly's, which opened the
        regression). None when it cannot be measured."""
        before = self.seen.get(commit)
        if before is None:
            stored = self.m.measure(commit, 0)
            if stored is None:
                return None
            before = len(stored)
        return before

    def fresh(self, commit: str, before: int, runs: int) -> Values | None:
        """``runs`` units of ``commit`` after its first ``before`` (None: fewer than 2)."""
        values = self.m.measure(commit, before + runs)
        if values is None or len(values) - before < 2:
            return None
        self.seen[commit] = max(self.seen.get(commit, 0), len(values))
        return _after(values, before)

    def built(self) -> int:
        return self.m.built()


def classify(
    m: Measurer,
    good: str,
    commit: str,
    *,
    higher_is_better: bool | None,
    kind: str = "",
    policy: Policy = DEFAULT,
    bad: str | None = None,
) -> Step:
    """Measure ``commit`` and the good kernel at the policy's looks (the same number of runs
    on both sides) until the verdict against the good kernel is decided or capped.

    When it stays undecided at a look and the known-bad kernel ``bad`` is given, the commit
    is also judged against ``bad`` (same rule, same runs): equivalent to the bad kernel is
    bad; significantly better than it (by at least the minimum effect) while nearer to the
    good kernel is good. Runs drift with the host's load over the minutes a bisect takes, so
    a commit can be far from both ends' noise bands yet plainly on one side."""
    runs = policy.start_runs
    while True:
        together = getattr(m, "together", None)
        if together is not None:
            together([commit, good], runs)
        values = m.measure(commit, runs)
        ref = m.measure(good, runs) if values is not None else None
        if values is None or ref is None:
            return Step(commit, "skip", 0, reason="does not build or boot")
        n = len(values)
        v = judge(ref, values, higher_is_better=higher_is_better, kind=kind, policy=policy)
        if v.outcome == "changed" and v.direction == "worse":
            return Step(commit, "bad", n, v.change_pct)
        if v.outcome == "unchanged" or (v.outcome == "changed" and v.direction == "better"):
            return Step(commit, "good", n, v.change_pct)
        side = _against_bad(m, bad, values, ref, runs, higher_is_better, kind, policy)
        if side is not None:
            return Step(commit, side[0], n, v.change_pct, reason=side[1])
        if not v.runs_wanted or v.runs_wanted <= n or v.runs_wanted <= runs:
            # capped, or the measurer gave fewer runs than asked and asking again won't help
            return Step(commit, "skip", n, v.change_pct, reason=f"{v.outcome} at {n} boots")
        runs = v.runs_wanted


def _against_bad(
    m: Measurer,
    bad: str | None,
    values: Values,
    good_ref: Values,
    runs: int,
    higher_is_better: bool | None,
    kind: str,
    policy: Policy,
) -> tuple[StepVerdict, str] | None:
    if bad is None or higher_is_better is None:
        return None
    bad_ref = m.measure(bad, runs)
    if bad_ref is None or len(bad_ref) < 2:
        return None
    vb = judge(bad_ref, values, higher_is_better=higher_is_better, kind=kind, policy=policy)
    pct = f" ({vb.change_pct:+.1f}%)" if vb.change_pct is not None else ""
    if vb.outcome == "unchanged":
        return "bad", f"undecided against good, equivalent to bad{pct}"
    mean = _mean(values)
    nearer_good = abs(mean - _mean(good_ref)) < abs(mean - _mean(bad_ref))
    if vb.outcome == "changed" and vb.direction == "better" and nearer_good:
        return "good", f"undecided against good, better than bad{pct}"
    return None


def bisect(
    m: Measurer,
    commits: Sequence[str],
    good: str,
    *,
    higher_is_better: bool | None,
    kind: str = "",
    policy: Policy = DEFAULT,
    on_step: Callable[[Step], None] | None = None,
) -> BisectResult:
    """Find the first bad commit in ``commits`` (oldest first, the last one known bad) after
    the known-good ``good``. ``on_step`` sees each step as soon as it is classified."""
    if not commits:
        return BisectResult("failed", None, None, None, message="no commits between good and bad")
    sm = _Seen(m)
    if sm.measure(good, policy.start_runs) is None:
        return BisectResult(
            "failed", None, None, None, message=f"good commit {good} cannot be measured"
        )
    steps: list[Step] = []
    lo, hi = -1, len(commits) - 1  # commits[lo] good (-1: the good commit), commits[hi] bad
    skipped: set[int] = set()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        order = sorted(
            (i for i in range(lo + 1, hi) if i not in skipped), key=lambda i: (abs(i - mid), i)
        )
        if not order:
            break
        idx = order[0]
        step = classify(
            sm,
            good,
            commits[idx],
            higher_is_better=higher_is_better,
            kind=kind,
            policy=policy,
            bad=commits[-1],
        )
        steps.append(step)
        if on_step is not None:
            on_step(step)
        if step.verdict == "bad":
            hi = idx
        elif step.verdict == "good":
            lo = idx
        else:
            skipped.add(idx)
    candidates = [commits[i] for i in range(lo + 1, hi + 1)]
    parent = good if hi == 0 else commits[hi - 1]
    if len(candidates) > 1:
        return BisectResult(
            "inconclusive",
            None,
            None,
            None,
            steps,
            candidates,
            sm.built(),
            f"{len(candidates)} candidates: skipped commits hide the first bad one",
        )
    culprit = commits[hi]
    confirmed = _confirm(sm, parent, culprit, higher_is_better, kind, policy)
    confidence = None
    state: Literal["found", "inconclusive"] = "found"
    message = ""
    if confirmed is None:
        state, message = "inconclusive", "the culprit or its parent cannot be measured again"
    else:
        v = confirmed
        if v.outcome == "changed" and v.direction == "worse":
            # q is p on the scale of the total alpha (the look spent its share of it): the
            # confidence every view of the pair implies
            confidence = 1.0 - (v.q_value if v.q_value is not None else 1.0)
        else:
            state = "inconclusive"
            message = (
                f"fresh runs do not confirm {culprit[:12]} against its parent "
                f"({v.label}): the steps that pointed at it are in doubt, so every commit "
                "of the range is a candidate"
            )
            candidates = list(commits)
    return BisectResult(
        state,
        culprit if state == "found" else None,
        parent,
        confidence,
        steps,
        candidates if state != "found" else [culprit],
        sm.built(),
        message,
    )


def _confirm(
    sm: _Seen,
    parent: str,
    culprit: str,
    higher_is_better: bool | None,
    kind: str,
    policy: Policy,
) -> Verdict | None:
    """The culprit against its own parent on fresh units only (the ones that made the
    steps' verdicts would just repeat them), at the policy's looks from its first to the
    cap; None when either cannot be measured again."""
    marks = {c: sm.mark(c) for c in (parent, culprit)}
    if None in marks.values():
        return None
    n = policy.start_runs
    while True:
        ref = sm.fresh(parent, marks[parent] or 0, n)
        new = sm.fresh(culprit, marks[culprit] or 0, n) if ref is not None else None
        if ref is None or new is None:
            return None
        v = judge(ref, new, higher_is_better=higher_is_better, kind=kind, policy=policy)
        have = min(len(ref), len(new))
        if v.outcome != "undecided" or not v.runs_wanted or v.runs_wanted <= have:
            return v
        n = v.runs_wanted
