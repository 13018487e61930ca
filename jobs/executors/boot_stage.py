"""The boot stage: a built kernel booted under QEMU with a list of sub-jobs, the guest
running each its number of times and sending every result back at the end
(stackbench.jobs.benchmarks.guest); a kernel that crashes or hangs gives runs with status ``crashed`` /
``timeout`` whose error holds the reason and the console tail (the console is also kept as
a run log). One boot is one unit of the plan (stackbench.jobs.executors.plan)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from stackbench import config as sbconfig
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks.definitions import SubJob
from stackbench.jobs.executors.jobspecs import plans_for, resolve_jobs
from stackbench.jobs.executors.plan import Boot, stamp
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun, event
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import qemu
from stackbench.resultsdb import db
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec, RunData

# what the guest prints once /init runs (jobs/benchmarks/guest/init.sh): the boot did not hang
GUEST_BANNER = "stackbench: guest up"
_RUN_DONE = re.compile(r"stackbench: (\S+) run (\d+): rc=(-?\d+)")
MODULE_FOR_SUITE = {"stress-highalloc": "stackbench_highalloc"}
CONSOLE_TAIL_LINES = 40
# a boot's working directory (initramfs, console, the guest's results) under $STACKBENCH_HOME
WORKDIR_PREFIX = "stackbench-job-"
# written into the working directory of a failed boot: kept for a look, then removed
FAILED_MARK = "failed-boot"
# a working directory without the mark is older than any boot only when its boot was killed
KILLED_AFTER_S = 86400.0


def boot_workdir() -> Path:
    """A new working directory for one boot."""
    return Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=sbconfig.home()))


def release_workdir(workdir: Path, runs: list[RunData]) -> bool:
    """Once the boot's runs are stored: its working directory removed, or kept when the
    boot failed (a run not done), to look at its console and initramfs, until
    ``STACKBENCH_KEEP_FAILED_BOOTS_DAYS``; the kept ones older than that go now. True when
    kept."""
    failed = [r for r in runs if r.status != "done"]
    if failed or not runs:
        why = failed[0].error.splitlines()[0] if failed and failed[0].error else "no runs"
        # a full disk may refuse even this: unmarked, the directory goes a day later
        with suppress(OSError):
            (workdir / FAILED_MARK).write_text(f"{len(failed)} of {len(runs)} runs failed: {why}\n")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    prune_workdirs()
    return workdir.exists()


def prune_workdirs(now: float | None = None) -> list[Path]:
    """Remove the working directories of failed boots kept longer than
    ``STACKBENCH_KEEP_FAILED_BOOTS_DAYS``, and of boots killed before their runs were stored
    (no mark, older than that and than a day); the removed ones."""
    days = sbconfig.get_int("STACKBENCH_KEEP_FAILED_BOOTS_DAYS")
    if days < 0:
        raise sbconfig.SettingError(f"STACKBENCH_KEEP_FAILED_BOOTS_DAYS must be 0 or more, not {days}")  # fmt: skip
    keep_s = days * 86400.0
    now = time.time() if now is None else now
    removed = []
    for wd in sbconfig.home().glob(f"{WORKDIR_PREFIX}*"):
        mark = wd / FAILED_MARK
        try:
            age = now - (mark.stat().st_mtime if mark.exists() else wd.stat().st_mtime)
        except FileNotFoundError:  # another process removed it meanwhile
            continue
        if not wd.is_dir() or age < (keep_s if mark.exists() else max(keep_s, KILLED_AFTER_S)):
            continue
        shutil.rmtree(wd, ignore_errors=True)
        removed.append(wd)
    return removed


def boot_estimate(plan: list[SubJob], fraction: float = 1.0) -> float:
    """First guess of one boot's seconds, doing ``fraction`` of every sub-job's runs."""
    return 15.0 + fraction * sum(sj.runs * _default_run_s(sj) for sj in plan)


def _default_run_s(sj: SubJob) -> float:
    # first guesses (TCG, small sizes); the ETA corrects itself from the first kernel on
    return {"vm-scalability": 10.0, "thpscale": 20.0}.get(sj.suite, 25.0)


def boot_timeout(plan: list[SubJob], settings: Settings) -> float:
    if settings.boot_timeout_s is not None:
        return settings.boot_timeout_s
    return sum(sj.runs * sj.timeout_s for sj in plan) + settings.init_timeout_s + 120


def failure_runs(
    plan: list[SubJob],
    kernel: KernelSpec,
    machine: MachineSpec,
    status: str,
    error: str,
    boot_id: str,
    logs: dict[str, bytes],
) -> list[RunData]:
    """One run per (sub-job, iteration) that could not happen, with the reason."""
    out = []
    for sj in plan:
        for i in range(sj.runs):
            data = RunData(
                job=sj.job_spec(),
                kernel=kernel,
                machine=machine,
                iteration=i,
                samples={},
                source="qemu",
                status=status,
                error=error,
                logs=dict(logs),
                meta={"subjob": sj.name, "boot_id": boot_id, **sj.provenance()},
            )
            data.idempotency_key = hashlib.sha256(f"{data.key()}\0{boot_id}".encode()).hexdigest()
            out.append(data)
    return out


def run_kernel(
    bzimage: Path,
    modules: dict[str, Path],
    plan: list[SubJob],
    *,
    kernel: KernelSpec,
    settings: Settings,
    workdir: Path,
    boot_id: str,
    on_line: Callable[[str], None] | None = None,
    timings: dict[str, Any] | None = None,
    coverage: list[str] | None = None,
    profile: Path | None = None,
) -> tuple[qemu.BootResult | None, list[RunData]]:
    """Boot one kernel with the whole plan and return the runs (failed ones included).
    ``coverage``: an evidence boot's functions, whose calls each run's meta gets.
    ``profile``: the kernel's System.map: the guest runs perf during each run and each
    run's meta gets the symbolized profile (jobs/benchmarks/perfprof.py)."""
    from stackbench.jobs.benchmarks import knobs
    from stackbench.jobs.benchmarks.collect import collect
    from stackbench.jobs.benchmarks.guest import mmtests_image
    from stackbench.jobs.benchmarks.guest.initramfs import build_initramfs, upstream_files

    accel = settings.accel
    if accel == "auto":
        accel = "kvm" if qemu.kvm_usable(bzimage) else "tcg"
    machine = settings.machine(accel)
    runnable, missing = [], []
    for sj in plan:
        mod = MODULE_FOR_SUITE.get(sj.suite)
        (missing if mod and mod not in modules else runnable).append(sj)
    runs: list[RunData] = []
    if missing:
        runs += failure_runs(
            missing, kernel, machine, "failed",
            "the guest module for this suite was not built for this kernel", boot_id, {},
        )  # fmt: skip
    # system knobs: the boot's command line, and jobs this kernel's config cannot run
    append, refused = knobs.boot_setup(runnable, Path(bzimage).parent / "config")
    for sj, why in refused:
        runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
        runnable.remove(sj)
    # upstream suites are fetched and built here; a sub-job whose source fails is failed
    for sj in [sj for sj in runnable if sj.upstream is not None]:
        try:
            upstream_files([sj])
        except StackbenchError as exc:
            why = f"upstream {sj.suite} at {sj.upstream.commit[:12]}: {exc}"
            runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
            runnable.remove(sj)
    # the Debian image some sub-jobs boot with (jobs/benchmarks/guest/mmtests_image.py), built once
    extra, failed = mmtests_image.plan_drives(runnable)
    for sj, why in failed:
        runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
        runnable.remove(sj)
    if not runnable:
        return None, runs
    module_ko = next((modules[m] for m in MODULE_FOR_SUITE.values() if m in modules), None)
    workdir.mkdir(parents=True, exist_ok=True)
    timings = timings if timings is not None else {}
    t0 = time.monotonic()
    initrd = build_initramfs(
        workdir / "initrd.cpio.gz", runnable, module_ko, coverage=coverage,
        profile=profile is not None,
    )  # fmt: skip
    timings["initramfs_s"] = timings.get("initramfs_s", 0.0) + time.monotonic() - t0
    res = qemu.boot(
        bzimage,
        initrd,
        workdir=workdir,
        cpus=settings.cpus,
        mem_mb=settings.mem_mb,
        timeout_s=boot_timeout(runnable, settings),
        accel=accel,
        expect=GUEST_BANNER,
        expect_within_s=settings.init_timeout_s,
        on_line=on_line,
        append=append,
        extra=extra,
    )
    timings["vm_s"] = timings.get("vm_s", 0.0) + res.duration_s
    console = {"console.log": _read_capped(res.console_path)}
    tail = "\n".join(res.console_tail.splitlines()[-CONSOLE_TAIL_LINES:])
    if res.status in ("crashed", "timeout", "error"):
        status = {"error": "failed"}.get(res.status, res.status)
        runs += failure_runs(
            runnable, kernel, machine, status, f"{res.reason}\n--- console ---\n{tail}",
            boot_id, console,
        )  # fmt: skip
        return res, runs
    if res.results_dir is None:
        runs += failure_runs(
            runnable, kernel, machine, "failed",
            f"the guest exited without sending results\n--- console ---\n{tail}",
            boot_id, console,
        )  # fmt: skip
        return res, runs
    collected = collect(
        res.results_dir, runnable, kernel=kernel, machine=machine, source="qemu",
        boot_id=boot_id, coverage=coverage, profile=profile,
    )  # fmt: skip
    timings["guest_runs_s"] = timings.get("guest_runs_s", 0.0) + sum(
        r.duration_s or 0.0 for r in collected
    )
    for r in collected:
        r.logs = {**r.logs, **console}
        if r.status != "done" and r.error and r.status in ("lost", "failed"):
            r.error = f"{r.error}\n--- console ---\n{tail}"
    return res, runs + collected


