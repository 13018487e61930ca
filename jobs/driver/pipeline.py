"""The per-series pipeline on one machine (the in-process executor): apply, build the base
and every commit, then walk the plan's rounds of boots (stackbench.jobs.executors.plan), collect the
runs and ingest them. ``stackbench demo --in-process``, ``submit`` and the tests use it;
the Buildbot steps use its stages (apply_only, run_job).

The stages live in their own modules: settings (jobs.executors.settings), progress lines and ETA
(jobs.executors.progress), job specs (jobs.executors.jobspecs), series state (jobs.driver.lifecycle) and events (jobs.executors.series_state),
apply (jobs.driver.apply_stage), build (jobs.executors.build_stage), boot (jobs.executors.boot_stage), the plan
(jobs.executors.plan). Their public names stay importable from here.

States, recorded in ``series.state`` and as ``event`` rows:

    new -> applying -> applied -> building -> running -> done
                    -> apply-failed            (nothing is built)
                                               -> failed  (a kernel failed to build, crashed
                                                           or hung; or the pipeline broke)

A commit that does not build does not stop the others: its ``kernel_build`` row says
``build-failed`` with the log tail, and the remaining kernels are still booted and measured.
A kernel whose boot crashes or hangs is not booted again in later rounds.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from stackbench.errors import NotFoundError
from stackbench.jobs.driver import lifecycle
from stackbench.jobs.driver.apply_stage import (  # noqa: F401  (public names of the pipeline)
    _apply,
    apply_only,
    apply_stage,
    kernel_name,
    mail_from_patch,
)
from stackbench.jobs.driver.journey import Journey
from stackbench.jobs.driver.lifecycle import set_state  # noqa: F401  (the one writer of state)
from stackbench.jobs.driver.local_executor import LocalExecutor
from stackbench.jobs.executors.boot_stage import (  # noqa: F401
    CONSOLE_TAIL_LINES,
    GUEST_BANNER,
    MODULE_FOR_SUITE,
    boot_and_store,
    boot_estimate,
    boot_one,
    boot_timeout,
    failure_runs,
    run_job,
    run_kernel,
)
from stackbench.jobs.executors.build_stage import build_estimate, build_one, record_build_failure  # noqa: F401
from stackbench.jobs.executors.faults import host_fault
from stackbench.jobs.executors.jobspecs import (  # noqa: F401
    parse_job_spec,
    plan_for,
    resolve_jobs,
    split_job_specs,
)
from stackbench.jobs.executors.progress import (  # noqa: F401
    Eta,
    ProgressEvent,
    ProgressFn,
    StderrProgress,
    fmt_duration,
)
from stackbench.jobs.executors.series_state import (  # noqa: F401
    KernelTask,
    SeriesRun,
    event,
    register_tree,
)
from stackbench.jobs.executors.settings import DEFAULT_JOBS, DEFAULT_RUNS, Settings  # noqa: F401
from stackbench.kernels import trees
from stackbench.resultsdb import db, kernels_store, series_runs_store, series_store


def submit(
    eng: Engine,
    mbox: bytes,
    *,
    tree: str = "linux-6.1",
    base: str | None = None,
    jobs: list[str] | None = None,
    runs: int | None = None,
    source: str = "mbox",
    filename: str = "<mbox>",
    owner_id: int | None = None,
) -> int:
    """Store a series (idempotent: the same mails on the same tree and base give the same
    series back) and return its id. Everything is validated before anything is written."""
    from stackbench.patches.parser import parse_mbox
    from stackbench.patches.store import create_series

    tree_def = trees.load_tree(tree)
    resolve_jobs(jobs, runs)  # bad job names or overrides fail here, before storing
    parsed = parse_mbox(mbox, source=filename)
    with db.session(eng) as s:
        register_tree(s, tree_def)
        series = create_series(
            s,
            parsed,
            tree=tree,
            base=base,
            source=source,
            owner_id=owner_id,
            jobs=list(jobs) if jobs is not None else None,
            runs=runs,
            mbox=mbox,  # the raw mails, so `git am` gets exactly what was submitted
        )
        return series.id


def run_series(
    eng: Engine,
    series_id: int,
    *,
    progress: ProgressFn | None = None,
    settings: Settings | None = None,
    rerun: bool = False,
    boots: int | None = None,
    seed: int | None = None,
    executor: str = series_runs_store.FOREGROUND,
) -> str:
    """Run the pipeline for a stored series and return its final state.

    A series already ``done`` is left as it is unless ``rerun`` (then the plan is run again:
    new rounds of boots add runs; builds are reused). A ``failed`` series is retried. Builds
    are always reused from the artifact store when present. ``boots`` (boots per kernel)
    and ``seed`` (the shuffles) override the plan's defaults. ``executor``: who runs it (the
    dispatcher's ``in-process``, else a foreground client), recorded on its attempt."""
    settings = settings or Settings()
    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        state = series.state
    if state == "done" and not rerun:
        return state
    if state == "apply-failed":
        return state
    if state in lifecycle.FINAL:
        lifecycle.restart(eng, series_id, "run again" if state == "done" else "tried again")
    sr = SeriesRun(series_id, settings, progress)
    local = LocalExecutor(sr, executor)
    journey = Journey(eng, series_id, local, settings=settings, boots=boots, seed=seed)
    try:
        state = journey.run()
    except BaseException as exc:
        if isinstance(exc, Exception) and host_fault(exc):
            raise  # this machine's fault, not the series': it keeps its state and waits
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc) or repr(exc)
        with db.session(eng) as s:
            ended = series_store.state_of(s, series_id) in ("done", "apply-failed")
        if not ended:  # a series that ended stays as it ended
            set_state(eng, series_id, "failed", f"pipeline stopped: {reason}", error=reason)
        sr.emit("failed", 0, 0, f"series {series_id}", reason)
        raise
    if state == "apply-failed":
        return state
    sr.timings["total_s"] = sr.eta.elapsed()
    with db.session(eng) as s:
        series_store.merge_meta(series_store.get(s, series_id), timings=_rounded(sr.timings))
    if state == "done":
        n = len(local.tasks)
        sr.emit("done", n, n, f"series {series_id}", "all kernels measured")
    else:
        with db.session(eng) as s:
            error = series_store.get(s, series_id).error or state
        sr.emit("failed", 0, 0, f"series {series_id}", error[:200])
    return state


def _rounded(t: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in t.items()}


# ---- what a series produced -----------------------------------------------------------------


def series_kernels(eng: Engine, series_id: int) -> list[kernels_store.KernelBuild]:
    """The series' kernels in stack order (base first): every built one with runs."""
    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        return kernels_store.built_kernels(s, series)
