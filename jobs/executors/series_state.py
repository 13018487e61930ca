"""What one in-process execution of a series carries along (its kernels, settings,
progress, timings) and its ``event`` rows; the series' state itself has one writer,
:func:`stackbench.jobs.driver.lifecycle.set_state`.

States: new -> applying -> applied -> building -> running -> done, or apply-failed (nothing
is built), or failed (a kernel failed to build, crashed or hung; or the pipeline broke)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from stackbench.jobs.executors.progress import Eta, ProgressEvent, ProgressFn
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import build as kbuild
from stackbench.kernels import trees
from stackbench.resultsdb import series_store, trees_q


def event(s: Session, series_id: int | None, subject: str, state: str, message: str) -> None:
    series_store.add_event(s, series_id, subject, state, message[:4000])


def register_tree(s: Session, tree: trees.TreeDef) -> trees_q.Tree:
    """The tree's row as its YAML definition says (created or updated)."""
    row = trees_q.save_tree(s, tree.name, url=tree.url, default_base=tree.default_base)
    s.flush()  # callers use the row's id
    return row


@dataclass
class KernelTask:
    label: str  # "base" or "1/3"
    name: str  # what tables show
    commit: str
    patch_id: int | None = None
    build: kbuild.BuildResult | None = None
    build_id: int | None = None
    error: str = ""
    outcome: str = ""  # built | build-failed | ok | crashed | timeout | error
    # a job's kernel config fragment: this commit built with it merged over the series'
    # config (its own build, kernel row and runs); "" for the series' own kernel
    fragment: str = ""

    @property
    def key(self) -> str:
        """The task's identity in the plan (a commit, or a commit with a job's fragment)."""
        return f"{self.commit}+{self.fragment}" if self.fragment else self.commit

    def config(self, base: str) -> str:
        """The config name this task builds with, over the series' ``base`` config."""
        from stackbench.kernels.config import compose

        return compose(base, self.fragment)

    def runs_subjob(self, sj: Any) -> bool:
        """Whether a sub-job runs on this task's kernel (its fragment is this task's)."""
        return (sj.setup.kconfig or "") == self.fragment


@dataclass
class SeriesRun:
    series_id: int | None  # None: a comparison of no series (a nightly night, a bisect step)
    settings: Settings
    progress: ProgressFn | None
    eta: Eta = field(default_factory=Eta)
    boots_done: int = 0
    # seconds per stage, kept in series.meta["timings"] (bench/pipeline_bench.py reads them)
    timings: dict[str, Any] = field(
        default_factory=lambda: {
            "apply_s": 0.0,
            "builds": [],
            "vm_s": 0.0,
            "guest_runs_s": 0.0,
            "initramfs_s": 0.0,
            "ingest_s": 0.0,
        }
    )

    def emit(self, stage: str, step: int, total: int, label: str, message: str = "") -> None:
        if self.progress is None:
            return
        ev = ProgressEvent(
            stage=stage,
            step=step,
            total=total,
            label=label,
            message=message,
            elapsed_s=self.eta.elapsed(),
            eta_s=self.eta.remaining() if stage not in ("done", "failed") else None,
        )
        self.progress(ev)