def _read_capped(path: Path, limit: int = 1 << 20) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    return data if len(data) <= limit else b"[...]\n" + data[-limit:]


def subjobs_of(plan: list[SubJob], boot: Boot) -> list[tuple[SubJob, int]]:
    """The sub-jobs this boot runs, each with its share of runs, and the iteration number
    its first run has within the kernel's plan."""
    out = []
    for sj in plan:
        first, n = boot.share(sj.runs)
        if n:
            out.append((dataclasses.replace(sj, runs=n), first))
    return out


def boot_one(
    eng: Engine,
    sr: SeriesRun,
    t: KernelTask,
    plan: list[SubJob],
    boot: Boot,
    total: int,
    workdir: Path,
) -> list[RunData]:
    """Boot ``t`` once, as ``boot`` of the plan, in ``workdir``, and return its runs stamped
    with the boot."""
    assert t.build is not None and t.build.artifact_dir is not None
    b = t.build
    kernel = KernelSpec(
        commit=b.commit,
        name=t.name,
        config_name=b.config_name,
        config_hash=b.config_hash,
        compiler=b.compiler,
        tree=b.tree,
        status="built",
        meta={} if sr.series_id is None else {"series": sr.series_id},
    )
    here = subjobs_of(plan, boot)
    first_of = {sj.name: first for sj, first in here}
    subjobs = [sj for sj, _first in here]
    total_runs = sum(sj.runs for sj in subjobs)
    done = {"n": 0}
    unit = f"boot:{t.key}:{boot.index + 1}"

    def on_line(line: str) -> None:
        if GUEST_BANNER in line:
            sr.emit("run", 0, total_runs, t.name, "guest up")
        m = _RUN_DONE.search(line)
        if m:
            done["n"] += 1
            sr.eta.progress(unit, done["n"] / max(total_runs, 1))
            rc = "" if m.group(3) == "0" else f" (rc {m.group(3)})"
            sr.emit("run", done["n"], total_runs, t.name, f"{m.group(1)} #{m.group(2)}{rc}")

    sr.emit(
        "boot",
        sr.boots_done + 1,
        total,
        t.name,
        f"round {boot.round}, {total_runs} runs in this boot",
    )
    res, runs = run_kernel(
        b.bzimage,
        b.modules,
        subjobs,
        kernel=kernel,
        settings=sr.settings,
        workdir=workdir,
        boot_id=boot.boot_id,
        on_line=on_line,
        timings=sr.timings,
    )
    runs = [stamp(r, boot, first_of.get(r.meta.get("subjob", ""), 0), sr.series_id) for r in runs]
    if res is None:
        t.outcome, t.error = "error", "nothing could run on this kernel"
        return runs
    outcome, error = res.status, res.reason if res.status != "ok" else ""
    if res.status == "ok" and any(r.status != "done" for r in runs):
        failed = [r for r in runs if r.status != "done"]
        error = f"{len(failed)} of {len(runs)} runs failed: {failed[0].error.splitlines()[0]}"
        outcome = "runs-failed"
    if t.outcome in ("", "built", "ok"):  # a kernel's outcome is its first failed boot's
        t.outcome, t.error = outcome, error
    if sr.series_id is None:
        return runs
    with db.session(eng) as s:
        event(
            s,
            sr.series_id,
            f"build:{t.build_id}",
            f"boot-{res.status}",
            f"{t.name}: boot {res.status} (round {boot.round}) under {res.accel_used} in "
            f"{res.duration_s:.0f}s" + (f": {res.reason}" if res.reason else ""),
        )
    return runs


