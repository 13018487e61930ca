"""The build stage: one kernel per commit (reused from the artifact store when built
before), each with its ``kernel_build`` row: building, built, or build-failed with the log's
tail, so the series page can say why without anyone watching the build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
from stackbench.jobs.highalloc import build_module
from stackbench.jobs.series_state import KernelTask, SeriesRun, event
from stackbench.jobs.settings import Settings
from stackbench.kernels import build as kbuild
from stackbench.kernels import trees
from stackbench.resultsdb import db, kernels_store, series_store


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
    eng: Engine, sr: SeriesRun, t: KernelTask, chash: str, status: str, **fields: Any
) -> None:
    compiler = kbuild.compiler_id()
    with db.session(eng) as s:
        tree_id = series_store.tree_id(s, sr.series_id)
        row = kernel_row(s, sr.series_id, t, tree_id, chash, compiler, t.config(sr.settings.config))
        previous = row.status
        kernels_store.update_build(row, status=status, **fields)
        t.build_id = row.id
        if previous != status:
            msg = f"{t.name}: {status}"
            if status == "build-failed":
                msg += "\n" + fields.get("log", "")[-2000:]
            event(s, sr.series_id, f"build:{row.id}", status, msg)


def build_one(eng: Engine, sr: SeriesRun, repo: Path, tree: trees.TreeDef, t: KernelTask) -> None:
    settings = sr.settings

    def configured(chash: str) -> None:
        update_build(eng, sr, t, chash, "building")

    try:
        res = kbuild.build(
            repo,
            t.commit,
            config=t.config(settings.config),
            tree=tree.name,
            jobs=settings.make_jobs,
            module_builder=build_module,
            on_configured=configured,
        )
    except (StackbenchError, OSError) as exc:
        # e.g. a patch that breaks Kconfig: this kernel failed, the others go on
        t.outcome, t.error = "build-failed", str(exc).splitlines()[0][:300]
        update_build(eng, sr, t, "", "build-failed", log=str(exc)[-8000:])
        return
    t.build = res
    if not res.ok:
        t.outcome = "build-failed"
        first = next((ln for ln in res.log_tail.splitlines() if "error:" in ln), "")
        t.error = first.strip()[:300] or "make failed"
        update_build(
            eng,
            sr,
            t,
            res.config_hash,
            "build-failed",
            log=res.log_tail,
            duration_s=res.duration_s,
        )
        return
    t.outcome = "built"
    update_build(
        eng,
        sr,
        t,
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
