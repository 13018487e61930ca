"""Kernels of a nightly night or a bisect step, measured on this machine the way a series'
kernels are, with the local executor's two primitives: built by the build stage
(:func:`build_stage.build_kernel`, which writes the ``kernel_build`` row) and booted, one boot
of a plan's rounds at a time, by the boot stage (:func:`boot_stage.boot_and_store`, which
stores the runs).

:class:`LocalLab` is the real side of :class:`stackbench.jobs.tracking.bisect_runner.Lab`: the rounds
themselves (which kernels, how many boots, in what shuffled order) are laid out by
:func:`bisect_runner.top_up_rounds` with :mod:`stackbench.jobs.executors.plan`, as the driver lays out
a series'."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy import Engine

from stackbench import proc
from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.jobs.executors import plan as boot_plan
from stackbench.jobs.executors.boot_stage import boot_and_store
from stackbench.jobs.executors.build_stage import build_kernel
from stackbench.jobs.executors.jobspecs import plan_for, resolve_jobs
from stackbench.jobs.executors.plan import Boot
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
from stackbench.jobs.executors.settings import Settings
from stackbench.jobs.tracking.bisect_runner import failed_build
from stackbench.kernels import trees
from stackbench.resultsdb import db, kernels_q


@dataclass
class LocalLab:
    """Nightly and bisect kernels under QEMU on this machine, through the pipeline's stages."""

    settings: Settings = field(default_factory=Settings)
    # runs per boot: the verdict's unit is the boot, so more runs in one boot buy little
    # (its offset is shared); two let the warm-up rule compare a boot's first run with the
    # next one
    runs_per_boot: int = 2
    seconds: dict[str, float] = field(default_factory=lambda: {"build": 0.0, "run": 0.0})
    _built: set[str] = field(default_factory=set)
    _tasks: dict[int, KernelTask] = field(default_factory=dict)

    @property
    def built(self) -> int:
        """Kernels built (or attempted) so far; reuses of a stored artifact do not count."""
        return len(self._built)

    def repo(self, tree: str) -> Path:
        return trees.ensure_repo(trees.load_tree(tree))

    def resolve(self, tree: str, ref: str) -> str:
        return trees.resolve(self.repo(tree), ref)

    def commits(self, tree: str, good: str, bad: str) -> list[str]:
        return rev_list(self.repo(tree), good, bad)

    def subject(self, tree: str, commit: str) -> str:
        return commit_subject(self.repo(tree), commit)

    def build(self, eng: Engine, tree: str, commit: str) -> int | None:
        """The kernel_build id of ``commit``, built or reused; None when it does not build
        (a failure stored earlier is not tried again)."""
        commit = self.resolve(tree, commit)
        if failed_build(eng, commit, self.settings.config) is not None:
            return None
        t = self._build(eng, tree, commit, self.settings.config)
        if t.build is None or not t.build.reused:
            self._built.add(commit)
        return t.build_id if t.outcome == "built" else None

    def run(
        self, eng: Engine, tree: str, build_id: int, job: str, runs: int, boot: Boot | None = None
    ) -> None:
        """Boot the kernel once with ``runs`` runs of the job spec ``job`` and store them, as
        ``boot`` of a plan when given."""
        t = self._task(eng, tree, build_id)
        subjobs = plan_for(resolve_jobs([job], runs), self.settings)
        if boot is None:
            tag = f"lab-{build_id}-{time.time_ns()}"
            boot = boot_plan.make_plan([t.key], runs, boots=1, tag=tag).rounds[0][0]
        # every run of the sub-jobs in this one boot (the plan counts boots, not runs)
        one = replace(boot, index=0, boots=1)
        started = time.monotonic()
        try:
            boot_and_store(eng, SeriesRun(None, self.settings, None), t, subjobs, one, 1,
                           source="nightly")  # fmt: skip
        finally:
            self.seconds["run"] += time.monotonic() - started

    def _build(self, eng: Engine, tree: str, commit: str, config: str) -> KernelTask:
        tdef = trees.load_tree(tree)
        repo = trees.ensure_repo(tdef)
        t = KernelTask(label="", name=commit[:12], commit=commit)
        started = time.monotonic()
        try:
            build_kernel(
                eng, repo, tdef, t, config=config, make_jobs=self.settings.make_jobs,
                meta={"subject": commit_subject(repo, commit)},
            )  # fmt: skip
        finally:
            self.seconds["build"] += time.monotonic() - started
        if t.outcome == "built" and t.build_id is not None:
            self._tasks[t.build_id] = t
        return t

    def _task(self, eng: Engine, tree: str, build_id: int) -> KernelTask:
        """The built kernel of ``build_id`` (one stored by an earlier night: its artifact is
        reused, or built again when it is gone)."""
        if build_id in self._tasks:
            return self._tasks[build_id]
        with db.session(eng) as s:
            row = kernels_q.get(s, build_id)
            if row is None:
                raise NotFoundError(f"no kernel build {build_id}")
            commit, config = row.commit, row.config_name or self.settings.config
        t = self._build(eng, tree, commit, config)
        if t.outcome != "built" or t.build_id != build_id:
            raise StackbenchError(
                f"kernel build {build_id} ({commit[:12]}) cannot be booted again: "
                + (t.error or f"its artifact is now build {t.build_id}")
            )
        return t


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
