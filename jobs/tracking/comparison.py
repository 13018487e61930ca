"""A nightly's or a bisect's kernels measured the way a series' are: one comparison of a base
and the kernels judged against it, driven by :class:`stackbench.jobs.driver.journey.Journey`
through the executor of a :class:`Lab` (this machine under QEMU, or a Buildbot master whose
workers of the machine kind share the rounds).

A comparison is stored as a series of its own (``source`` ``nightly``, ``bisect`` or
``aa``): its base and kernels are commits of the tree (nothing to ``git am``), its plan is the
series' plan (jobs, runs, cap), and its rounds, batches and tries are the attempt rows every
series has. The journey moves its state through the lifecycle like any series' (the one
writer of ``series.state``); the caller drives it in the foreground, so the dispatcher leaves
it alone and no report mail is queued for it. Its verdicts are the series report's
(:func:`pair_verdicts`: ``tables.verdict.compare``, each pair through ``blocks.pair``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine

from stackbench import proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.driver import lifecycle
from stackbench.jobs.driver.buildbot_executor import BuildbotExecutor
from stackbench.jobs.driver.journey import UNDER_WAY, Executor, Journey
from stackbench.jobs.driver.local_executor import LocalExecutor
from stackbench.jobs.executors.series_state import SeriesRun
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import trees
from stackbench.resultsdb import db, kernels_store, query, series_runs_store, series_store
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.series_q import COMPARISONS
from stackbench.resultsdb.tables.verdict import compare
from stackbench.resultsdb.verdict import DEFAULT, Policy, Verdict

# how long a comparison waits for a Buildbot master that does not take it (down, restarting)
HAND_OVER_WAIT_S = 600.0


class Lab(Protocol):
    """Where a nightly's or a bisect's commits come from and what measures them."""

    settings: Settings
    # runs of each sub-job per boot: the verdict's unit is the boot, so more runs in one boot
    # buy little (its offset is shared); two let the warm-up rule compare a boot's first run
    # with the next one
    runs_per_boot: int
    poll_s: float  # between two looks at an executor that works on its own (a master)

    def resolve(self, tree: str, ref: str) -> str:
        """The full sha of ``ref`` in the tree's repository (NotFoundError when unknown)."""
        ...

    def commits(self, tree: str, good: str, bad: str) -> list[str]:
        """The commits after ``good`` up to ``bad`` (included), oldest first."""
        ...

    def subject(self, tree: str, commit: str) -> str:
        """The commit's subject line."""
        ...

    def executor(self, eng: Engine, series_id: int) -> Executor:
        """The journey's executor for comparison ``series_id``."""
        ...


@dataclass
class GitTrees:
    """The commits of a tree's repository (kernels/trees)."""

    def repo(self, tree: str) -> Path:
        return trees.ensure_repo(trees.load_tree(tree))

    def resolve(self, tree: str, ref: str) -> str:
        return trees.resolve(self.repo(tree), ref)

    def commits(self, tree: str, good: str, bad: str) -> list[str]:
        return rev_list(self.repo(tree), good, bad)

    def subject(self, tree: str, commit: str) -> str:
        return commit_subject(self.repo(tree), commit)


@dataclass
class ThisMachine(GitTrees):
    """This machine under QEMU: the local executor, each step done at once."""

    settings: Settings = field(default_factory=Settings)
    runs_per_boot: int = 2
    poll_s: float = 0.0

    def executor(self, eng: Engine, series_id: int) -> Executor:
        return LocalExecutor(SeriesRun(series_id, self.settings, None))


@dataclass
class BuildbotLab(GitTrees):
    """A Buildbot master: its workers of the machine kind build the kernels and share the
    rounds, as they do a series'."""

    master: Any = None
    settings: Settings = field(default_factory=Settings)
    runs_per_boot: int = 2
    poll_s: float = 1.0

    def executor(self, eng: Engine, series_id: int) -> Executor:
        ex = BuildbotExecutor(self.master)
        # the comparison's caller drives it: an attempt of the dispatcher's executor would
        # be driven by the dispatcher too
        ex.name = series_runs_store.FOREGROUND
        return ex


def lab_for(settings: Settings, buildbot: bool) -> Lab:
    """This machine, or (``buildbot``) the Buildbot master series go to, whose workers share
    the comparisons' rounds. Not the master by default: the scheduled nightly is itself a
    build holding its worker's machine lock, which its own rounds would wait for."""
    from stackbench.jobs.driver.dispatch import configured_master

    if not buildbot:
        return ThisMachine(settings=settings)
    master = configured_master()
    if master is None:
        raise InputError("--buildbot", "no Buildbot master is configured or running here")
    return BuildbotLab(master=master, settings=settings)


@dataclass
class Measured:
    """A comparison after its journey: its series, how it ended, each commit's build (None:
    it does not build) and how many kernels it built (reuses do not count)."""

    series_id: int
    state: str
    builds: dict[str, int | None]
    built: int = 0