def boot_and_store(
    eng: Engine,
    sr: SeriesRun,
    t: KernelTask,
    plan: list[SubJob],
    boot: Boot,
    total: int,
    *,
    source: str | None = None,
) -> list[RunData]:
    """One boot of a plan's rounds, as every comparison makes it (a series' pipeline, a
    nightly night, a bisect step): boot ``t`` as ``boot`` (:func:`boot_one`), store its runs
    (``source`` names where they come from, else the executor's) and, for a series, say how
    it went in an event. Returns the runs. The boot's working directory goes once its runs
    are stored (:func:`release_workdir`)."""
    workdir = boot_workdir()
    runs = boot_one(eng, sr, t, [sj for sj in plan if t.runs_subjob(sj)], boot, total, workdir)
    sr.boots_done += 1
    sr.emit("ingest", sr.boots_done, total, t.name, f"{len(runs)} runs")
    for r in runs if source else []:
        r.source = source
    t0 = time.monotonic()
    res = ingest(eng, runs)
    sr.timings["ingest_s"] += time.monotonic() - t0
    release_workdir(workdir, runs)
    if sr.series_id is not None:
        with db.session(eng) as s:
            event(
                s,
                sr.series_id,
                f"build:{t.build_id}",
                t.outcome,
                f"{t.name} round {boot.round}: {_run_summary(runs)}; "
                f"{len(res.inserted)} runs stored",
            )
    return runs


