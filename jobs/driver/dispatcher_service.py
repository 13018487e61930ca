"""The background services of ``stackbench up``/``down`` that are stackbench commands
themselves: the dispatcher (``stackbench dispatcher``, run under :func:`keep_alive`, which
starts it again if it dies) and the list watcher (``stackbench lists watch``), each one
process with its pidfile and log under $STACKBENCH_HOME. They start after the Buildbot
master and the web UI and stop first."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from stackbench import config
from stackbench.services import SERVICES

KEEP_ALIVE_MAX_S = 60.0


def pidfile(name: str = "dispatcher") -> Path:
    return config.home() / f"{name}.pid"


def logfile(name: str = "dispatcher") -> Path:
    return config.home() / f"{name}.log"


def running_pid(name: str = "dispatcher") -> int | None:
    from stackbench import proc

    return proc.live_pid(pidfile(name))


def start_command(name: str, argv: list[str], env: dict[str, str] | None = None) -> str:
    """Start ``stackbench ARGV`` in the background as service NAME (once)."""
    pid = running_pid(name)
    if pid:
        return f"{name}: already running (pid {pid})"
    from stackbench.resultsdb import db

    db.engine()  # up and migrated before the service connects
    child_env = {**os.environ, **(env or {})}
    if not config.database_url():
        child_env["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    config.home().mkdir(parents=True, exist_ok=True)
    with open(logfile(name), "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stackbench", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,  # `up` returns; the service stays
        )
    pidfile(name).write_text(f"{proc.pid}\n")
    time.sleep(0.5)
    if proc.poll() is not None:
        pidfile(name).unlink(missing_ok=True)
        return f"{name}: exited at once (status {proc.returncode}); see {logfile(name)}"
    return f"{name}: started (pid {proc.pid}, log {logfile(name)})"


def keep_alive(argv: list[str]) -> int:
    """Run ``stackbench dispatcher ARGV`` and start it again whenever it dies (a crash, a
    kill, a database away for longer than it was started for), waiting 1 s doubling to
    KEEP_ALIVE_MAX_S between starts (back to 1 s after a run of a minute). SIGTERM is
    passed on; the dispatcher's own exit status 0 (it was told to stop) ends it."""
    log = logging.getLogger("stackbench")
    stopping = threading.Event()
    child: list[subprocess.Popen] = []

    def on_term(*_: object) -> None:
        stopping.set()
        if child and child[-1].poll() is None:
            child[-1].terminate()

    signal.signal(signal.SIGTERM, on_term)
    delay = 1.0
    while not stopping.is_set():
        began = time.monotonic()
        child.append(subprocess.Popen([sys.executable, "-m", "stackbench", "dispatcher", *argv],
                                      stdin=subprocess.DEVNULL))  # fmt: skip
        if stopping.is_set():  # SIGTERM came while it was being started
            child[-1].terminate()
        rc = child[-1].wait()
        child.clear()
        if stopping.is_set() or rc == 0:
            return 0
        if time.monotonic() - began > 60:
            delay = 1.0
        log.warning("dispatcher: exited with status %s; starting it again in %.0f s", rc, delay)
        stopping.wait(delay)
        delay = min(delay * 2, KEEP_ALIVE_MAX_S)
    return 0


def stop_command(name: str, timeout: float = 30.0) -> str:
    pid = running_pid(name)
    if not pid:
        pidfile(name).unlink(missing_ok=True)
        return f"{name}: not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # our own child when started by this process: reap it, else poll for it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    pidfile(name).unlink(missing_ok=True)
    return f"{name}: stopped (pid {pid})"


def start(env: dict[str, str] | None = None) -> str:
    return start_command("dispatcher", ["dispatcher", "--keep-alive"], env)


def stop(timeout: float = 30.0) -> str:
    return stop_command("dispatcher", timeout)


def start_lists(env: dict[str, str] | None = None) -> str:
    return start_command("lists", ["lists", "watch"], env)


def stop_lists(timeout: float = 30.0) -> str:
    return stop_command("lists", timeout)


# the list watcher is after the dispatcher: `down` stops it first, so no new series arrive
SERVICES.append(("dispatcher", start, stop))
SERVICES.append(("lists", start_lists, stop_lists))
