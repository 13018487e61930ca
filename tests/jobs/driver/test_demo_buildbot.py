"""``stackbench demo`` (its default path): the shipped stack applied here, then built and measured by
the embedded Buildbot master and its local QEMU worker (real kernels, real boots), and the
tables printed from what the worker stored."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_pipeline_e2e import QUICK_JOBS, kernel_env  # noqa: F401

from stackbench.resultsdb import series_runs_store
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
    from stackbench.jobs.driver import dispatcher_service
    from stackbench.jobs.executors import services

    # 2 runs: 2 rounds of boots; a cap of 3 boots lets an undecided headline add one round
    argv = ["demo", "--runs", "2", "--max-boots", "3", "--jobs", QUICK_JOBS[0], "--no-serve"]
    argv += ["--all"]
    try:
        assert main(argv) == 0
        first = capsys.readouterr()
        # handed to the dispatcher once, then watched: progress of both phases with an ETA
        assert "series 1 submitted to the dispatcher" in first.out
        assert re.search(r"series 1: building [0-3]/4", first.out)
        assert re.search(r"series 1: running \d+/\d+, ETA ", first.out)
        # builds and benchmarks overlap: a kernel's benchmark may end before the last build
        # is reported, so the watcher need not print "4 of 4 kernels built" on its own
        assert "series 1: running" in first.out
        assert re.search(r"4 kernels built, ([89]|1[0-2]) benchmarks measured", first.out)
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
            plans = series_runs_store.plans(s, series.id)
            rows = s.execute(
                select(KernelBuild.commit, Run.boot_id, Run.boot_round)
                .join(Run, Run.build_id == KernelBuild.id)
                .where(Run.status == "done")
                .order_by(Run.started_at)
            ).all()
            n_runs = s.scalar(select(func.count()).select_from(Run))
        # each benchmark build is a boot of its own: every kernel booted at least twice,
        # the first two rounds in the plan's shuffled order, kernels interleaved
        assert plans[0]["boots_per_kernel"] == 2
        for c in commits:
            assert len({b for k, b, _r in rows if k == c}) >= 2
        assert [k for k, _b, r in rows if r <= 2] == [k for rnd in plans[0]["order"] for k in rnd]
        assert max(r for *_x, r in rows) <= 3  # the cap
        if len(plans) > 1:  # a headline still undecided at 2 boots: one more round, said why
            assert "headline undecided" in first.out
        # a finished demo is shown again without new builds
        assert main(argv) == 0
        second = capsys.readouterr()
        assert "submitted" not in second.out and "already done" in second.out
        with Session(eng) as s:
            assert s.scalar(select(func.count()).select_from(Run)) == n_runs
    finally:
        dispatcher_service.stop()
        services.stop()


def test_failures_through_buildbot_fail_the_series_with_the_reason(eng, kernel_env, capsys):  # noqa: F811
    """A commit that does not build, and one whose kernel panics (its builds succeed, its
    runs do not): both series end failed, naming the kernel and what went wrong."""
    from stackbench.cli import main
    from stackbench.jobs.driver import dispatcher_service
    from stackbench.jobs.executors import services

    quick = ["--runs", "1", "--jobs", QUICK_JOBS[0], "--no-serve"]
    try:
        assert main(["demo", "--stack", "broken-build", *quick]) == 1
        assert main(["demo", "--stack", "panic-boot", *quick]) == 1
    finally:
        dispatcher_service.stop()
        services.stop()
    out = capsys.readouterr().out
    with Session(eng) as s:
        broken, panic = s.scalars(select(Series).order_by(Series.id)).all()
    assert broken.state == "failed" and panic.state == "failed"
    # the dispatcher's reason: the kernel, what failed and the Buildbot log's address
    assert broken.error.startswith("1/1-") and ": build failed" in broken.error
    assert "(log: http" in broken.error
    assert panic.error.startswith("1/1-") and "1 run(s) crashed" in panic.error
    assert "[failed]" in out