def _run_summary(runs: list[RunData]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "no runs"


# ---- single job on a given artifact (Buildbot workers) --------------------------------------


def worker_plan(
    job: str | list[str], runs: int, machine: MachineSpec, settings: Settings | None = None
) -> tuple[Settings, list[SubJob], dict[str, str]]:
    """A worker's boot of ``job`` (one spec or several) at ``runs`` runs on ``machine``: the
    settings (the guest's size is the machine's), the sub-jobs, and each one's job spec."""
    settings = settings or Settings()
    if machine.cpus:
        settings.cpus = machine.cpus
    if machine.memory_mb:
        settings.mem_mb = machine.memory_mb
    settings.machine_name = machine.name
    specs = [job] if isinstance(job, str) else list(job)
    parts = plans_for(resolve_jobs(specs, runs), settings)
    plan = [sj for part in parts for sj in part]
    spec_of = {sj.name: spec for spec, part in zip(specs, parts, strict=True) for sj in part}
    return settings, plan, spec_of


def run_job(
    *,
    artifact: Path,
    job: str | list[str],
    runs: int,
    kernel: KernelSpec,
    machine: MachineSpec,
    settings: Settings | None = None,
    workdir: Path | None = None,
) -> list[RunData]:
    """Run one job (or several, each) ``runs`` times on a built kernel artifact (a
    kernels.build artifact dir: bzImage and modules/) in one boot; failed boots give failed
    runs, not exceptions. Every run's meta names the job spec it came from (``job_spec``).
    ``workdir`` (default: a new :func:`boot_workdir`) is left for the caller to release once
    the runs are stored."""
    settings, plan, spec_of = worker_plan(job, runs, machine, settings)
    specs = [job] if isinstance(job, str) else list(job)
    bzimage = Path(artifact) / "bzImage"
    if not bzimage.is_file():
        raise InputError(artifact, "no bzImage in the kernel artifact")
    modules = {p.stem: p for p in sorted((Path(artifact) / "modules").glob("*.ko"))}
    wd = workdir or boot_workdir()
    boot_id = f"job-{hashlib.sha256(str(wd).encode()).hexdigest()[:12]}-{time.time_ns()}"
    _, out = run_kernel(
        bzimage, modules, plan, kernel=kernel, settings=settings, workdir=wd, boot_id=boot_id
    )
    for r in out:
        r.machine = machine
        spec = spec_of.get(str(r.meta.get("subjob") or ""), specs[0])
        r.meta = {**r.meta, "job_spec": spec}
    return out
