"""``stackbench down`` in the middle of a benchmark: the embedded master and its local worker
are running a real QEMU guest (the base kernel, booted by ``stackbench worker bench``); after
``down`` no QEMU, worker, benchmark or master process is left, not even one re-parented to
init."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers.kernelkit import base_kernel

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

pytestmark = pytest.mark.slow


def processes_under(base: Path) -> dict[int, str]:
    """pid -> command line of every process whose cwd is inside ``base``."""
    base = base.resolve()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == base or base in cwd.parents):
            found[int(entry.name)] = cmd
    return found


def wait_for(what, check, timeout=300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what}")


def test_down_mid_benchmark_leaves_no_process_behind(eng, monkeypatch, capsys):
    from stackbench.cli import main
    from stackbench.jobs.executors import services
    from stackbench.jobs.executors.buildbot import client

    _repo, built = base_kernel(monkeypatch)
    monkeypatch.setenv("STACKBENCH_WEB_PORT", str(services.free_port()))
    root = services.buildbot_dir()
    try:
        assert main(["up"]) == 0
        master = client.embedded_master()
        client.wait_for_worker(master, services.LOCAL_WORKER)
        client.submit(
            master,
            commits=[built.commit],
            # long enough that the guest is still running when down comes
            jobs=["vm-scalability[test=anon-w-seq]"],
            runs=30,
            kinds=["qemu"],
        )
        guest = wait_for(
            "the worker's QEMU guest",
            lambda: [p for p, cmd in processes_under(root).items() if "qemu-system" in cmd],
        )
        daemons = [int((root / d / "twistd.pid").read_text()) for d in ("master", "worker-local")]
        time.sleep(3)
        assert all(not _zombie(p) for p in guest), "the guest ended before down: too short"
    finally:
        capsys.readouterr()
        assert main(["down"]) == 0
    out = capsys.readouterr().out
    assert "buildbot: stopped" in out
    left = processes_under(root)
    assert left == {}, left
    for pid in [*guest, *daemons]:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
