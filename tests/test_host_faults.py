"""Host faults are never the series' fault (issue 38): a disk that fills under the apply or
the build makes the series wait, saying why on its page, and go on once the disk has room
again. The disk is a small tmpfs, really filled with a file and really emptied."""

from __future__ import annotations

import base64
import errno
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from faultkit import fill
from sqlalchemy import select
from sqlalchemy.orm import Session
from test_lifecycle_support import git, wait_for

from stackbench.resultsdb.models import Event, KernelBuild, Series

pytest_plugins = ["test_lifecycle_support"]


@pytest.fixture
def small_disk():
    """A 4 MiB tmpfs, unmounted at the end."""
    where = Path(tempfile.mkdtemp(prefix="sb-small-disk-"))
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        where.rmdir()
        pytest.skip("needs a mount namespace that allows tmpfs mounts (root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
        where.rmdir()


@pytest.fixture
def disk_tree(tree, small_disk, monkeypatch, tmp_path):
    """The tiny tree's repository, its apply worktrees and kernel object dirs on the small
    disk (as a kernel cache holds them), and a series adding a 300 kB file: (disk, clone,
    base)."""
    repo, work, base = tree
    on_disk = small_disk / "trees" / "tiny"
    git(tmp_path, "clone", "-q", str(repo), str(on_disk))
    git(on_disk, "tag", "-f", "v0", base)
    (tmp_path / "trees" / "tiny.yaml").write_text(
        f"name: tiny\ndescription: test tree\nsource:\n  path: {on_disk}\ndefault_base: v0\n"
    )
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(small_disk))
    # random text: git cannot compress it into the little room left
    blob = base64.encodebytes(os.urandom(225_000))
    (work / "mm" / "table.txt").write_bytes(blob)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "mm: a big table")
    return small_disk, work, base


