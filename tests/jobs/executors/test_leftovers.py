"""Nothing left behind (issue 38): a boot's working directory goes once its runs are
stored (a failed boot's is kept, then removed after STACKBENCH_KEEP_FAILED_BOOTS_DAYS),
and the worktree of an apply that was killed is removed when the dispatcher starts."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from helpers.lifecycle import git, wait_for

from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

pytest_plugins = ["helpers.lifecycle"]

DAY = 86400.0


def _run(status: str = "done", error: str = "") -> RunData:
    return RunData(job=JobSpec("vm-scalability", "anon-w-seq"), kernel=KernelSpec("a" * 40),
                   machine=MachineSpec("qemu-local", kind="qemu"), iteration=0,
                   samples={}, status=status, error=error)  # fmt: skip


def _job_dirs(home: Path) -> list[Path]:
    return sorted(home.glob("stackbench-job-*"))


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def test_a_boot_leaves_its_directory_only_when_it_failed_and_not_for_long(tmp_path, monkeypatch):
    from stackbench.jobs.executors import boot_stage

    home = tmp_path / "home"
    monkeypatch.setenv("STACKBENCH_HOME", str(home))
    ok = boot_stage.boot_workdir()
    (ok / "console.log").write_text("stackbench: guest up\n")
    assert ok.parent == home.resolve() and _job_dirs(home) == [ok]
    assert boot_stage.release_workdir(ok, [_run(), _run()]) is False
    assert _job_dirs(home) == []

    bad = boot_stage.boot_workdir()
    (bad / "console.log").write_text("Kernel panic - not syncing\n")
    assert boot_stage.release_workdir(bad, [_run(), _run("crashed", "kernel panic\ntail")])
    assert (bad / "console.log").exists()
    assert "1 of 2 runs failed: kernel panic" in (bad / boot_stage.FAILED_MARK).read_text()
    # a boot that gave no runs at all failed too
    empty = boot_stage.boot_workdir()
    assert boot_stage.release_workdir(empty, []) and empty.exists()

    # kept for the default 7 days, counted from the failure
    _age(bad / boot_stage.FAILED_MARK, 6)
    assert boot_stage.prune_workdirs() == [] and bad.exists()
    _age(bad / boot_stage.FAILED_MARK, 8)
    assert boot_stage.prune_workdirs() == [bad] and not bad.exists()
    # the setting shortens it; the next boot's release does the pruning
    monkeypatch.setenv("STACKBENCH_KEEP_FAILED_BOOTS_DAYS", "1")
    _age(empty / boot_stage.FAILED_MARK, 2)
    third = boot_stage.boot_workdir()
    boot_stage.release_workdir(third, [_run()])
    assert _job_dirs(home) == []


def test_a_boot_killed_before_its_runs_were_stored_goes_after_a_day(tmp_path, monkeypatch):
    from stackbench.jobs.executors import boot_stage

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STACKBENCH_KEEP_FAILED_BOOTS_DAYS", "0")
    running = boot_stage.boot_workdir()  # a boot under way has no mark and a young dir
    killed = boot_stage.boot_workdir()
    _age(killed, 1.5)
    assert boot_stage.prune_workdirs() == [killed]
    assert running.exists()


def test_a_bad_age_setting_is_one_line(tmp_path, monkeypatch):
    from stackbench.config import SettingError
    from stackbench.jobs.executors import boot_stage

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STACKBENCH_KEEP_FAILED_BOOTS_DAYS", "a week")
    with pytest.raises(SettingError) as raised:
        boot_stage.prune_workdirs()
    assert str(raised.value) == (
        "STACKBENCH_KEEP_FAILED_BOOTS_DAYS must be a whole number, not 'a week'"
    )
    monkeypatch.setenv("STACKBENCH_KEEP_FAILED_BOOTS_DAYS", "-1")
    with pytest.raises(SettingError, match="must be 0 or more, not -1"):
        boot_stage.prune_workdirs()


def test_an_in_process_boot_keeps_a_failed_boots_directory(eng, tmp_path, monkeypatch):
    """The in-process executor's boot (boot_and_store, the pipeline's and the nightly's):
    a boot that could run nothing (the suite's module was not built for this kernel) has
    its runs stored failed, and its directory is the only one left."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from stackbench.jobs.executors import boot_stage
    from stackbench.jobs.executors.jobspecs import plan_for, resolve_jobs
    from stackbench.jobs.executors.plan import Boot
    from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
    from stackbench.jobs.executors.settings import Settings
    from stackbench.kernels.build import BuildResult
    from stackbench.resultsdb.models import Run

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "bzImage").write_bytes(b"not booted")
    build = BuildResult(status="built", commit="b" * 40, config_hash="c" * 12, compiler="gcc",
                        artifact_dir=art, objdir=tmp_path, srcdir=tmp_path, log_tail="",
                        duration_s=1.0, reused=True)  # fmt: skip
    t = KernelTask(label="base", name="v0", commit=build.commit, build=build, outcome="built")
    plan = plan_for(resolve_jobs(["stress-highalloc"], 1), Settings())
    boot = Boot(round=1, position=1, kernel=t.key, runs=1, first=0, boot_id="leftover-1")
    sr = SeriesRun(None, Settings(accel="tcg"), None)
    runs = boot_stage.boot_and_store(eng, sr, t, plan, boot, 1)
    assert runs and all(r.status == "failed" for r in runs)
    with Session(eng) as s:
        assert s.scalars(select(Run.status)).all() == ["failed"] * len(runs)
    home = Path(os.environ["STACKBENCH_HOME"])
    (kept,) = _job_dirs(home)
    assert "module for this suite was not built" in (kept / boot_stage.FAILED_MARK).read_text()


def test_the_dispatcher_removes_a_killed_applys_worktree_when_it_starts(eng, tree):
    from stackbench.jobs.driver.dispatch import Dispatcher
    from stackbench.kernels import paths

    repo = tree[0]
    root = paths.cache_root()
    # what `git am` in a worktree leaves when its process is killed: the directory and its
    # registration in the tree's git; and one of an apply still at work (it holds its lock)
    dead, live = root / "apply-7-0badf00d", root / "apply-8-1ce1ce11"
    for wt in (dead, live):
        git(repo, "worktree", "add", "--detach", "--quiet", str(wt), "v0")
    (dead / "mm" / "compaction.c").write_text("half applied\n")

    def listed() -> str:
        return git(repo, "worktree", "list", "--porcelain")

    assert str(dead) in listed()
    stop = threading.Event()
    holding = threading.Event()

    def live_apply():
        with paths.locked(live.name):
            holding.set()
            stop.wait(60)

    worker = threading.Thread(target=live_apply, daemon=True)
    worker.start()
    holding.wait(10)
    d = Dispatcher(eng, master=lambda: None)
    t = threading.Thread(target=d.serve, kwargs={"poll": 0.3}, daemon=True)
    t.start()
    try:
        wait_for("the killed apply's worktree to go", lambda: not dead.exists(), timeout=30)
        assert str(dead) not in listed()
        assert live.exists() and str(live) in listed()
    finally:
        d.stop.set()
        stop.set()
        t.join(15)
        worker.join(5)
