"""The build stage: one kernel per commit (reused from the artifact store when built
before), each with its ``kernel_build`` row: building, built, or build-failed with the log's
tail, so the series page can say why without anyone watching the build."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks.highalloc import build_module
from stackbench.jobs.executors.faults import HostFault, build_fault, disk_fault_in, first_error
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun, event
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import build as kbuild
from stackbench.kernels import trees
from stackbench.resultsdb import db, kernels_store, series_store, trees_q


def build_estimate(
    tree: trees.TreeDef, settings: Settings, commit: str, config: str | None = None
) -> float:
    config = config or settings.config
    if commit and kbuild.find_artifact(tree.name, commit, config):
        return 1.0
    objdir = kbuild.workspace_dir(tree.name, config) / "build" / "vmlinux"
    return 60.0 if objdir.exists() else 420.0


def kernel_row(
    s: Session,
    sid: int | None,
    t: KernelTask,
    tree_id: int | None,
    chash: str,
    compiler: str,
    cfg: str,
) -> kernels_store.KernelBuild:
    """The task's kernel_build row (created, or claimed for the series): see
    :func:`kernels_store.save_build`."""
    return kernels_store.save_build(
        s,
        t.commit,
        chash,
        compiler,
        config_name=cfg,
        tree_id=tree_id,
        name=t.name,
        series_id=sid,
        patch_id=t.patch_id,
    )


def update_build(
    eng: Engine,
    t: KernelTask,
    *,
    series_id: int | None,
    tree: str,
    config: str,
    chash: str,
    status: str,
    compiler: str | None = None,
    **fields: Any,
) -> int:
    """Write the task's ``kernel_build`` row (the one place jobs write them): its status and
    ``fields``; a series also gets an event when the status changes. Returns the row's id."""
    with db.session(eng) as s:
        if series_id is not None:
            tree_id = series_store.tree_id(s, series_id)
        else:
            named = trees_q.named(s, tree)
            tree_id = named.id if named else None
        row = kernel_row(s, series_id, t, tree_id, chash, compiler or kbuild.compiler_id(), config)
        previous = row.status
        kernels_store.update_build(row, status=status, **fields)
        t.build_id = row.id
        if previous != status and series_id is not None:
            msg = f"{t.name}: {status}"
            if status == "build-failed":
                msg += "\n" + fields.get("log", "")[-2000:]
            event(s, series_id, f"build:{row.id}", status, msg)
        return row.id


def build_commit(
    repo: Path,
    commit: str,
    *,
    config: str,
    tree: str,
    jobs: int | None = None,
    on_configured: Callable[[str], None] | None = None,
) -> kbuild.BuildResult:
    """Build COMMIT's kernel (or reuse its artifact) with the guest's out-of-tree modules:
    the one place stackbench builds a kernel, for the in-process executor and a worker."""
    return kbuild.build(
        repo,
        commit,
        config=config,
        tree=tree,
        jobs=jobs,
        module_builder=build_module,
        on_configured=on_configured,
    )


def build_one(eng: Engine, sr: SeriesRun, repo: Path, tree: trees.TreeDef, t: KernelTask) -> None:
    """Build a kernel of the series (see :func:`build_kernel`)."""
    build_kernel(
        eng,
        repo,
        tree,
        t,
        config=t.config(sr.settings.config),
        make_jobs=sr.settings.make_jobs,
        series_id=sr.series_id,
    )


