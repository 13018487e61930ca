"""The per-series pipeline on one machine (the in-process executor): apply, build the base
and every commit, then walk the plan's rounds of boots (stackbench.jobs.plan), collect the
runs and ingest them. ``stackbench demo --in-process``, ``submit`` and the tests use it;
the Buildbot steps use its stages (apply_only, run_job).

The stages live in their own modules: settings (jobs.settings), progress lines and ETA
(jobs.progress), job specs (jobs.jobspecs), series state (jobs.lifecycle) and events (jobs.series_state),
apply (jobs.apply_stage), build (jobs.build_stage), boot (jobs.boot_stage), the plan
(jobs.plan). Their public names stay importable from here.

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

import time
from typing import Any

from sqlalchemy import Engine

from stackbench.errors import NotFoundError
from stackbench.jobs import plan as boot_plan
from stackbench.jobs.apply_stage import (  # noqa: F401  (public names of the pipeline)
    _apply,
    apply_only,
    apply_stage,
    kernel_name,
    mail_from_patch,
)
from stackbench.jobs.boot_stage import (  # noqa: F401
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
from stackbench.jobs.build_stage import build_estimate, build_one, record_build_failure  # noqa: F401
from stackbench.jobs.jobspecs import (  # noqa: F401
    parse_job_spec,
    plan_for,
    resolve_jobs,
    split_job_specs,
)
from stackbench.jobs.lifecycle import set_state  # noqa: F401  (the one writer of state)
from stackbench.jobs.progress import (  # noqa: F401
    Eta,
    ProgressEvent,
    ProgressFn,
    StderrProgress,
    fmt_duration,
)
from stackbench.jobs.series_state import (  # noqa: F401
    KernelTask,
    SeriesRun,
    event,
    register_tree,
)
from stackbench.jobs.settings import DEFAULT_JOBS, DEFAULT_RUNS, Settings  # noqa: F401
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
        meta = dict(series.meta)
        tree_name = series.tree.name if series.tree else "linux-6.1"
        base_ref = series.base_ref
    if state == "done" and not rerun:
        return state
    if state == "apply-failed":
        return state
    sr = SeriesRun(series_id, settings, progress)
    try:
        return _run(eng, sr, meta, tree_name, base_ref, boots, seed, executor)
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc) or repr(exc)
        set_state(eng, series_id, "failed", f"pipeline stopped: {reason}", error=reason)
        sr.emit("failed", 0, 0, f"series {series_id}", reason)
        raise


def _run(
    eng: Engine,
    sr: SeriesRun,
    meta: dict[str, Any],
    tree_name: str,
    base_ref: str,
    boots: int | None,
    seed: int | None,
    executor: str,
) -> str:
    # here, not at the top: adaptive brings scipy.stats (0.6 s), and every Buildbot benchmark
    # step imports this module for run_job alone
    from stackbench.jobs import adaptive

    sid, settings = sr.series_id, sr.settings
    tree = trees.load_tree(tree_name)
    runs = int(meta.get("runs") or DEFAULT_RUNS)
    jobs = resolve_jobs(meta.get("jobs"), runs)
    subjobs = plan_for(jobs, settings)
    repo = trees.ensure_repo(tree)

    attempt = _attempt(eng, sid, executor)
    tasks = apply_stage(eng, sr, repo, tree, base_ref)
    if tasks is None:
        return "apply-failed"
    tasks = with_fragments(tasks, subjobs)

    most_runs = max(sj.runs for sj in subjobs)
    n_boots = boot_plan.boots_for(most_runs, boots)
    for t in tasks:
        config = t.config(settings.config)
        sr.eta.plan(f"build:{t.key}", build_estimate(tree, settings, t.commit, config))
        mine = [sj for sj in subjobs if t.runs_subjob(sj)]
        for rnd in range(1, n_boots + 1):
            share = boot_plan.split_runs(most_runs, n_boots)[rnd - 1]
            sr.eta.plan(f"boot:{t.key}:{rnd}", boot_estimate(mine, share / most_runs))

    # -- build
    set_state(eng, sid, "building", f"building {len(tasks)} kernels")
    for i, t in enumerate(tasks, 1):
        sr.emit("build", i, len(tasks), t.name)
        started = time.monotonic()
        build_one(eng, sr, repo, tree, t)
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
        sr.emit("build", i, len(tasks), t.name, f"{t.outcome} ({how})")
    for t in tasks:
        if t.outcome != "built":
            for rnd in range(1, n_boots + 1):
                sr.eta.finish(f"boot:{t.key}:{rnd}", 0.0)

    # -- rounds of boots: every built kernel once per round, in a shuffled order
    built = [t for t in tasks if t.outcome == "built"]
    if built:
        _boot_rounds(eng, sr, built, subjobs, attempt, boots, seed)
        # headline metrics still undecided: more rounds of new boots, up to the cap
        more = None
        while settings.adaptive and (more := adaptive.more_rounds(eng, sid, after=more)):
            adaptive.record(eng, sid, more)
            sr.emit("more", more.have, more.cap, f"series {sid}", more.reason())
            again = [t for t in built if t.commit in more.kernels]
            _boot_rounds(eng, sr, again, more.plan(subjobs), attempt, more.boots, seed)

    sr.timings["total_s"] = sr.eta.elapsed()
    with db.session(eng) as s:
        series_store.merge_meta(series_store.get(s, sid), timings=_rounded(sr.timings))

    # -- verdict
    bad = [t for t in tasks if t.outcome not in ("ok",)]
    if bad:
        error = "; ".join(
            f"{t.name}: {t.outcome}" + (f" ({t.error})" if t.error else "") for t in bad
        )
        set_state(eng, sid, "failed", f"{len(bad)} of {len(tasks)} kernels failed", error=error)
        sr.emit("failed", len(tasks) - len(bad), len(tasks), f"series {sid}", error[:200])
        return "failed"
    set_state(eng, sid, "done", f"{len(tasks)} kernels measured", error="")
    from stackbench.jobs import lifecycle

    lifecycle.publish_comparison(eng, sid)  # the series' public comparison, made once
    sr.emit("done", len(tasks), len(tasks), f"series {sid}", "all kernels measured")
    return "done"


def _attempt(eng: Engine, sid: int, executor: str) -> int:
    """The number of the attempt this execution runs as: the one handed over, unless it
    already planned rounds (a dispatcher stopped mid-run): then a new one, whose boot ids
    are new, so nothing stored is taken for this run's."""
    with db.session(eng) as s:
        now = series_runs_store.current(s, sid)
        if now is None or now.ended is not None or now.batches:
            return series_runs_store.begin(s, sid, source=executor, executor=executor).number
        return series_runs_store.take(s, sid, executor).number


