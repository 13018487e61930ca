"""The web UI as an embedded service of ``stackbench up``/``down``: gunicorn on 127.0.0.1,
run by the supervisor, its log under $STACKBENCH_HOME."""

from __future__ import annotations

import http.client
import os
import sys
import time
from pathlib import Path

from stackbench import config, supervision
from stackbench.httpclient import Client, HttpError
from stackbench.services import local_web_url
from stackbench.supervision import Program

PROGRAM = "web"


def address() -> tuple[str, int]:
    """Where ``stackbench up`` serves: $STACKBENCH_WEB_HOST:$STACKBENCH_WEB_PORT, default
    127.0.0.1:8080."""
    return (
        config.get("STACKBENCH_WEB_HOST"),
        config.get_int("STACKBENCH_WEB_PORT"),
    )


def logfile() -> Path:
    return config.home() / "web.log"


def gunicorn_argv(host: str, port: int, workers: int = 2, threads: int = 8) -> list[str]:
    """gunicorn's gthread workers: on 2 cores, 2 processes x 8 threads gave the best p95
    under 32 connections (bench/web_bench.py)."""
    argv = [
        sys.executable, "-m", "gunicorn",
        "--bind", f"{host}:{port}",
        "--workers", str(workers),
        "--threads", str(threads),
        "--timeout", "120",
        "--access-logfile", "-",
        "--error-logfile", "-",
    ]  # fmt: skip
    return argv + _control_socket() + ["stackbench.web.wsgi:app"]


def control_socket() -> Path:
    return config.home() / "gunicorn.ctl"


def _control_socket() -> list[str]:
    """gunicorn >= 25 opens a control socket, by default ~/.gunicorn/gunicorn.ctl: two
    instances (two homes, or tests) would share it, and stopping one deletes the other's.
    Each home gets its own; a path too long for a unix socket turns it off."""
    try:
        from gunicorn.config import Config
    except ImportError:
        return []
    if "control_socket" not in Config().settings:
        return []  # an older gunicorn without one
    path = control_socket()
    if len(os.fsencode(path)) > 100:
        return ["--no-control-socket"]
    return ["--control-socket", str(path)]


def running_pid() -> int | None:
    return supervision.program_pid(PROGRAM)


def program() -> Program:
    """gunicorn in the foreground, as the supervisor runs it; its log is $HOME/web.log."""
    host, port = address()
    env = {}
    if not config.database_url():
        from stackbench.resultsdb import db

        env["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    return Program(
        PROGRAM,
        gunicorn_argv(host, port),
        env=env,
        log=logfile(),
        priority=30,
        startsecs=2,
        probe=local_web_url() + "/healthz",
    )


def start() -> str:
    host, port = address()
    pid = running_pid()
    if pid:
        return f"web: already running (pid {pid}) on http://{host}:{port}/"
    # the database is up (stackbench up starts it first) and migrated before workers fork
    from stackbench.resultsdb import db

    db.engine()
    supervision.start_programs([program()])
    # gunicorn listens before its workers have loaded the app: "started" means a request
    # is answered, so the first one of a caller is not reset
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pid = running_pid()
        if pid and _answers():
            return f"web: started on http://{host}:{port}/ (pid {pid}, log {logfile()})"
        time.sleep(0.2)
    return f"web: gunicorn did not start; see {logfile()}"


def _answers() -> bool:
    try:
        Client(local_web_url(), timeout=10).send("GET", "/api/")
    except HttpError:
        return True  # the app answered
    except (OSError, http.client.HTTPException):
        return False
    return True


def stop() -> str:
    pid = running_pid()
    if not supervision.stop_programs([PROGRAM]) or not pid:
        return "web: not running"
    return f"web: stopped (pid {pid})"
