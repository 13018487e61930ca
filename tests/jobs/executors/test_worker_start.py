"""``stackbench up`` starts the local worker while the master may still be starting:
buildbot-worker's own start command gives up after about 10 s without the master's
"attached" and exits non-zero, yet the worker it started keeps trying. ``start_worker``
must count that as started, and refuse only when no worker process runs."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("buildbot_worker")

from stackbench.errors import StackbenchError  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_whose_master_is_not_up_yet_counts_as_started(tmp_path):
    base = tmp_path / "worker"
    services.create_worker(base, f"127.0.0.1:{_closed_port()}", "local", "secret")
    try:
        assert services.start_worker(base) is True
        assert services.running(base)
        assert services.start_worker(base) is False  # already running: not started twice
    finally:
        services.stop_worker(base)
    assert not services.running(base)


def test_a_worker_that_cannot_run_is_an_error(tmp_path):
    base = tmp_path / "worker"
    services.create_worker(base, f"127.0.0.1:{_closed_port()}", "local", "secret")
    (base / "buildbot.tac").write_text("raise SystemExit('broken on purpose')\n")
    with pytest.raises(StackbenchError):
        services.start_worker(base)
    assert not services.running(base)
