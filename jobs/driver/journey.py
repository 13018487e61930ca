"""The one driver of a comparison's journey: plan -> build every kernel -> rounds of boots ->
ingest -> adaptive looks -> done / failed.

:class:`Journey` decides every step of a series' comparison from what is stored (the
attempt, its batches of rounds, the kernels' builds and the runs) and from what its
executor says of the work it holds. An executor is an adapter with a small interface
(:class:`Executor`): take the series, build its kernels, boot a batch of rounds, say how far
it got and why something failed. Two exist:

- :class:`stackbench.jobs.driver.local_executor.LocalExecutor`, this machine under QEMU (``stackbench
  demo --in-process``, ``submit``, the dispatcher without a master, the tests); it does each
  step at once, so its journey is a loop of :meth:`Journey.advance`;
- :class:`stackbench.jobs.driver.buildbot_executor.BuildbotExecutor`, a Buildbot master whose
  workers (QEMU hosts and bare-metal boxes alike, ``jobs/executors/box.py``) build and boot; the
  dispatcher calls :meth:`Journey.advance` each time the master's reporter says a build
  started or ended.

A nightly's head against its baseline and a bisect's step against its good kernel are
comparisons of their own, driven the same way on either executor
(:mod:`stackbench.jobs.tracking.comparison`). Why rounds and how the verdict reads them:
docs/verdict.md.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import NotFoundError
from stackbench.jobs.driver import lifecycle
from stackbench.jobs.executors import plan as boot_plan
from stackbench.jobs.executors.jobspecs import plan_for, resolve_jobs
from stackbench.jobs.executors.settings import DEFAULT_JOBS, DEFAULT_RUNS, Settings
from stackbench.resultsdb import db, kernels_store, series_runs_store, series_store

# what advance() leaves a series in while its executor still works on it
UNDER_WAY = ("applied", "building", "running")
STUCK_STEP = "stuck-request"  # the host_fault step of a series handed over again


@dataclass(frozen=True)
class Kernel:
    """A kernel of the comparison in its executor's plan: ``key`` names it in the rounds (a
    commit, or a commit with a job's config fragment)."""

    key: str
    commit: str


@dataclass(frozen=True)
class Batch:
    """Rounds of boots handed to the executor at once: the plan (every kernel once per round,
    shuffled), why, and the adaptive look that asked for them (``adaptive.MoreRounds``, whose
    sub-jobs are the ones re-measured; None for the first rounds: every sub-job)."""

    key: str
    plan: boot_plan.Plan
    why: str
    more: Any = None


@dataclass
class Progress:
    """What the executor says of the work it holds."""

    kernels: int  # kernels of the comparison
    built: list[Kernel]  # built and bootable, in the series' order (base first)
    builds_ended: int  # builds that ended, built or not
    boots_ended: int  # boots of the plan that ended (stored, crashed or hung)
    busy: bool  # builds or boots still queued or running
    failing: bool = False  # something already failed: no more rounds
    lost: list[str] | None = None  # workers lost mid-build, for the page
    # work the executor holds that will never run (a build request claimed at the master
    # with no build): the series is handed over again, its page says why
    stuck: list[str] | None = None


class Executor(Protocol):
    """What builds and boots a comparison's kernels (see the module's docstring)."""

    name: str  # recorded on the attempt: in-process, buildbot, foreground

    def hand_over(self, journey: Journey) -> dict[str, Any] | None:
        """Take the series (attempt columns to record), or None: not now (say why)."""
        ...

    def runs(self, journey: Journey) -> int:
        """Runs per kernel the first rounds spread over their boots (the job specs as this
        executor reads them: a master's workers know job definitions this host may not)."""
        ...

    def build(self, journey: Journey) -> None:
        """Build every kernel of the comparison (or have it built)."""
        ...

    def boot(self, journey: Journey, batch: Batch, handed: Callable[..., None]) -> bool:
        """Boot the batch's rounds (or have them booted); ``handed(**columns)`` records the
        batch once the executor holds it (before a local boot, after a master took it).
        False: the batch holds nothing this executor can boot."""
        ...

    def progress(self, journey: Journey) -> Progress | None:
        """How far the work is, None when the executor cannot say now (try again later)."""
        ...

    def failures(self, journey: Journey) -> list[str]:
        """Every reason the comparison failed, each one line first (a log tail may follow)."""
        ...

    def abandon(self, journey: Journey) -> None:
        """Cancel what the executor still holds of the series (before a new hand-over)."""
        ...


def seed_of(key: str) -> int:
    """The shuffle's seed for a batch: fixed by its key, so a batch handed over again after
    a lost answer (or a restarted dispatcher) is the same batch."""
    return zlib.crc32(key.encode())


