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


def _has_tracer(t: KernelTask) -> bool:
    assert t.build is not None and t.build.artifact_dir is not None
    config = Path(t.build.artifact_dir) / "config"
    return config.is_file() and f"{PROFILER}=y" in config.read_text(errors="replace").splitlines()


def evidence_boot(
    sr: SeriesRun, t: KernelTask, plan: list[SubJob], functions: list[str]
) -> dict[str, dict[str, Any]]:
    """Boot ``t`` once with every sub-job of ``plan`` at one run, counting ``functions``
    and sampling the CPUs with perf; per sub-job what the guest counted
    (``calls``/``untraceable``, or ``error``) and its ``profile``
    (jobs/executors/profile_stage.py)."""
    assert t.build is not None
    if not _has_tracer(t):
        why = f"this kernel was built without {PROFILER} (its config predates it)"
        return {sj.name: {"error": why} for sj in plan}
    one = [dataclasses.replace(sj, runs=1) for sj in plan]
    b = t.build
    kernel = KernelSpec(
        commit=b.commit, name=t.name, config_name=b.config_name, config_hash=b.config_hash,
        compiler=b.compiler, tree=b.tree, status="built",
    )  # fmt: skip
    workdir = boot_workdir()
    system_map, no_profile = profile_stage.symbols_for(t)
    _res, runs = run_kernel(
        b.bzimage, b.modules, one, kernel=kernel, settings=sr.settings, workdir=workdir,
        boot_id=f"evidence-{t.key}-{time.time_ns()}", timings=sr.timings, coverage=functions,
        profile=system_map,
    )  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        name = str(r.meta.get("subjob") or "")
        got = r.meta.get("coverage")
        if got is None:
            first = (r.error or r.status).splitlines()[0] if (r.error or r.status) else r.status
            got = {"error": f"the evidence run {r.status}: {first}"}
        out[name] = {**got, "profile": profile_stage.profile_of(r.meta, no_profile)}
    # nothing of an evidence boot is kept but its counts
    shutil.rmtree(workdir, ignore_errors=True)
    return out


def evidence_boots(
    eng: Engine, sr: SeriesRun, repo: Path, tasks: list[KernelTask], plan: list[SubJob]
) -> None:
    """The series' evidence boots: the changed functions of each patch stored, then each
    bootable kernel (base included, for the counts to compare with) booted once counting
    them. Nothing is booted when no patch changes a function. A failure here never fails
    the series: it is said in an event and on the kernel's coverage."""
    if sr.series_id is None:
        return
    try:
        functions = series_functions(eng, repo, tasks)
    except StackbenchError as exc:
        _say(eng, sr, f"coverage: the changed functions could not be read: {exc}")
        return
    if not functions:
        _say(eng, sr, "coverage: no patch of the series changes a function")
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
    _say(eng, sr, f"coverage: {len(own)} evidence boots counted {len(functions)} functions")


def _say(eng: Engine, sr: SeriesRun, message: str) -> None:
    with db.session(eng) as s:
        event(s, sr.series_id, f"series:{sr.series_id}", "coverage", message)
