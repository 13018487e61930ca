"""Bisect on real kernels: the Measurer that builds, boots and runs, and the stored records.

Where commits come from and what measures them is a :class:`stackbench.jobs.tracking.comparison.Lab`:
a step is measured against its good kernel as a comparison of its own, driven like a
series' through the journey and its executor (this machine, or a Buildbot master whose
workers share the rounds). Everything measured is stored, and every step first looks at what
is stored: a kernel built earlier (artifact store) is not built again, a commit that failed
to build is not tried again, and boots already in the database count toward the number a
verdict asks for. Tests that are not about kernels plug in a lab whose executor ingests
synthetic runs; the reading side (this module's queries) is the same for both.

Records: one ``bisect`` row per bisection (steps as they happen, culprit, confidence, kernels
built) and, when it bisects a regression, the regression's state and culprit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError
from stackbench.jobs.executors import jobspecs
from stackbench.jobs.executors.settings import Settings
from stackbench.jobs.tracking import bisect as logic
from stackbench.jobs.tracking import comparison
from stackbench.jobs.tracking.bisect import BisectResult, Step
from stackbench.jobs.tracking.comparison import Lab
from stackbench.resultsdb import (
    db,
    jobs_q,
    kernels_q,
    kernels_store,
    regressions_q,
    regressions_store,
    trees_q,
)
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.buildruns import (
    coarse_clock,
    direction,
    done_boots,
    metric_row,
    per_boot_values,
)

# nightly reads these through this module; kept as names of it while nightly is reworked
from stackbench.resultsdb.buildruns import metrics_of as metrics_of
from stackbench.resultsdb.verdict import DEFAULT, Policy

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


# ---- stored data ----------------------------------------------------------------------------


def failed_build(eng: Engine, commit: str, config: str) -> kernels_store.KernelBuild | None:
    """A stored build failure of ``commit`` with ``config`` (so it is not built again)."""
    with db.session(eng) as s:
        return kernels_store.failed_build(s, commit, config)


def job_spec_strings(job: str) -> list[tuple[str, ig.JobSpec]]:
    """Sub-jobs of a job spec (``vm-scalability[test=anon-w-seq]``): (name, identity)."""
    plan = jobspecs.plan_for(jobspecs.resolve_jobs([job], 1), Settings())
    return [(sj.name, sj.job_spec()) for sj in plan]


def job_ids(eng: Engine, job: str) -> list[int]:
    """The job rows of a job spec's sub-jobs (created when missing: no run stored yet)."""
    with db.session(eng) as s:
        return [ig.job_id(s.connection(), spec) for _name, spec in job_spec_strings(job)]


def spec_of(job: jobs_q.Job) -> str:
    """The job spec that reproduces a stored job: ``suite[k=v,...]``."""
    return spec_for(job.suite, job.params or {})


def spec_for(suite: str, params: dict[str, Any]) -> str:
    return jobspecs.format_job_spec(suite, params)


# ---- the measurer ---------------------------------------------------------------------------