@dataclass
class Journey:
    """Series ``sid``'s comparison, driven through ``executor``. ``boots`` (boots per kernel
    of the first rounds) and ``seed`` (every batch's shuffles) override the plan's own;
    ``policy`` the verdict rule of the adaptive looks (default: stackbench's)."""

    eng: Engine
    sid: int
    executor: Executor
    settings: Settings = field(default_factory=Settings)
    boots: int | None = None
    seed: int | None = None
    policy: Any = None
    jobs: list[str] = field(init=False)
    runs: int = field(init=False)
    adaptive: bool = field(init=False)

    def __post_init__(self) -> None:
        """The plan is the series' attempt's (checked at the intake); what it leaves out,
        the defaults and ``settings``."""
        with db.session(self.eng) as s:
            if series_store.get(s, self.sid) is None:
                raise NotFoundError(f"no series {self.sid}")
            plan = series_runs_store.current(s, self.sid)
        asked = {k: getattr(plan, k, None) for k in series_runs_store.PLAN}
        self.runs = int(asked["runs"] or DEFAULT_RUNS)
        self.jobs = list(asked["jobs"] or DEFAULT_JOBS)
        self.adaptive = self.settings.adaptive and asked["adaptive"] is not False
        guest = {k: asked[k] for k in ("cpus", "mem_mb", "accel") if asked[k] is not None}
        if guest:
            self.settings = replace(self.settings, **guest)

    @cached_property
    def subjobs(self) -> list[Any]:
        """The series' sub-jobs with their runs per kernel (the job specs resolved here, for
        an executor that boots here)."""
        return plan_for(resolve_jobs(self.jobs, self.runs), self.settings)

    # -- the steps

    def start(self) -> bool:
        """Hand the series to the executor and have its kernels built; False when the
        executor cannot take it now (the series keeps its state)."""
        columns = self.executor.hand_over(self)
        if columns is None:
            return False
        message = columns.pop("message", "") or "building its kernels"
        progress = columns.pop("progress", None)
        lifecycle.set_state(
            self.eng, self.sid, "building", message, progress=progress,
            record=lambda s: series_runs_store.take(s, self.sid, self.executor.name, **columns),
        )  # fmt: skip
        self.executor.build(self)
        return True

    def advance(self) -> str:
        """One look: the next batch of rounds, the state of the work under way, or the
        end. Returns the series' state after it."""
        p = self.executor.progress(self)
        if p is None:
            return self._state()
        if p.stuck:
            return self._resubmit(p.stuck)
        with db.session(self.eng) as s:
            resumed = self._clear_stuck_note(s)
            d = series_runs_store.dispatch(s, self.sid)
        if resumed:
            lifecycle.event(self.eng, self.sid, f"series:{self.sid}", "resumed",
                            f"handed over again, under way ({resumed})")  # fmt: skip
        batches = d.batches if d is not None else 0
        if p.builds_ended >= p.kernels and p.built:
            if batches == 0 and self._hand(self._first_batch(p, d)):
                return "running"
            more = not p.busy and not p.failing and (batch := self._more_batch(p, d))
            if more and self._hand(batch):
                return "running"
        if p.busy:
            planned = d.benchmarks if d is not None else 0
            lost = {"lost_workers": p.lost} if p.lost is not None else None
            if p.builds_ended < p.kernels:
                lifecycle.set_state(
                    self.eng, self.sid, "building",
                    f"{p.builds_ended} of {p.kernels} kernels built",
                    progress=f"{p.builds_ended}/{p.kernels}", meta=lost,
                )  # fmt: skip
            else:
                lifecycle.set_state(
                    self.eng, self.sid, "running",
                    f"{p.boots_ended} of {planned} benchmarks measured",
                    progress=f"{p.boots_ended}/{planned}", meta=lost,
                )  # fmt: skip
            return self._state()
        return self._finish(p)

    def run(self) -> str:
        """The whole journey on an executor that does each step at once (the local one)."""
        if not self.start():
            return self._state()
        state = self.advance()
        while state in UNDER_WAY:
            state = self.advance()
        return state

    # -- work the executor will never do: a host fault, never the series' own

    def _resubmit(self, stuck: list[str]) -> str:
        """Cancel what the executor holds and hand the series over again (a new attempt,
        so a new submission), saying why on its page until the new attempt is seen."""
        error = f"{stuck[0]}, resubmitting"
        lifecycle.event(self.eng, self.sid, f"series:{self.sid}", "waiting",
                        "; ".join(stuck) + ": cancelled, resubmitting")  # fmt: skip
        self.executor.abandon(self)
        # a foreground caller's attempt stays its own: the dispatcher must not take it too
        fg = series_runs_store.FOREGROUND
        state = lifecycle.resubmit(self.eng, self.sid, f"handed over again: {error}",
                                   executor=fg if self.executor.name == fg else "")  # fmt: skip
        with db.session(self.eng) as s:  # on the new attempt, until it is seen under way
            series_runs_store.note(s, self.sid, host_fault={
                "error": error, "step": STUCK_STEP, "since": time.time()})  # fmt: skip
        if state == "applied":
            self.start()  # not taken now (the master went away): the next look hands it over
        return self._state()

    def _clear_stuck_note(self, s: Session) -> str:
        """The note of a resubmitted attempt (``_resubmit``), removed now that it is under
        way: its text, or "" when there was none."""
        row = series_runs_store.current(s, self.sid)
        fault = dict(row.host_fault or {}) if row is not None else {}
        if fault.get("step") != STUCK_STEP:
            return ""
        series_runs_store.note(s, self.sid, host_fault=None)
        return str(fault.get("error"))

    # -- the batches

    def _first_round(self) -> int:
        """Rounds are numbered on from every earlier batch of the series (an attempt run
        again adds rounds), so a round number never stands for two blocks."""
        with db.session(self.eng) as s:
            plans = series_runs_store.plans(s, self.sid)
        return 1 + sum(int(p.get("boots_per_kernel", 0)) for p in plans)

    def _key(self, d: series_runs_store.Dispatch | None, n: int) -> str:
        prefix = (d.submission if d is not None else "") or (
            f"series-{self.sid}-attempt-{d.number if d is not None else 1}"
        )
        return f"{prefix}-rounds-{n}"

    def _first_batch(self, p: Progress, d: series_runs_store.Dispatch | None) -> Batch:
        key = self._key(d, 1)
        runs = self.executor.runs(self)
        plan = boot_plan.make_plan(
            [k.key for k in p.built], runs, boots=self.boots,
            seed=self.seed if self.seed is not None else seed_of(key), tag=key,
            first_round=self._first_round(),
        )  # fmt: skip
        why = (
            f"{len(plan.boots_in_order())} boots: {len(p.built)} kernels x {plan.boots} rounds "
            f"(shuffled, seed {plan.seed}), {len(self.jobs)} job(s)"
        )
        return Batch(key, plan, why)

    def _more_batch(self, p: Progress, d: series_runs_store.Dispatch | None) -> Batch | None:
        """Headline metrics still undecided: more rounds of new boots of the base and the
        kernels in doubt, up to the cap (jobs/driver/adaptive.py), unless the series said no."""
        if not self.adaptive:
            return None
        # here, not at the top: adaptive brings scipy.stats, which a worker never needs
        from stackbench.jobs.driver import adaptive

        with db.session(self.eng) as s:
            kernels_store.attach_to_series(s, self.sid)  # uploads know commits, not patches
        after = None
        if d is not None and d.have is not None:
            after = adaptive.MoreRounds(
                boots=0, have=d.have, cap=0, kernels=[], subjobs=[], stored=d.stored or 0
            )
        more = adaptive.more_rounds(self.eng, self.sid, after=after, policy=self.policy)
        if more is None:
            return None
        kernels = [k.key for k in p.built if k.commit in more.kernels]
        runs = self.executor.runs(self)
        # as many per boot as the first rounds
        per_boot = -(-runs // boot_plan.boots_for(runs, self.boots))
        key = self._key(d, (d.batches if d is not None else 0) + 1)
        first = max(self._first_round(), more.have + 1)
        plan = boot_plan.make_plan(
            kernels, per_boot * more.boots, boots=more.boots,
            seed=self.seed if self.seed is not None else seed_of(key), tag=key,
            first_round=first,
        )  # fmt: skip
        adaptive.record(self.eng, self.sid, more)
        return Batch(key, plan, more.reason(), more)

    def _hand(self, batch: Batch) -> bool:
        more = batch.more

        def handed(**columns: Any) -> None:
            order = batch.plan.boots_in_order()
            with db.session(self.eng) as s:
                planned = series_runs_store.dispatch(s, self.sid)
            before = planned.benchmarks if planned is not None and planned.batches else 0
            lifecycle.set_state(
                self.eng, self.sid, "running", batch.why,
                progress=f"{before}/{before + len(order)}",
                record=lambda s: series_runs_store.add_batch(
                    s, series_runs_store.current(s, self.sid), batch.key,
                    batch.plan.describe(), [b.round for b in order], boots=len(order),
                    have=more.have if more is not None else None,
                    stored=more.stored if more is not None else None, **columns,
                ),
            )  # fmt: skip

        return self.executor.boot(self, batch, handed)

    # -- the end

    def _finish(self, p: Progress) -> str:
        reasons = self.executor.failures(self)
        if reasons:
            firsts = list(dict.fromkeys(r.splitlines()[0] for r in reasons))
            lifecycle.set_state(
                self.eng, self.sid, "failed", f"{len(firsts)} failure(s): " + "; ".join(firsts),
                error="; ".join(firsts),
            )  # fmt: skip
            for r in reasons:
                lifecycle.event(self.eng, self.sid, f"series:{self.sid}", "failed", r)
            return "failed"
        lifecycle.set_state(
            self.eng, self.sid, "done",
            f"{p.builds_ended} kernels built, {p.boots_ended} benchmarks measured", error="",
        )  # fmt: skip
        lifecycle.publish_comparison(self.eng, self.sid)  # its public comparison, made once
        return "done"

    def _state(self) -> str:
        with db.session(self.eng) as s:
            series = series_store.get(s, self.sid)
            return series.state if series is not None else "failed"
