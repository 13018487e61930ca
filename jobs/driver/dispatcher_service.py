"""The background services of ``stackbench up``/``down`` that are stackbench commands
themselves: the dispatcher (``stackbench dispatcher``) and the list watcher (``stackbench
lists watch``), each a program of the supervisor, which starts it again when it exits
(a crash, a kill, a database away for longer than it waits), with backoff. Their logs are
under $STACKBENCH_HOME. They start after the Buildbot master and the web UI and stop first."""

from __future__ import annotations

from pathlib import Path

from stackbench import config, supervision
from stackbench.services import stackbench_command
from stackbench.supervision import Program


def logfile(name: str = "dispatcher") -> Path:
    return config.home() / f"{name}.log"


def running_pid(name: str = "dispatcher") -> int | None:
    return supervision.program_pid(name)


def program(name: str, argv: list[str], env: dict[str, str] | None = None) -> Program:
    """``stackbench ARGV`` as the supervisor's program NAME."""
    child_env = dict(env or {})
    if not config.database_url():
        from stackbench.resultsdb import db

        child_env["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    return Program(
        name,
        [*stackbench_command(), *argv],
        env=child_env,
        log=logfile(name),
        priority=40,
        startsecs=2,
    )


def start_command(name: str, argv: list[str], env: dict[str, str] | None = None) -> str:
    """Start ``stackbench ARGV`` under the supervisor as service NAME (once)."""
    pid = running_pid(name)
    if pid:
        return f"{name}: already running (pid {pid})"
    from stackbench.resultsdb import db

    db.engine()  # up and migrated before the service connects
    supervision.start_programs([program(name, argv, env)])
    pid = running_pid(name)
    if not pid:
        return f"{name}: exited at once; see {logfile(name)}"
    return f"{name}: started (pid {pid}, log {logfile(name)})"


def stop_command(name: str) -> str:
    pid = running_pid(name)
    if not supervision.stop_programs([name]) or not pid:
        return f"{name}: not running"
    return f"{name}: stopped (pid {pid})"


def start(env: dict[str, str] | None = None) -> str:
    return start_command("dispatcher", ["dispatcher"], env)


def stop() -> str:
    return stop_command("dispatcher")


def start_lists(env: dict[str, str] | None = None) -> str:
    return start_command("lists", ["lists", "watch"], env)


def stop_lists() -> str:
    return stop_command("lists")
