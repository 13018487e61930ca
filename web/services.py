"""The web UI as an embedded service of ``stackbench up``/``down``, run by the supervisor:
nginx (:mod:`stackbench.web.proxy`, program ``proxy``) serves the port and buffers every
request whole before gunicorn (program ``web``, on a loopback port of its own) sees it, so
slow clients hold no gunicorn thread: with 64 clients sending a header line every 5 s on
the port gunicorn answered nothing, behind nginx every other request is answered at once
(bench/README.md). Without nginx installed gunicorn serves the port itself, and says so.
Their logs are under $STACKBENCH_HOME."""

from __future__ import annotations

import contextlib
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
PROXY = "proxy"


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
    under 32 connections (bench/web_bench.py). The app is imported once, before the workers
    fork (--preload): a web started again (SIGKILLed, restarted by the supervisor) answers
    once that import is done, and each worker importing it again doubled the CPU the
    restart needs on a loaded host (bench/README.md, kill-web). The app opens its database
    on the first request, so nothing is shared across the fork."""
    argv = [
        sys.executable, "-m", "gunicorn",
        "--bind", f"{host}:{port}",
        "--preload",
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


def backend_port() -> int:
    """gunicorn's port behind nginx: a free loopback port picked once per home and kept
    (a new one at every ``up`` would make supervisord restart gunicorn each time)."""
    import socket

    path = supervision.supervisor_dir() / "web-backend.port"
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().strip())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{port}\n")
    return port


def programs() -> list[Program]:
    """gunicorn, and nginx in front of it when installed, in the foreground as the
    supervisor runs them; their logs are $HOME/web.log and $HOME/proxy.log."""
    from stackbench.web import proxy

    host, port = address()
    env = {}
    if not config.database_url():
        from stackbench.resultsdb import db

        env["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    if proxy.nginx_path() is None:
        web = Program(PROGRAM, gunicorn_argv(host, port), env=env, log=logfile(), priority=30,
                      probe=local_web_url() + "/healthz")  # fmt: skip
        return [web]
    backend = f"127.0.0.1:{backend_port()}"
    # the app reads the client's address from the header our nginx appends
    env["STACKBENCH_TRUSTED_PROXIES"] = str(config.get_int("STACKBENCH_TRUSTED_PROXIES") + 1)
    web = Program(PROGRAM, gunicorn_argv("127.0.0.1", backend_port()), env=env, log=logfile(),
                  priority=30, probe=f"http://{backend}/healthz")  # fmt: skip
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    argv = proxy.prepare(listen, backend, config.home() / "proxy", one_process=True)
    nginx = Program(PROXY, argv, log=config.home() / "proxy.log", priority=31,
                    inherit_env=False, probe=local_web_url() + proxy.HEALTH_PATH)  # fmt: skip
    return [web, nginx]


def start() -> str:
    host, port = address()
    # the database is up (stackbench up starts it first) and migrated before workers fork
    from stackbench.resultsdb import db

    db.engine()
    progs = programs()
    pid = running_pid()
    if pid and all(supervision.program_pid(p.name) for p in progs):
        return f"web: already running (pid {pid}) on http://{host}:{port}/"
    supervision.start_programs(progs)
    how = ("behind nginx" if len(progs) > 1
           else "gunicorn alone: nginx is not installed, slow clients can hold its threads")  # fmt: skip
    # gunicorn listens before its workers have loaded the app: "started" means a request
    # is answered, so the first one of a caller is not reset
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pid = running_pid()
        if pid and _answers():
            return f"web: started on http://{host}:{port}/ ({how}; pid {pid}, log {logfile()})"
        time.sleep(0.2)
    return f"web: gunicorn did not start; see {logfile()}"


def _answers() -> bool:
    try:
        Client(local_web_url(), timeout=10).send("GET", "/api/")
    except HttpError as exc:
        return exc.status < 500  # the app answered, not nginx on its behalf
    except (OSError, http.client.HTTPException):
        return False
    return True


def stop() -> str:
    pid = running_pid()
    if not supervision.stop_programs([PROXY, PROGRAM]) or not pid:
        return "web: not running"
    return f"web: stopped (pid {pid})"
