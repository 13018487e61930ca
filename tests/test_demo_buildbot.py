"""``stackbench demo`` (its default path): the shipped stack applied here, then built and measured by
the embedded Buildbot master and its local QEMU worker (real kernels, real boots), and the
tables printed from what the worker stored."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_pipeline_e2e import QUICK_JOBS, kernel_env  # noqa: F401

from stackbench.resultsdb.models import KernelBuild, Run, Series

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

pytestmark = pytest.mark.slow


def test_demo_through_buildbot_builds_and_measures_every_commit(
    eng,
    kernel_env,  # noqa: F811
    capsys,
    monkeypatch,
):
    from stackbench.cli import main
    from stackbench.jobs import services
    from stackbench.jobs.buildbot import drive

    monkeypatch.setattr(drive, "HEARTBEAT_S", 0.0)  # report running builds at every poll

    argv = ["demo", "--runs", "1", "--jobs", QUICK_JOBS[0], "--no-serve", "--all"]
    try:
        assert main(argv) == 0
        first = capsys.readouterr()
        assert "buildbot: series" in first.out and "submitted" in first.out
        finished = [ln for ln in first.out.splitlines() if ": success (" in ln]
        assert sum("bench-qemu #" in ln for ln in finished) == 4  # base + 3 patches, one job
        # progress against the plan's fan-out: 1 series + 4 kernel builds + 4 benchmarks
        assert finished[-1].endswith("(9/9 builds)"), finished[-1]
        assert any(", eta " in ln for ln in finished)
        running = [ln for ln in first.out.splitlines() if ln.startswith("buildbot: ")]
        assert len(running) > len(finished) + 2  # the heartbeat named unfinished builds
        assert "== vm-scalability (LKP) ==" in first.out
        assert "  v6.1-debian " in first.out and "  1/3-" in first.out  # the pipeline's names
        assert "vm-scalability.throughput" in first.out
        with Session(eng) as s:
            (series,) = s.scalars(select(Series)).all()
            assert series.state == "done"
            commits = {series.base_commit, *(p.commit_sha for p in series.patches)}
            measured = set(
                s.scalars(
                    select(KernelBuild.commit)
                    .join(Run, Run.build_id == KernelBuild.id)
                    .where(Run.status == "done")
                )
            )
            assert measured == commits and len(commits) == 4
            n_runs = s.scalar(select(func.count()).select_from(Run))
        # a finished demo is shown again without new builds
        assert main(argv) == 0
        second = capsys.readouterr()
        assert "submitted" not in second.out
        with Session(eng) as s:
            assert s.scalar(select(func.count()).select_from(Run)) == n_runs
    finally:
        services.stop()


def test_failures_through_buildbot_fail_the_series_with_the_reason(eng, kernel_env, capsys):  # noqa: F811
    """A commit that does not build, and one whose kernel panics (its builds succeed, its
    runs do not): both series end failed, naming the kernel and what went wrong."""
    from stackbench.cli import main
    from stackbench.jobs import services

    quick = ["--runs", "1", "--jobs", QUICK_JOBS[0], "--no-serve"]
    try:
        assert main(["demo", "--stack", "broken-build", *quick]) == 1
        assert main(["demo", "--stack", "panic-boot", *quick]) == 1
    finally:
        services.stop()
    out = capsys.readouterr().out
    with Session(eng) as s:
        broken, panic = s.scalars(select(Series).order_by(Series.id)).all()
    assert broken.state == "failed" and panic.state == "failed"
    assert (
        "build-linux-6.1-tiny-guest 1/1-" in broken.error and "failure (log: http" in broken.error
    )
    assert panic.error.startswith("1/1-") and panic.error.endswith("1 run(s) crashed")
    assert "[failed]" in out