class StoredMeasurer:
    """bisect.Measurer over a lab: values of one metric of one sub-job, per boot.

    ``measure(commit, boots)`` brings the commit to ``boots`` boots with stored runs (built
    or reused, then booted as a comparison of its own) and returns {boot: per-run values};
    None when the commit does not build, or its runs keep failing (boot failure, crash): a
    skip, never a bad commit. ``together`` measures a step and its good kernel in the same
    rounds."""

    def __init__(
        self,
        eng: Engine,
        lab: Lab,
        *,
        tree: str,
        job: str,
        job_id: int,
        metric_id: int,
        progress: Progress | None = None,
        latency: bool = False,
    ) -> None:
        self.eng, self.lab, self.tree = eng, lab, tree
        self.job, self.job_id, self.metric_id = job, job_id, metric_id
        self.progress = progress
        # a latency timed on a coarse clock moves with the clock, not the kernel
        self.latency = latency
        # a commit's build: its id, None when it does not build (absent: not known yet)
        self.builds: dict[str, int | None] = {}
        self.boots = 0
        self._built = 0  # kernels built by this bisection only

    def build_id(self, commit: str) -> int | None:
        """The commit's stored build (None: not built yet, or it does not build)."""
        if commit in self.builds:
            return self.builds[commit]
        with db.session(self.eng) as s:
            if kernels_store.failed_build(s, commit, self.lab.settings.config) is not None:
                self.builds[commit] = None
                return None
            row = kernels_store.latest_configured_build(s, commit)
        if row is not None and row.status == "built":
            self.builds[commit] = row.id
            return row.id
        return None

    def _broken(self, commit: str) -> bool:
        return self.build_id(commit) is None and commit in self.builds

    def _boots(self, commit: str) -> int:
        bid = self.build_id(commit)
        return 0 if bid is None else done_boots(self.eng, bid, self.job_id)

    def _compare(self, commits: list[str], boots: int) -> None:
        """``boots`` more rounds of ``commits`` (the first the comparison's base)."""
        m = comparison.measure(
            self.eng, self.lab, tree=self.tree, kernels=commits, jobs=[self.job], boots=boots,
            source="bisect", title=f"bisect {self.job}: " + " ".join(c[:12] for c in commits),
        )  # fmt: skip
        self.builds.update(m.builds)
        self._built += m.built
        self.boots += boots * sum(1 for c in commits if m.builds.get(c) is not None)

    def together(self, commits: list[str], runs: int) -> None:
        """Top the commits that build up to ``runs`` boots in shared, shuffled rounds, the
        good kernel (the last) as the comparison's base."""
        ids = [c for c in reversed(commits) if not self._broken(c)]
        if len(ids) < 2:
            return  # one kernel: measure() tops it up alone
        short = max(runs - self._boots(c) for c in ids)
        if short <= 0:
            return
        self._say(f"run {len(ids)} kernels side by side: up to {runs} boots each of {self.job}")
        self._compare(ids, short)

    def measure(self, commit: str, runs: int) -> dict[str, list[float]] | None:
        if self._broken(commit):
            return None
        bid = self.build_id(commit)
        values = per_boot_values(self.eng, bid, self.job_id, self.metric_id) if bid else {}
        for _attempt in range(2):  # one retry when some runs were lost or failed
            if len(values) >= runs:
                break
            want = runs - len(values)
            self._say(f"run {commit[:12]}: {want} more boot(s) of {self.job}")
            self._compare([commit], want)
            bid = self.build_id(commit)
            if bid is None:
                return None
            values = per_boot_values(self.eng, bid, self.job_id, self.metric_id)
        if bid is not None and self.latency and (why := coarse_clock(self.eng, bid, self.job_id)):
            self._say(f"{commit[:12]}: latencies timed with a {why}: cannot be judged")
            return None
        # fewer: the kernel boots but the job does not finish on it, so it cannot be judged
        return values if len(values) >= runs else None

    def built(self) -> int:
        return self._built

    def _say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


# ---- one bisection, recorded -----------------------------------------------------------------


@dataclass
class BisectRun:
    bisect_id: int
    result: BisectResult
    commits: list[str]


def run_bisect(
    eng: Engine,
    lab: Lab,
    *,
    tree: str,
    good: str,
    bad: str,
    job: str,
    metric: str,
    policy: Policy = DEFAULT,
    regression_id: int | None = None,
    progress: Progress | None = None,
) -> BisectRun:
    """Bisect the ``metric`` of ``job`` between ``good`` and ``bad`` and record it.

    ``job`` must expand to one sub-job (the one the metric comes from)."""
    good, bad = lab.resolve(tree, good), lab.resolve(tree, bad)
    subjobs = job_spec_strings(job)
    if len(subjobs) != 1:
        names = ", ".join(n for n, _ in subjobs)
        raise InputError(f"job {job!r}", f"expands to {len(subjobs)} sub-jobs ({names}); pick one")
    if direction(eng, metric) is None:
        raise InputError(
            f"metric {metric!r}", "has no better direction, so no commit can make it worse"
        )
    commits = lab.commits(tree, good, bad)
    (jid,) = job_ids(eng, job)
    met = metric_row(eng, metric)
    tree_id = _tree_id(eng, tree)
    with db.session(eng) as s:
        bid = regressions_store.add_bisect(
            s, regression_id=regression_id, tree_id=tree_id, good=good, bad=bad, job_id=jid,
            metric_id=met.id, state="running", steps=[],
            meta={"job": job, "metric": metric, "commits": commits, "policy": _policy_meta(policy)},
        ).id  # fmt: skip
        if regression_id is not None:
            reg = regressions_q.get(s, regression_id)
            if reg is not None:
                regressions_store.update(reg, state="bisecting")
    m = _RecordingMeasurer(
        eng, lab, bid, tree=tree, job=job, job_id=jid, metric_id=met.id, progress=progress,
        latency=met.kind == "latency",
    )  # fmt: skip
    started = time.monotonic()
    try:
        res = logic.bisect(
            m, commits, good, higher_is_better=met.higher_is_better, kind=met.kind, policy=policy,
            on_step=m.on_step,
        )  # fmt: skip
    except BaseException as exc:
        _finish(eng, bid, regression_id, None, f"bisect stopped: {exc}", time.monotonic() - started)
        raise
    _finish(eng, bid, regression_id, res, res.message, time.monotonic() - started, m)
    return BisectRun(bid, res, commits)


