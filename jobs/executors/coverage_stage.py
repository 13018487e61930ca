"""The evidence boot: once a series' kernels are measured, each is booted once more with
every job at one run, ftrace's function tracer counting the calls of the functions the
series' patches change (stackbench.patches.diffparse.changed_functions, read against the
tree's own commits). Its runs are never stored as runs, so no verdict ever sees them; only
the counts are kept, on the kernel (stackbench.resultsdb.coverage_store). The measured boots
list no function, so no tracer runs and ftrace's call sites stay NOPs."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from stackbench import config as sbconfig
from stackbench import gitcmd
from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks.definitions import SubJob
from stackbench.jobs.executors import profile_stage
from stackbench.jobs.executors.boot_stage import boot_workdir, run_kernel
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun, event
from stackbench.jobs.executors.settings import Settings
from stackbench.patches import diffparse
from stackbench.resultsdb import coverage_store, db
from stackbench.resultsdb.models import Patch
from stackbench.resultsdb.rundata import KernelSpec

# the kernel config symbol the guest's counting needs (kernels/configs/tiny-guest.config)
PROFILER = "CONFIG_FUNCTION_TRACER"


def enabled() -> bool:
    """Whether series get an evidence boot (STACKBENCH_EVIDENCE_BOOT)."""
    return sbconfig.get_flag("STACKBENCH_EVIDENCE_BOOT")


# how far up the static callers of a folded-in function the evidence boot looks for ones
# the kernel kept (a non-static caller always has an out-of-line copy)
CALLER_DEPTH = 3


def patch_functions(repo: Path, commit: str, diff: str) -> list[dict[str, Any]]:
    """The functions ``diff`` (``commit``'s patch) changes, read from ``commit`` and its
    parent in ``repo``; a static one also gets ``callers``, the call graph of its file
    above it (name -> the functions calling it), for when the compiler inlined it."""
    cache: dict[str, str | None] = {}

    def reader(rev: str):
        def read(path: str) -> str | None:
            spec = f"{rev}:{path}"
            if spec not in cache:
                blob = gitcmd.read_blobs(repo, [spec])[0]
                cache[spec] = None if blob is None else blob.decode(errors="replace")
            return cache[spec]

        return read

    new = reader(commit)
    out = []
    for f in diffparse.changed_functions(diff, reader(f"{commit}^"), new):
        d = dataclasses.asdict(f)
        source = new(f.path) if f.static and f.change != "removed" else None
        if source is not None:
            d["callers"] = _caller_graph(source, f.name)
        out.append(d)
    return out


def _caller_graph(source: str, name: str) -> dict[str, list[str]]:
    statics = {s.name for s in diffparse.function_spans(source) if s.static}
    graph: dict[str, list[str]] = {}
    level = [name]
    for _ in range(CALLER_DEPTH):
        up = []
        for fn in level:
            if fn in graph:
                continue
            graph[fn] = diffparse.callers(source, fn)
            up += [c for c in graph[fn] if c in statics]
        level = up
    return graph


def series_functions(eng: Engine, repo: Path, tasks: list[KernelTask]) -> list[str]:
    """Every function the series' patches change (kept on each patch) that a kernel can
    still have: the names the evidence boot profiles."""
    names: dict[str, None] = {}
    with db.session(eng) as s:
        for t in tasks:
            if t.patch_id is None or t.fragment:
                continue
            row = s.get(Patch, t.patch_id)
            if row is None:
                continue
            found = patch_functions(repo, t.commit, row.diff or "")
            coverage_store.save_functions(s, t.patch_id, found)
            for f in found:
                if f["change"] != "removed":
                    names[f["name"]] = None
                    for callers in (f.get("callers") or {}).values():
                        names.update(dict.fromkeys(callers))
    return list(names)


def _has_tracer(config: Path) -> bool:
    return config.is_file() and f"{PROFILER}=y" in config.read_text(errors="replace").splitlines()


def count_calls(
    artifact: Path,
    plan: list[SubJob],
    functions: list[str],
    *,
    kernel: KernelSpec,
    settings: Settings,
    boot_id: str,
    timings: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """THE evidence boot, wherever it runs (this machine's series, a Buildbot worker's
    evidence round): the kernel artifact (bzImage, modules/, config) booted once with every
    sub-job of ``plan`` at one run, counting ``functions`` and sampling the CPUs with perf; per sub-job what the guest
    counted (``calls``/``untraceable``/``lost_events``, or ``error``) and its ``profile``
    (jobs/executors/profile_stage.py). Its runs are dropped."""
    if not _has_tracer(artifact / "config"):
        why = f"this kernel was built without {PROFILER} (its config predates it)"
        return {sj.name: {"error": why} for sj in plan}
    one = [dataclasses.replace(sj, runs=1) for sj in plan]
    modules = {p.stem: p for p in sorted((artifact / "modules").glob("*.ko"))}
    workdir = boot_workdir()
    system_map, no_profile = profile_stage.symbols_for(artifact)
    try:
        _res, runs = run_kernel(
            artifact / "bzImage", modules, one, kernel=kernel, settings=settings,
            workdir=workdir, boot_id=boot_id, timings=timings, coverage=functions,
            profile=system_map,
        )  # fmt: skip
    finally:  # nothing of an evidence boot is kept but its counts and profile
        shutil.rmtree(workdir, ignore_errors=True)
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        name = str(r.meta.get("subjob") or "")
        got = r.meta.get("coverage")
        if got is None:
            first = (r.error or r.status).splitlines()[0] if (r.error or r.status) else r.status
            got = {"error": f"the evidence run {r.status}: {first}"}
        out[name] = {**got, "profile": profile_stage.profile_of(r.meta, no_profile)}
    return out


def evidence_boot(
    sr: SeriesRun, t: KernelTask, plan: list[SubJob], functions: list[str]
) -> dict[str, dict[str, Any]]:
    """This machine's evidence boot of ``t`` (:func:`count_calls`)."""
    assert t.build is not None and t.build.artifact_dir is not None
    b = t.build
    kernel = KernelSpec(
        commit=b.commit, name=t.name, config_name=b.config_name, config_hash=b.config_hash,
        compiler=b.compiler, tree=b.tree, status="built",
    )  # fmt: skip
    return count_calls(
        Path(b.artifact_dir), plan, functions, kernel=kernel, settings=sr.settings,
        boot_id=f"evidence-{t.key}-{time.time_ns()}", timings=sr.timings,
    )  # fmt: skip


def functions_to_count(eng: Engine, sid: int, repo: Path, tasks: list[KernelTask]) -> list[str]:
    """The names the series' evidence boots count (:func:`series_functions`); [] after
    saying in an event why none will be counted."""
    try:
        functions = series_functions(eng, repo, tasks)
    except StackbenchError as exc:
        _say(eng, sid, f"coverage: the changed functions could not be read: {exc}")
        return []
    if not functions:
        _say(eng, sid, "coverage: no patch of the series changes a function")
    return functions


def evidence_boots(
    eng: Engine, sr: SeriesRun, repo: Path, tasks: list[KernelTask], plan: list[SubJob]
) -> None:
    """The series' evidence boots on this machine: the changed functions of each patch
    stored, then each bootable kernel (base included, for the counts to compare with)
    booted once counting them. Nothing is booted when no patch changes a function. A
    failure here never fails the series: it is said in an event and on the kernel's
    coverage."""
    if sr.series_id is None:
        return
    functions = functions_to_count(eng, sr.series_id, repo, tasks)
    if not functions:
        return
    own = [t for t in tasks if not t.fragment and t.build is not None and t.build_id is not None]
    for i, t in enumerate(own, 1):
        if t.outcome not in ("built", "ok", "runs-failed"):
            continue
        subjobs = [sj for sj in plan if t.runs_subjob(sj)]
        sr.emit("evidence", i, len(own), t.name, f"counting calls of {len(functions)} functions")
        try:
            counted = evidence_boot(sr, t, subjobs, functions)
        except StackbenchError as exc:
            counted = {sj.name: {"error": f"the evidence boot failed: {exc}"} for sj in subjobs}
        with db.session(eng) as s:
            for job, got in counted.items():
                coverage_store.save_counts(s, t.build_id, job, got)
                profile_stage.save(s, t.build_id, job, got)
    _say(
        eng, sr.series_id, f"coverage: {len(own)} evidence boots counted {len(functions)} functions"
    )


# -- at Buildbot: the dispatcher lists the functions, a worker of the kind boots, the
# dispatcher stores what the worker reported (jobs/driver/buildbot_evidence.py)


def series_tasks(eng: Engine, sid: int) -> tuple[Path, list[KernelTask]]:
    """The tree's repository and the kernels of an applied series, base first, as the
    dispatcher knows them when a master builds them."""
    from stackbench.kernels import trees
    from stackbench.resultsdb import kernels_store, series_store

    with db.session(eng) as s:
        series = series_store.get(s, sid)
        if series is None or not series.base_commit:
            raise StackbenchError(f"series {sid} is not applied: no base commit")
        tree_name = series.tree.name if series.tree else "linux-6.1"
        tasks = [KernelTask(label="base", name="base", commit=series.base_commit)]
        for k in kernels_store.stack(series)[1:]:
            tasks.append(KernelTask(label=k.label, name=k.label, commit=k.commit or "",
                                    patch_id=k.patch.id))  # fmt: skip
    return trees.ensure_repo(trees.load_tree(tree_name)), tasks


def count_on_worker(
    artifact: Path, jobs: list[str], functions: list[str], *, kernel: KernelSpec, machine: Any
) -> dict[str, dict[str, Any]]:
    """A Buildbot worker's evidence boot of an unpacked kernel artifact (``worker bench
    --evidence``): :func:`count_calls` with the sub-jobs and guest a benchmark of ``jobs``
    on this machine would have."""
    from stackbench.jobs.executors.boot_stage import worker_plan

    settings, plan, _spec_of = worker_plan(jobs, 1, machine)
    return count_calls(
        artifact, plan, functions, kernel=kernel, settings=settings,
        boot_id=f"evidence-{kernel.commit[:12]}-{time.time_ns()}",
    )  # fmt: skip


def store_reported(eng: Engine, sid: int, reported: list[dict[str, Any]]) -> int:
    """Keep the counts a worker's evidence round reported (one item per kernel: its
    kernel.json keys and ``jobs``: sub-job -> counts) on the series' kernel rows; how many
    kernels had counts."""
    from stackbench.jobs.executors.build_stage import kernel_row
    from stackbench.resultsdb import series_store

    stored = 0
    with db.session(eng) as s:
        tree_id = series_store.tree_id(s, sid)
        for k in reported:
            if not isinstance(k, dict) or not k.get("commit") or not k.get("config_hash"):
                continue
            patch = series_store.patch_for_commit(s, sid, str(k["commit"]))
            task = KernelTask(label="", name=str(k.get("name") or k["commit"][:12]),
                              commit=str(k["commit"]), patch_id=patch.id if patch else None)  # fmt: skip
            row = kernel_row(s, sid, task, tree_id, str(k["config_hash"]),
                             str(k.get("compiler") or ""), str(k.get("config_name") or ""))  # fmt: skip
            s.flush()
            for job, got in (k.get("jobs") or {}).items():
                coverage_store.save_counts(s, row.id, str(job), dict(got))
                profile_stage.save(s, row.id, str(job), dict(got))
            stored += 1
    return stored


def _say(eng: Engine, sid: int | None, message: str) -> None:
    with db.session(eng) as s:
        event(s, sid, f"series:{sid}", "coverage", message)