def build_kernel(
    eng: Engine,
    repo: Path,
    tree: trees.TreeDef,
    t: KernelTask,
    *,
    config: str,
    make_jobs: int | None,
    series_id: int | None = None,
    meta: dict[str, Any] | None = None,
) -> None:
    """Build ``t``'s commit with ``config`` (or reuse its artifact) and record it: the one
    caller of :func:`stackbench.kernels.build.build`. The task says how it went (``outcome``:
    built or build-failed, ``error``, ``build``, ``build_id``); ``meta`` goes into the row's."""
    extra = dict(meta or {})

    def record(chash: str, status: str, **fields: Any) -> None:
        fields["meta"] = {**extra, **(fields.get("meta") or {})} or None
        update_build(
            eng, t, series_id=series_id, tree=tree.name, config=config, chash=chash,
            status=status, **fields,
        )  # fmt: skip

    try:
        res = build_commit(
            repo,
            t.commit,
            config=config,
            tree=tree.name,
            jobs=make_jobs,
            on_configured=lambda chash: record(chash, "building"),
        )
    except (StackbenchError, OSError) as exc:
        fault = build_fault(exc)
        if fault:  # a full or read-only disk: the build is tried again, not failed
            raise HostFault(f"building {t.name}: {fault}") from exc
        # e.g. a patch that breaks Kconfig: this kernel failed, the others go on
        t.outcome, t.error = "build-failed", str(exc).splitlines()[0][:300]
        record("", "build-failed", log=str(exc)[-8000:])
        return
    fault = None if res.ok else disk_fault_in(res.log_tail)
    if fault:
        raise HostFault(f"building {t.name}: {fault}")
    t.build = res
    if not res.ok:
        t.outcome = "build-failed"
        t.error = first_error(res.log_tail) or "make failed"
        record(res.config_hash, "build-failed", log=res.log_tail, duration_s=res.duration_s)
        return
    t.outcome = "built"
    record(
        res.config_hash,
        "built",
        log="",
        artifact_path=str(res.artifact_dir),
        duration_s=None if res.reused else res.duration_s,
        meta={
            "artifact": res.key,
            "kernel_release": res.kernel_release,
            "modules": sorted(res.modules),
            "module_error": res.module_error,
        },
    )


def record_build_failure(
    eng: Engine,
    *,
    commit: str,
    tree: str,
    config: str,
    reason: str,
    log: str,
    series_id: int | None = None,
    name: str = "",
    config_hash: str = "",
    compiler: str | None = None,
    duration_s: float | None = None,
) -> int:
    """A build that failed outside the in-process executor (a Buildbot worker's step): its
    ``kernel_build`` row says ``build-failed`` with the reason and the log's tail, and the
    series gets an event. Returns the row's id."""
    with db.session(eng) as s:
        tree_id = series_store.tree_id(s, series_id) if series_id else None
        patch = series_store.patch_for_commit(s, series_id, commit) if series_id else None
        task = KernelTask(
            label="", name=name or commit[:12], commit=commit, patch_id=patch.id if patch else None
        )
        row = kernel_row(
            s, series_id, task, tree_id, config_hash, compiler or kbuild.compiler_id(), config
        )
        previous = row.status
        kernels_store.update_build(
            row,
            status="build-failed",
            log=f"{reason}\n{log}"[-8000:],
            duration_s=duration_s,
            meta={"error": reason[:300], "tree": tree},
        )
        if previous != "build-failed" and series_id:
            event(s, series_id, f"build:{row.id}", "build-failed", f"{task.name}: {reason}")
        return row.id


def record_built(eng: Engine, sid: int, builds: list[dict[str, Any]]) -> None:
    """The kernels Buildbot workers built for series SID, recorded ``built`` as soon as the
    master has them (each finished kernel build's ``kernel`` property, the worker's
    kernel.json) and tied to the series' patches, so its page shows them before the first
    benchmark's runs arrive. The runs' upload later finds the same row (same key)."""
    with db.session(eng) as s:
        tree_id = series_store.tree_id(s, sid)
        for b in builds:
            k = ((b.get("properties") or {}).get("kernel") or [None])[0]
            if not b.get("complete") or not isinstance(k, dict) or not k.get("config_hash"):
                continue
            patch = series_store.patch_for_commit(s, sid, k["commit"])
            task = KernelTask(label="", name=k.get("name") or k["commit"][:12],
                              commit=k["commit"], patch_id=patch.id if patch else None)  # fmt: skip
            row = kernel_row(s, sid, task, tree_id, k["config_hash"], str(k.get("compiler", "")),
                             str(k.get("config_name", "")))  # fmt: skip
            if row.status != "built":
                kernels_store.update_build(
                    row, status="built", meta={"buildbot_build": b["buildid"]}
                )
                event(s, sid, f"build:{row.id}", "built", f"{task.name}: built at Buildbot")
        kernels_store.attach_to_series(s, sid)
