"""This machine as an executor: kernels built by the build stage
(:func:`build_stage.build_kernel`, the writer of ``kernel_build`` rows) and booted under QEMU,
one boot of a plan's rounds at a time, by the boot stage (:func:`boot_stage.boot_and_store`,
which stores the runs).

:class:`LocalExecutor` is the adapter :class:`stackbench.jobs.driver.journey.Journey` drives a
series through on this machine (each step done at once), a nightly's or a bisect's
comparison too (:mod:`stackbench.jobs.tracking.comparison`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackbench.jobs.driver.apply_stage import apply_stage
from stackbench.jobs.driver.journey import Batch, Journey, Kernel, Progress
from stackbench.jobs.executors import coverage_stage
from stackbench.jobs.executors import plan as boot_plan
from stackbench.jobs.executors.boot_stage import boot_and_store, boot_estimate
from stackbench.jobs.executors.build_stage import build_estimate, build_one
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
from stackbench.kernels import trees
from stackbench.resultsdb import db, series_runs_store, series_store

# outcomes of a kernel that may be booted again (one that crashed or hung is not)
BOOTABLE = ("built", "ok", "runs-failed")


@dataclass
class LocalExecutor:
    """A series' kernels built and booted here, each step at once (see the module)."""

    sr: SeriesRun
    name: str = series_runs_store.FOREGROUND
    tasks: list[KernelTask] = field(default_factory=list)
    repo: Path | None = None
    tree: trees.TreeDef | None = None
    boots_ended: int = 0

    def hand_over(self, journey: Journey) -> dict[str, Any] | None:
        """Apply the series here (None: it did not apply, its state says so). An attempt
        that already planned rounds (a dispatcher stopped mid-run) is superseded by a new
        one, whose boot ids are new, so nothing stored is taken for this run's."""
        with db.session(journey.eng) as s:
            series = series_store.get(s, journey.sid)
            tree_name = series.tree.name if series.tree else "linux-6.1"
            base_ref = series.base_ref
            now = series_runs_store.current(s, journey.sid)
            if now is None or now.ended is not None or now.batches:
                series_runs_store.begin(s, journey.sid, source=self.name, executor=self.name)
        self.tree = trees.load_tree(tree_name)
        self.repo = trees.ensure_repo(self.tree)
        tasks = apply_stage(journey.eng, self.sr, self.repo, self.tree, base_ref)
        if tasks is None:
            return None
        self.tasks = with_fragments(tasks, journey.subjobs)
        return {"message": f"building {len(self.tasks)} kernels"}

    def runs(self, journey: Journey) -> int:
        return max(sj.runs for sj in journey.subjobs)

    def build(self, journey: Journey) -> None:
        sr, settings, subjobs = self.sr, journey.settings, journey.subjobs
        assert self.repo is not None and self.tree is not None
        most_runs = max(sj.runs for sj in subjobs)
        n_boots = boot_plan.boots_for(most_runs, journey.boots)
        for t in self.tasks:
            config = t.config(settings.config)
            sr.eta.plan(f"build:{t.key}", build_estimate(self.tree, settings, t.commit, config))
            mine = [sj for sj in subjobs if t.runs_subjob(sj)]
            for rnd in range(1, n_boots + 1):
                share = boot_plan.split_runs(most_runs, n_boots)[rnd - 1]
                sr.eta.plan(f"boot:{t.key}:{rnd}", boot_estimate(mine, share / most_runs))
        for i, t in enumerate(self.tasks, 1):
            sr.emit("build", i, len(self.tasks), t.name)
            started = time.monotonic()
            build_one(journey.eng, sr, self.repo, self.tree, t)
            spent = time.monotonic() - started
            sr.eta.finish(f"build:{t.key}", spent)
            sr.timings["builds"].append(
                {
                    "kernel": t.name,
                    "commit": t.commit,
                    "seconds": round(spent, 2),
                    "make_seconds": round(t.build.duration_s, 2) if t.build else None,
                    "reused": bool(t.build and t.build.reused),
                    "outcome": t.outcome,
                }
            )
            how = "reused" if t.build and t.build.reused else f"{spent:.0f}s"
            sr.emit("build", i, len(self.tasks), t.name, f"{t.outcome} ({how})")
        for t in self.tasks:
            if t.outcome != "built":
                for rnd in range(1, n_boots + 1):
                    sr.eta.finish(f"boot:{t.key}:{rnd}", 0.0)

    def progress(self, journey: Journey) -> Progress:
        return Progress(
            kernels=len(self.tasks),
            built=[Kernel(t.key, t.commit) for t in self.tasks if t.outcome in BOOTABLE],
            builds_ended=sum(1 for t in self.tasks if t.outcome),
            boots_ended=self.boots_ended,
            busy=False,
            failing=any(t.outcome not in ("built", "ok") for t in self.tasks),
        )

    def failures(self, journey: Journey) -> list[str]:
        return [
            f"{t.name}: {t.outcome}" + (f" ({t.error})" if t.error else "")
            for t in self.tasks
            if t.outcome != "ok"
        ]

    def abandon(self, journey: Journey) -> None:
        """Nothing: this executor's work is done in the caller's process, never held."""

    def boot(self, journey: Journey, batch: Batch, handed: Callable[..., None]) -> bool:
        """Every boot of the batch in its rounds' order; a round that ran whole here is
        recorded done on the machine its boots ran on."""
        eng, sr, sid = journey.eng, self.sr, journey.sid
        # more rounds: the sub-jobs in doubt, as many runs per boot as the first rounds had
        subjobs = journey.subjobs if batch.more is None else batch.more.plan(journey.subjobs)
        if batch.more is not None:
            sr.emit("more", batch.more.have, batch.more.cap, f"series {sid}", batch.why)
        order = batch.plan.boots_in_order()
        for boot in order:  # rounds added after the first plan were not in the ETA yet
            if f"boot:{boot.kernel}:{boot.index + 1}" not in sr.eta.pending:
                sr.eta.plan(f"boot:{boot.kernel}:{boot.round}",
                            boot_estimate(subjobs, 1 / batch.plan.boots))  # fmt: skip
        handed()
        by_key = {t.key: t for t in self.tasks}
        last_of_round = {b.round: i for i, b in enumerate(order)}
        for i, boot in enumerate(order):
            t = by_key[boot.kernel]
            unit = f"boot:{t.key}:{boot.index + 1}"
            if unit not in sr.eta.pending:
                unit = f"boot:{t.key}:{boot.round}"
            if t.outcome in BOOTABLE:
                started = time.monotonic()
                boot_and_store(eng, sr, t, subjobs, boot, len(order))
                sr.eta.finish(unit, time.monotonic() - started)
            else:
                sr.eta.finish(unit, 0.0)  # a kernel that crashed or hung is not booted again
            self.boots_ended += 1
            if last_of_round[boot.round] == i:
                with db.session(eng) as s:
                    attempt = series_runs_store.current(s, sid)
                    worker = series_store.latest_machine(s, sid) or ""
                    series_runs_store.record_round(s, attempt, boot.round, None, worker, "done")
        if batch.more is None and coverage_stage.enabled():
            # once, after the first rounds: the counts do not depend on how many rounds follow
            coverage_stage.evidence_boots(eng, sr, self.repo, self.tasks, subjobs)
        return True


def with_fragments(tasks: list[KernelTask], subjobs: list[Any]) -> list[KernelTask]:
    """The series' kernels, and for every kernel config fragment a job asks for
    (``kconfig=NAME``) each commit again built with it: those jobs run on those kernels
    only, and kernels without a job left to run are dropped."""
    fragments = sorted({sj.setup.kconfig for sj in subjobs if sj.setup.kconfig})
    out = [t for t in tasks if any(t.runs_subjob(sj) for sj in subjobs)]
    for frag in fragments:
        out += [
            KernelTask(
                label=f"{t.label}+{frag}",
                name=f"{t.name}+{frag}",
                commit=t.commit,
                patch_id=t.patch_id,
                fragment=frag,
            )
            for t in tasks
        ]
    return out