def measure(
    eng: Engine,
    lab: Lab,
    *,
    tree: str,
    kernels: list[str],
    jobs: list[str],
    boots: int,
    cap: int | None = None,
    policy: Policy | None = None,
    source: str = "nightly",
    title: str = "",
) -> Measured:
    """Measure ``kernels`` (commits, the base first) with ``jobs`` in ``boots`` rounds, then
    in more rounds while a headline metric is undecided, up to ``cap`` boots per kernel (no
    cap or ``cap <= boots``: the first rounds only). A commit whose build failed before is
    not built again; without a buildable base nothing is measured."""
    if source not in COMPARISONS:
        raise ValueError(f"a comparison's source is one of {COMPARISONS}, not {source!r}")
    kernels = list(dict.fromkeys(kernels))
    config = lab.settings.config
    builds: dict[str, int | None] = {}
    with db.session(eng) as s:
        for c in kernels:
            if kernels_store.failed_build(s, c, config) is not None:
                builds[c] = None
        before = {c for c in kernels if kernels_store.latest_configured_build(s, c) is not None}
    todo = [c for c in kernels if c not in builds]
    if not todo or todo[0] != kernels[0]:
        return Measured(0, "failed", {c: _build_of(eng, c) for c in kernels})
    adaptive = cap is not None and cap > boots
    with db.session(eng) as s:
        series, _new = series_store.add_series(
            s,
            title=title or f"{source}: {len(todo)} kernel(s) of {tree}",
            tree_id=ig.tree_id(s.connection(), tree),
            base_ref=todo[0],
            base_commit=todo[0],
            source=source,
            patches=[
                {"idx": i, "total": len(todo) - 1, "commit_sha": c,
                 "subject": lab.subject(tree, c), "state": "applied"}
                for i, c in enumerate(todo[1:], 1)
            ],
        )  # fmt: skip
        sid = series.id
        series_runs_store.begin(
            s, sid, source=source, executor=series_runs_store.FOREGROUND,
            jobs=list(jobs), runs=boots * lab.runs_per_boot,
            max_boots=cap if adaptive else boots, adaptive=adaptive,
        )  # fmt: skip
    lifecycle.set_state(eng, sid, "applied", "commits of the tree: nothing to apply")
    journey = Journey(
        eng, sid, lab.executor(eng, sid), settings=lab.settings, boots=boots, policy=policy
    )
    state = drive(journey, lab.poll_s)
    for c in todo:
        builds[c] = _build_of(eng, c)
    with db.session(eng) as s:
        built = sum(
            1 for c in todo if c not in before and kernels_store.latest_configured_build(s, c)
        )
    return Measured(sid, state, builds, built)


def drive(journey: Journey, poll_s: float) -> str:
    """The journey from hand-over to its end, looking again every ``poll_s`` while its
    executor works (the local one does each step at once)."""
    waited = 0.0
    while not journey.start():
        if waited >= HAND_OVER_WAIT_S:
            raise StackbenchError(
                f"series {journey.sid}: the executor did not take it in {waited:.0f} s"
            )
        time.sleep(max(poll_s, 1.0))
        waited += max(poll_s, 1.0)
    state = journey.advance()
    while state in UNDER_WAY:
        if poll_s:
            time.sleep(poll_s)
        state = journey.advance()
    return state


def _build_of(eng: Engine, commit: str) -> int | None:
    with db.session(eng) as s:
        row = kernels_store.latest_configured_build(s, commit)
        return row.id if row is not None and row.status == "built" else None


def pair_verdicts(
    eng: Engine, series_id: int, base_id: int, new_id: int, job_id: int, policy: Policy = DEFAULT
) -> dict[str, Verdict]:
    """Every metric's verdict of build ``new_id`` against ``base_id`` for one job, as the
    series report of the comparison judges it (its kernels, on the machine of its latest
    boot)."""
    from stackbench.resultsdb.models import KernelBuild

    with db.session(eng) as s:
        rows = [s.get(KernelBuild, b) for b in (base_id, new_id)]
        kernels = [query.Kernel(b.id, b.commit, b.name, b.config_name, b.compiler) for b in rows]
        machine = series_store.latest_machine(s, series_id)
        ds = query.load(s.connection(), kernels, machine=machine)
    for job, kernel, metrics in compare(ds, policy):
        if job.id == job_id and kernel.id == new_id:
            return {name: v for name, _b, _n, v in metrics}
    return {}


def rev_list(repo: Path, good: str, bad: str) -> list[str]:
    """First-parent commits after ``good`` up to ``bad``, oldest first."""
    anc = proc.run(["git", "-C", repo, "merge-base", "--is-ancestor", good, bad], check=False)
    if anc.returncode != 0:
        raise InputError(f"{repo.name}", f"{good[:12]} is not an ancestor of {bad[:12]}")
    out = proc.run(
        ["git", "-C", repo, "rev-list", "--reverse", "--first-parent", f"{good}..{bad}"]
    ).stdout
    return out.split()


def commit_subject(repo: Path, commit: str) -> str:
    res = proc.run(["git", "-C", repo, "log", "-1", "--format=%s", commit], check=False)
    return res.stdout.strip()
