"""The per-series pipeline on one machine (the in-process executor): apply, build the base
and every commit, then walk the plan's rounds of boots (stackbench.jobs.executors.plan), collect the
runs and ingest them. ``stackbench demo --in-process``, ``submit`` and the tests use it;
the Buildbot steps use its stages (apply_only, run_job).

The stages live in their own modules: settings (jobs.executors.settings), progress lines and ETA
(jobs.executors.progress), job specs (jobs.executors.jobspecs), series state (jobs.driver.lifecycle) and events (jobs.executors.series_state),
apply (jobs.driver.apply_stage), build (jobs.executors.build_stage), boot (jobs.executors.boot_stage), the plan
(jobs.executors.plan). Import each from where it is defined.

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
from stackbench.jobs.driver.journey import Journey
from stackbench.jobs.driver.local_executor import LocalExecutor
from stackbench.jobs.executors.faults import host_fault
from stackbench.jobs.executors.progress import ProgressFn
from stackbench.jobs.executors.series_state import SeriesRun
from stackbench.jobs.executors.settings import Settings
from stackbench.resultsdb import db, series_runs_store, series_store


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
    sr.settings = journey.settings  # with the guest the series' plan asked for
    try:
        state = journey.run()
    except BaseException as exc:
        if isinstance(exc, Exception) and host_fault(exc):
            raise  # this machine's fault, not the series': it keeps its state and waits
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc) or repr(exc)
        with db.session(eng) as s:
            ended = series_store.state_of(s, series_id) in ("done", "apply-failed")
        if not ended:  # a series that ended stays as it ended
            lifecycle.set_state(
                eng, series_id, "failed", f"pipeline stopped: {reason}", error=reason
            )
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
