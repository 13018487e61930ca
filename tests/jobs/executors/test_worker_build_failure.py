"""A failed ``stackbench worker build`` (the step Buildbot runs) writes the kernel's
``kernel_build`` row as build-failed with the reason and the log's tail, and an event on the
series, so the series page shows why without a client polling the master; the step itself
fails with one line."""

from __future__ import annotations

import re

import pytest
from helpers.intake import submit_series
from helpers.kernelkit import require_kernel_tools, use_kernel_cache
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.cli import main
from stackbench.resultsdb.models import Event, KernelBuild, Patch, Series


def _series(eng, commit: str) -> int:
    with Session(eng) as s, s.begin():
        series = Series(title="mm: a patch", base_commit="0" * 40, state="building")
        series.patches.append(Patch(idx=1, total=1, subject="mm: a patch", commit_sha=commit))
        s.add(series)
        s.flush()
        return series.id


def test_a_commit_the_tree_lacks_fails_the_build_on_record(eng, monkeypatch, tmp_path, capsys):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    commit = "f" * 40
    sid = _series(eng, commit)
    argv = ["worker", "build", "--commit", commit, "--series", str(sid), "--name", "1/1-ffffffff"]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stackbench: error: kernel build of ffff")
    assert "kernel_build" in captured.out
    with Session(eng) as s:
        row = s.scalars(select(KernelBuild).where(KernelBuild.commit == commit)).one()
        assert row.status == "build-failed"
        assert row.series_id == sid and row.name == "1/1-ffffffff"
        patch = s.scalars(select(Patch).where(Patch.series_id == sid)).one()
        assert row.patch_id == patch.id
        reason = row.meta["error"]
        assert reason and reason in row.log and reason in err[0]
        events = s.scalars(select(Event).where(Event.series_id == sid)).all()
        assert [(e.subject, e.state) for e in events] == [(f"build:{row.id}", "build-failed")]
    assert not (tmp_path / "out" / "kernel.tar").exists()

    # the same failure again (a retried step) keeps one row and one event
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    with Session(eng) as s:
        assert len(s.scalars(select(KernelBuild).where(KernelBuild.commit == commit)).all()) == 1
        assert len(s.scalars(select(Event).where(Event.series_id == sid)).all()) == 1


@pytest.mark.slow
def test_a_commit_that_does_not_compile_records_the_compiler_error(eng, monkeypatch, tmp_path):
    """The shipped broken-build stack, applied for real, built by the worker step."""
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    from stackbench.jobs.driver.apply_stage import apply_only
    from stackbench.patches import stacks

    sid = submit_series(eng, stacks.stack_mbox("broken-build"), jobs=["vm-scalability"])
    applied = apply_only(eng, sid)
    assert applied is not None
    commit, name = applied[-1]
    argv = ["worker", "build", "--commit", commit, "--series", str(sid), "--name", name]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    with Session(eng) as s:
        row = s.scalars(select(KernelBuild).where(KernelBuild.commit == commit)).one()
        assert row.status == "build-failed" and row.series_id == sid
        assert re.search(r"error:", row.meta["error"]), row.meta
        assert row.config_hash and row.compiler  # the build got as far as configuring
