"""The whole pipeline on real kernels: git am, builds, QEMU boots, guest runs, ingest, tables;
and each failure stage with a shipped stack made to fail there.

Kernel state (tree repo, ccache, object dir, artifacts) lives in the shared test cache, so the
cold build happens once per machine; each commit after it rebuilds incrementally."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers.intake import submit_series
from helpers.kernelkit import require_kernel_tools, use_kernel_cache
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.jobs.driver import pipeline
from stackbench.jobs.executors.progress import ProgressEvent
from stackbench.jobs.executors.settings import Settings
from stackbench.patches import stacks
from stackbench.resultsdb.models import Event, KernelBuild, Run, RunLog, Sample, Series
from stackbench.resultsdb.tables import render

pytestmark = pytest.mark.slow

# one short run of each benchmark
SHORT_JOBS = [
    "vm-scalability[test=anon-w-seq,mem_fraction=0.05]",
    "thpscale[max_threads=2,mapsize_fraction=0.1]",
    "stress-highalloc[pace_ms=1,alloc_fraction=0.2,load_fraction=0.1]",
]
# the failure paths only need the base to run something quick
QUICK_JOBS = ["vm-scalability[test=anon-w-seq,mem_fraction=0.05]"]


@pytest.fixture
def kernel_env(monkeypatch):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)


def settings(**kw) -> Settings:
    kw.setdefault("init_timeout_s", 60)
    # these tests check the plan and the failure paths, not verdicts: no extra rounds
    kw.setdefault("adaptive", False)
    return Settings(cpus=2, mem_mb=1024, **kw)


def first_patch(name: str) -> bytes:
    """The first patch of a shipped stack, sent on its own (as [PATCH 1/1])."""
    f = next(f for f in stacks.stack_files(name) if not f.name.startswith("0000-"))
    return re.sub(rb"\[PATCH 1/\d+\]", b"[PATCH 1/1]", f.read_bytes(), count=1)


def builds_by_label(eng, sid: int) -> dict[str, KernelBuild]:
    with Session(eng) as s:
        series = s.get(Series, sid)
        out = {}
        rows = {k.commit: k for k in s.scalars(select(KernelBuild))}
        out["base"] = rows.get(series.base_commit)
        for p in series.patches:
            out[f"{p.idx}"] = rows.get(p.commit_sha) if p.commit_sha else None
        return out


def runs_of(eng, build_id: int) -> list[Run]:
    with Session(eng) as s:
        return list(s.scalars(select(Run).where(Run.build_id == build_id).order_by(Run.id)))


def events(eng, sid: int) -> list[tuple[str, str]]:
    with Session(eng) as s:
        return [
            (e.subject, e.state)
            for e in s.scalars(select(Event).where(Event.series_id == sid).order_by(Event.id))
        ]


def test_base_and_one_commit_end_to_end(eng, kernel_env, capsys):
    seen: list[ProgressEvent] = []
    sid = submit_series(eng, first_patch("compaction-demo"), jobs=SHORT_JOBS, runs=1)
    state = pipeline.run_series(eng, sid, progress=seen.append, settings=settings())
    assert state == "done"
    b = builds_by_label(eng, sid)
    assert b["base"].status == "built" and b["1"].status == "built"
    assert b["base"].name == "v6.1-debian"
    assert b["1"].name == f"1/1-{b['1'].commit[:8]}"
    assert Path(b["1"].artifact_path, "bzImage").is_file()
    assert "stackbench_highalloc" in b["1"].meta["modules"]
    for k in (b["base"], b["1"]):
        runs = runs_of(eng, k.id)
        assert sorted(r.status for r in runs) == ["done"] * 3, [r.error for r in runs]
        with Session(eng) as s:
            assert s.scalar(select(Sample.value).where(Sample.run_id == runs[0].id).limit(1))
            logs = set(s.scalars(select(RunLog.name).where(RunLog.run_id == runs[0].id)))
        assert "console.log" in logs
    # state transitions, in order, in the event log
    states = [st for subj, st in events(eng, sid) if subj == f"series:{sid}"]
    assert states[:1] == ["new"]
    # once done, the service publishes the series' comparison of the base and every commit
    assert states[-5:] == ["applied", "building", "running", "done", "compared"]
    stages = {ev.stage for ev in seen}
    assert {"apply", "build", "boot", "run", "ingest", "done"} <= stages
    assert any(ev.stage == "run" and ev.step == 3 for ev in seen)
    # tables render from the stored samples
    refs = [b["base"].commit, b["1"].commit]
    lkp = render.render(eng, refs, style="lkp", all_rows=True, suite="vm-scalability")
    assert "vm-scalability.throughput" in lkp
    mm = render.render(eng, refs, style="mmtests", suite="thpscale")
    assert "fault-both" in mm or "fault-huge" in mm
    # a second run of the finished series changes nothing and builds nothing
    before = len(runs_of(eng, b["1"].id))
    assert pipeline.run_series(eng, sid, settings=settings()) == "done"
    assert len(runs_of(eng, b["1"].id)) == before


def test_broken_apply_builds_nothing(eng, kernel_env):
    sid = submit_series(eng, stacks.stack_mbox("broken-apply"), jobs=QUICK_JOBS, runs=1)
    assert pipeline.run_series(eng, sid, settings=settings()) == "apply-failed"
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "apply-failed"
        assert "does not apply" in series.error
        assert [p.state for p in series.patches] == ["apply-failed"]
        assert s.scalars(select(KernelBuild)).first() is None


def test_broken_build_fails_that_commit_only(eng, kernel_env):
    sid = submit_series(eng, stacks.stack_mbox("broken-build"), jobs=QUICK_JOBS, runs=1)
    assert pipeline.run_series(eng, sid, settings=settings()) == "failed"
    b = builds_by_label(eng, sid)
    assert b["1"].status == "build-failed"
    assert "error:" in b["1"].log
    assert not b["1"].artifact_path
    assert runs_of(eng, b["1"].id) == []
    # the base was still built, booted and measured
    assert b["base"].status == "built"
    assert [r.status for r in runs_of(eng, b["base"].id)] == ["done"]
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert "build-failed" in series.error
    assert (f"build:{b['1'].id}", "build-failed") in events(eng, sid)


def test_panic_boot_is_crashed_with_console_tail(eng, kernel_env):
    sid = submit_series(eng, stacks.stack_mbox("panic-boot"), jobs=QUICK_JOBS, runs=1)
    assert pipeline.run_series(eng, sid, settings=settings()) == "failed"
    b = builds_by_label(eng, sid)
    assert b["1"].status == "built"
    runs = runs_of(eng, b["1"].id)
    assert [r.status for r in runs] == ["crashed"]
    assert "Kernel panic" in runs[0].error
    assert "--- console ---" in runs[0].error
    with Session(eng) as s:
        console = s.scalar(
            select(RunLog.content).where(RunLog.run_id == runs[0].id, RunLog.name == "console.log")
        )
    assert b"Kernel panic" in console
    assert [r.status for r in runs_of(eng, b["base"].id)] == ["done"]
    # the base's boot left nothing; the crashed one's directory is kept for a look (issue 38)
    (kept,) = Path(os.environ["STACKBENCH_HOME"]).glob("stackbench-job-*")
    assert b"Kernel panic" in (kept / "console.log").read_bytes()
    assert "runs failed" in (kept / "failed-boot").read_text()


def _qemu_running_under(path: Path) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "qemu-system" in cmd and str(path) in cmd:
                return True
    return False


def test_hang_boot_times_out_and_vm_is_killed(eng, kernel_env, tmp_path):
    sid = submit_series(eng, stacks.stack_mbox("hang-boot"), jobs=QUICK_JOBS, runs=1)
    assert pipeline.run_series(eng, sid, settings=settings(init_timeout_s=60)) == "failed"
    b = builds_by_label(eng, sid)
    runs = runs_of(eng, b["1"].id)
    assert [r.status for r in runs] == ["timeout"]
    assert "within 60 s" in runs[0].error
    assert not _qemu_running_under(tmp_path)
    assert [r.status for r in runs_of(eng, b["base"].id)] == ["done"]


def test_demo_cli_twice_reuses_everything(eng, kernel_env, capsys):
    from stackbench.cli import main

    # one run per kernel: LKP's rule needs 3 runs a side to select a row, so ask for all rows
    argv = ["demo", "--in-process", "--runs", "1", "--jobs", QUICK_JOBS[0], "--no-serve", "--all"]
    assert main(argv) == 0
    first = capsys.readouterr()
    assert "== vm-scalability (LKP) ==" in first.out
    assert "== stackbench verdicts" in first.out
    assert "vm-scalability.throughput" in first.out
    assert "build 4/4" in first.err
    with Session(eng) as s:
        n_runs = len(list(s.scalars(select(Run))))
    assert n_runs == 4
    assert main(argv) == 0
    second = capsys.readouterr()
    assert "build" not in second.err  # nothing was even looked at: the series is done
    assert second.out.count("vm-scalability.throughput") == first.out.count(
        "vm-scalability.throughput"
    )
    with Session(eng) as s:
        assert len(list(s.scalars(select(Run)))) == n_runs
