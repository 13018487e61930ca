"""Slow clients (issue 27): 16 connections sending a header line every 5 s held every thread
of gunicorn's gthread workers, and every other request timed out. Behind the shipped nginx
(stackbench proxy) they hold nothing of gunicorn's. Real gunicorn, real nginx, real sockets on
127.0.0.1; each wait is bounded."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
    reason="nginx is not installed (scripts/bootstrap installs nginx-light)",
)

THREADS = 2  # one gunicorn worker of two threads: two slow clients are enough to starve it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()
        return r.status


def wait_until_up(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited: {proc.stdout.read()[-2000:]}")
        with contextlib.suppress(OSError):
            if get(url, 2) == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not answer {url}")


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], url: str, what: str):
    proc = subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until_up(url, proc, what)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


class SlowClient:
    """A client that sends its request headers one line at a time, never finishing."""

    def __init__(self, port: int, every: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        self.every = every
        self.stop = threading.Event()
        self.cut_after: float | None = None  # seconds until the server hung up
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        start = time.monotonic()
        n = 0
        while not self.stop.wait(self.every):
            try:
                self.sock.sendall(b"X-Slow-%d: x\r\n" % n)
            except OSError:
                self.cut_after = time.monotonic() - start
                return
            n += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@contextlib.contextmanager
def slow_clients(port: int, count: int, every: float = 0.5):
    clients = [SlowClient(port, every) for _ in range(count)]
    try:
        time.sleep(0.5)  # accepted and handed to gunicorn's threads (or nginx's buffers)
        yield clients
    finally:
        for c in clients:
            c.close()


@pytest.fixture
def gunicorn(db_url, tmp_path):
    from stackbench.web.services import gunicorn_argv

    port = free_port()
    argv = gunicorn_argv("127.0.0.1", port, workers=1, threads=THREADS)
    env = {"STACKBENCH_SECRET_KEY": "slow-test", "STACKBENCH_TRUSTED_PROXIES": "1"}
    with started(argv, env, f"http://127.0.0.1:{port}/api/", "gunicorn"):
        yield port


def test_slow_clients_starve_bare_gunicorn(gunicorn):
    """The defect itself, so the proxy's test below means something: as many slow clients
    as threads, and a normal request waits for nothing."""
    with slow_clients(gunicorn, THREADS), pytest.raises((TimeoutError, urllib.error.URLError)):
        get(f"http://127.0.0.1:{gunicorn}/api/", timeout=3)


def test_behind_the_proxy_slow_clients_hold_up_nobody(gunicorn, tmp_path):
    from stackbench.web import proxy

    port = free_port()
    argv = proxy.prepare(
        f"127.0.0.1:{port}", f"127.0.0.1:{gunicorn}", tmp_path / "proxy", header_timeout=3
    )
    with started(argv, {}, f"http://127.0.0.1:{port}/api/", "nginx"):
        with slow_clients(port, 16) as clients:
            for _ in range(5):
                assert get(f"http://127.0.0.1:{port}/api/", timeout=5) == 200
            # a request body that never ends is nginx's to wait for too
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"POST /api/series HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
                assert get(f"http://127.0.0.1:{port}/api/", timeout=5) == 200
            # and nginx hangs up on headers that take longer than the timeout
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(c.cut_after is None for c in clients):
                time.sleep(0.2)
            assert all(c.cut_after is not None and c.cut_after < 8 for c in clients), [
                c.cut_after for c in clients
            ]
        assert get(f"http://127.0.0.1:{gunicorn}/api/", timeout=5) == 200
