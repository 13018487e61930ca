"""The dispatcher as an embedded service of ``stackbench up``/``down``: one
``stackbench dispatcher`` process in the background, its pidfile and log under
$STACKBENCH_HOME. It starts after the Buildbot master and the web UI and stops first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stackbench import config
from stackbench.services import SERVICES


def pidfile() -> Path:
    return config.home() / "dispatcher.pid"


def logfile() -> Path:
    return config.home() / "dispatcher.log"


def running_pid() -> int | None:
    from stackbench import proc

    return proc.live_pid(pidfile())


def start(env: dict[str, str] | None = None) -> str:
    pid = running_pid()
    if pid:
        return f"dispatcher: already running (pid {pid})"
    from stackbench.resultsdb import db

    db.engine()  # up and migrated before the dispatcher connects
    child_env = {**os.environ, **(env or {})}
    if not config.database_url():
        child_env["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    config.home().mkdir(parents=True, exist_ok=True)
    with open(logfile(), "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stackbench", "dispatcher"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,  # `up` returns; the dispatcher stays
        )
    pidfile().write_text(f"{proc.pid}\n")
    time.sleep(0.5)
    if proc.poll() is not None:
        pidfile().unlink(missing_ok=True)
        return f"dispatcher: exited at once (status {proc.returncode}); see {logfile()}"
    return f"dispatcher: started (pid {proc.pid}, log {logfile()})"


def stop(timeout: float = 30.0) -> str:
    pid = running_pid()
    if not pid:
        pidfile().unlink(missing_ok=True)
        return "dispatcher: not running"
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
    pidfile().unlink(missing_ok=True)
    return f"dispatcher: stopped (pid {pid})"


SERVICES.append(("dispatcher", start, stop))