def _boot_rounds(
    eng: Engine,
    sr: SeriesRun,
    built: list[KernelTask],
    subjobs: list[Any],
    attempt: int,
    boots: int | None,
    seed: int | None,
) -> None:
    sid = sr.series_id
    with db.session(eng) as s:
        earlier = series_runs_store.plans(s, sid)
    first_round = 1 + sum(int(p.get("boots_per_kernel", 0)) for p in earlier)
    plan = boot_plan.make_plan(
        [t.key for t in built],
        max(sj.runs for sj in subjobs),
        boots=boots,
        seed=seed,
        tag=f"series-{sid}-attempt-{attempt}",
        first_round=first_round,
    )
    record = {**plan.describe(), "attempt": attempt, "first_round": first_round}
    by_key = {t.key: t for t in built}
    order = plan.boots_in_order()
    for boot in order:  # rounds added after the first plan were not in the ETA yet
        if f"boot:{boot.kernel}:{boot.index + 1}" not in sr.eta.pending:
            sr.eta.plan(f"boot:{boot.kernel}:{boot.round}", boot_estimate(subjobs, 1 / plan.boots))
    set_state(
        eng,
        sid,
        "running",
        f"{len(order)} boots: {len(built)} kernels x {plan.boots} rounds (shuffled, seed "
        f"{plan.seed}), {len(subjobs)} sub-jobs",
        record=lambda s: series_runs_store.add_batch(
            s,
            series_runs_store.current(s, sid),
            f"series-{sid}-attempt-{attempt}-round-{first_round}",
            record,
            [b.round for b in order],
            boots=len(order),
        ),
    )
    last_of_round = {b.round: i for i, b in enumerate(order)}
    for i, boot in enumerate(order):
        t = by_key[boot.kernel]
        unit = f"boot:{t.key}:{boot.index + 1}"
        if unit not in sr.eta.pending:
            unit = f"boot:{t.key}:{boot.round}"
        if t.outcome not in ("built", "ok", "runs-failed"):
            sr.eta.finish(unit, 0.0)  # a kernel that crashed or hung is not booted again
            if last_of_round[boot.round] == i:
                _round_done(eng, sid, boot.round)
            continue
        started = time.monotonic()
        boot_and_store(eng, sr, t, subjobs, boot, len(order))
        sr.eta.finish(unit, time.monotonic() - started)
        if last_of_round[boot.round] == i:
            _round_done(eng, sid, boot.round)


def _round_done(eng: Engine, sid: int, rnd: int) -> None:
    """A round ran whole here: its try is done, on the machine its boots ran on."""
    with db.session(eng) as s:
        attempt = series_runs_store.current(s, sid)
        worker = series_store.latest_machine(s, sid) or ""
        series_runs_store.record_round(s, attempt, rnd, None, worker, "done")


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