class _RecordingMeasurer(StoredMeasurer):
    """Writes each step into the bisect row as soon as it is decided (the web shows progress)."""

    def __init__(self, eng: Engine, lab: Lab, bisect_id: int, **kw: Any) -> None:
        super().__init__(eng, lab, **kw)
        self.bisect_id = bisect_id

    def on_step(self, step: Step) -> None:
        with db.session(self.eng) as s:
            row = regressions_store.bisect(s, self.bisect_id)
            regressions_store.update(
                row,
                steps=[*(row.steps or []), _step_dict(self.eng, step, self.builds)],
                kernels_built=self.built(),
            )
        if self.progress:
            pct = f" {step.change_pct:+.1f}%" if step.change_pct is not None else ""
            why = f" ({step.reason})" if step.reason else ""
            self.progress(f"step {step.commit[:12]}: {step.verdict}{pct}{why}, {step.runs} boots")


def _step_dict(eng: Engine, step: Step, builds: dict[str, int | None]) -> dict[str, Any]:
    d = step.as_dict()
    d["build_id"] = builds.get(step.commit)
    return d


def _policy_meta(p: Policy) -> dict[str, Any]:
    return {"start_runs": p.start_runs, "max_runs": p.max_runs, "looks": list(p.looks)}


def _tree_id(eng: Engine, tree: str) -> int | None:
    with db.session(eng) as s:
        return ig.tree_id(s.connection(), tree)


def _finish(
    eng: Engine,
    bisect_id: int,
    regression_id: int | None,
    res: BisectResult | None,
    message: str,
    seconds: float,
    m: StoredMeasurer | None = None,
) -> None:
    with db.session(eng) as s:
        row = regressions_store.bisect(s, bisect_id)
        meta = {**(row.meta or {}), "message": message, "seconds": round(seconds, 1)}
        if res is None:
            regressions_store.update(row, finished_at=datetime.now(UTC), state="failed")
        else:
            meta.update(parent=res.parent, candidates=res.candidates)
            if m is not None:
                meta["boots"] = m.boots
            regressions_store.update(
                row,
                finished_at=datetime.now(UTC),
                state=res.state,
                culprit=res.culprit,
                confidence=res.confidence,
                kernels_built=res.kernels_built,
                steps=[_step_dict(eng, st, m.builds if m else {}) for st in res.steps],
            )
        regressions_store.update(row, meta=meta)
        if regression_id is None:
            return
        reg = regressions_q.get(s, regression_id)
        if reg is None:
            return
        if res is not None and res.state == "found":
            regressions_store.update(reg, state="bisected", culprit=res.culprit)
            regressions_store.merge_meta(
                reg, bisect_id=bisect_id, culprit_confidence=res.confidence
            )
        else:
            regressions_store.update(reg, state="inconclusive")
            regressions_store.merge_meta(
                reg, bisect_id=bisect_id, candidates=res.candidates if res else []
            )


def bisect_regression(
    eng: Engine,
    lab: Lab,
    regression_id: int,
    *,
    policy: Policy = DEFAULT,
    progress: Progress | None = None,
) -> BisectRun:
    """Bisect a stored regression between its good and bad kernels."""
    with db.session(eng) as s:
        reg = regressions_q.get(s, regression_id)
        if reg is None:
            raise NotFoundError(f"no regression {regression_id}")
        good = kernels_q.get(s, reg.good_build_id).commit
        bad = kernels_q.get(s, reg.bad_build_id).commit
        job = spec_of(jobs_q.get(s, reg.job_id))
        metric = jobs_q.metric(s, reg.metric_id).name
        tree = reg.meta.get("tree") or _tree_name(s, reg.tree_id)
    return run_bisect(
        eng, lab, tree=tree, good=good, bad=bad, job=job, metric=metric, policy=policy,
        regression_id=regression_id, progress=progress,
    )  # fmt: skip


def _tree_name(s: Session, tree_id: int | None) -> str:
    row = trees_q.get(s, tree_id) if tree_id else None
    if row is None:
        raise NotFoundError("the regression has no tree to bisect in")
    return row.name