def _submit(tmp_path: Path, work: Path, base: str, eng) -> int:
    from stackbench.cli import main

    mbox = tmp_path / "series.mbox"
    mbox.write_text(git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n")
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--runs", "1", "--no-wait"]) == 0
    with Session(eng) as s:
        return s.scalars(select(Series.id).order_by(Series.id.desc())).first()


def _events(eng, sid: int) -> list[tuple[str, str]]:
    with Session(eng) as s:
        rows = s.scalars(select(Event).where(Event.series_id == sid).order_by(Event.id))
        return [(e.state, e.message) for e in rows]


def _warnings(eng, sid: int) -> list[str]:
    from stackbench.web import create_app

    app = create_app({"ENGINE": eng, "SECRET_KEY": "test", "TESTING": True})
    r = app.test_client().get(f"/series/{sid}/state.json")
    assert r.status_code == 200
    return r.get_json()["warnings"]


def test_a_full_disk_under_git_am_waits_and_the_series_applies_once_emptied(
    eng, disk_tree, tmp_path
):
    from stackbench.jobs.driver.dispatch import Dispatcher

    disk, work, base = disk_tree
    sid = _submit(tmp_path, work, base, eng)
    # room for the worktree, not for the patch: git am itself runs out of disk
    filler = fill(disk, leave=160_000)
    d = Dispatcher(eng, master=lambda: None)
    t = threading.Thread(target=d.run, kwargs={"poll": 0.3}, daemon=True)
    t.start()
    try:
        x = wait_for("the series to wait on the full disk", lambda: _waiting(eng, sid), 60)
        assert x.state in ("new", "applying"), (x.state, x.error)
        said = _fault(eng, sid)["error"]
        assert "No space left on device" in said or "Out of diskspace" in said, said
        # a second and third try meet the same full disk: still waiting, never failed
        wait_for("two more tries", lambda: len(d._backoff) and d._backoff[sid] >= 4.0, 30)
        with Session(eng) as s:
            x = s.get(Series, sid)
            assert x.state in ("new", "applying") and not x.error, (x.state, x.error)
            assert all(p.state != "apply-failed" for p in x.patches)
        assert any(w.startswith("waiting on a host fault") for w in _warnings(eng, sid))
        waits = [m for st, m in _events(eng, sid) if st == "waiting"]
        assert len(waits) == 1 and "retried until fixed" in waits[0], waits
        filler.unlink()  # the disk has room again

        def applied():
            with Session(eng) as s:
                x = s.get(Series, sid)
                return x.state not in ("new", "applying") and x

        x = wait_for("the series to apply", applied, timeout=60)
    finally:
        d.stop.set()
        t.join(10)
        d._thread.join(60)  # the in-process run it went on with
    with Session(eng) as s:
        x = s.get(Series, sid)
    assert x.state != "apply-failed", x.error
    assert not _fault(eng, sid)
    states = [st for st, _m in _events(eng, sid)]
    assert states.index("waiting") < states.index("applied") and "resumed" in states, states
    assert "space" not in (x.error or "").lower(), x.error


def test_a_full_disk_under_the_build_leaves_the_series_building(eng, disk_tree, tmp_path):
    """The in-process pipeline meets a full disk where the kernel is built: it stops with
    the host's reason and no kernel is recorded build-failed; the series is not failed."""
    from stackbench.jobs.driver import pipeline
    from stackbench.jobs.driver.apply_stage import apply_only
    from stackbench.jobs.executors.faults import host_fault

    disk, work, base = disk_tree
    sid = _submit(tmp_path, work, base, eng)
    apply_only(eng, sid)
    filler = fill(disk)
    with pytest.raises(Exception) as raised:
        pipeline.run_series(eng, sid, executor="in-process")
    assert host_fault(raised.value), raised.value
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "building" and not x.error, (x.state, x.error)
        assert not s.scalars(select(KernelBuild).where(KernelBuild.status == "build-failed")).all()
    filler.unlink()
    # with room again the build runs: the tiny tree is no kernel, which is the series' fault
    assert pipeline.run_series(eng, sid, executor="in-process") == "failed"
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert "space" not in (x.error or "").lower(), x.error


def test_what_counts_as_a_host_fault():
    """git's own word for a full disk is one (the second try that failed a series), a
    patch's conflict is not, nor a build's "Permission denied" (a script without its mode)."""
    from stackbench.jobs.executors.faults import build_fault, disk_fault_in, host_fault
    from stackbench.proc import CommandError

    git_full = "fatal: sha1 file '/t/.git/worktrees/a/index.lock' write error. Out of diskspace"
    assert host_fault(CommandError(["git", "read-tree"], 128, git_full)).endswith(git_full)
    assert host_fault(OSError(errno.EROFS, "Read-only file system")) is not None
    conflict = "patch failed: mm/compaction.c:1\nmm/compaction.c: patch does not apply"
    assert host_fault(CommandError(["git", "am"], 1, conflict)) is None
    assert disk_fault_in(conflict) is None
    assert disk_fault_in("/bin/sh: 1: scripts/x.sh: Permission denied") is None
    assert disk_fault_in("cc1: fatal error: No space left on device") is not None
    # what a build raises: the same narrower reading
    script = CommandError(["make"], 2, "/bin/sh: 1: scripts/x.sh: Permission denied")
    assert build_fault(script) is None and host_fault(script) is not None
    assert build_fault(OSError(errno.ENOSPC, "No space left on device")) is not None


def test_a_buildbot_workers_build_on_a_full_disk_waits_and_goes_on(eng, disk_tree, tmp_path):
    """`stackbench worker build` (the Buildbot step) on a full disk: it says why in its log
    and on the series' page, and tries again; once there is room it goes on to the build's
    own end (the tiny tree is no kernel: a build failure, the commit's, not the disk's)."""
    import sys

    disk, work, base = disk_tree
    sid = _submit(tmp_path, work, base, eng)
    filler = fill(disk)
    argv = [sys.executable, "-m", "stackbench", "worker", "build", "--commit", base,
            "--tree", "tiny", "--series", str(sid), "--out", str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:

        def waiting():
            return _fault(eng, sid)

        said = wait_for("the build to wait on the full disk", waiting, timeout=60)
        assert "No space left on device" in said["error"], said
        assert said["step"].startswith("build of ")
        assert any(w.startswith("waiting on a host fault") for w in _warnings(eng, sid))
        filler.unlink()
        assert proc.wait(timeout=120) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    out = "".join(lines)
    assert "waiting on a host fault (retry in 2 s)" in out, out
    assert "kernel build of" in out and "space" not in out.splitlines()[-1].lower(), out
    assert not _fault(eng, sid)
    assert any(st == "waiting" for st, _m in _events(eng, sid))


def _fault(eng, sid: int) -> dict | None:
    """The host fault the series' attempt says it waits on (None: none)."""
    from stackbench.resultsdb import series_runs_store

    with Session(eng) as s:
        attempt = series_runs_store.current(s, sid)
        return attempt.host_fault if attempt is not None else None


def _waiting(eng, sid: int) -> Series | None:
    """The series once it says it waits on a host fault, else None."""
    with Session(eng) as s:
        x = s.get(Series, sid)
        return x if _fault(eng, sid) else None
