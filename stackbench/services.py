"""The embedded services of a one-machine stackbench, run by ONE supervisor: supervisord.

``stackbench up`` starts supervisord for the home ($STACKBENCH_HOME/supervisor) and, as
programs of it, PostgreSQL, the Buildbot master and its local workers, the web UI, the
dispatcher, the list watcher and the health check (``stackbench health-check``, an event
listener that restarts a program that stops answering and counts restarts). supervisord
starts again whatever exits, with backoff; ``stackbench down`` stops it all.

Each service is a name and start/stop callables returning a status line, listed where the
commands start them (stackbench.cli._services); a start declares its :class:`Program` s
with :func:`stackbench.supervision.start_programs`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
import xmlrpc.client
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.supervision import (
    HEALTH,
    Program,
    declared,
    shutdown,
    start_programs,
    stop_programs,
    supervisor_dir,
    supervisor_running,
)

Service = tuple[str, Callable[..., str], Callable[[], str]]
log = logging.getLogger(__name__)


# -- up and down ----------------------------------------------------------------------------


def _db_up() -> str:
    from stackbench.resultsdb import db

    if config.database_url():
        db.upgrade(db.engine(migrate=False))  # 'up' is where a schema change is applied
        return "database: using STACKBENCH_DATABASE_URL"
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    started = cluster.start_supervised()
    db.upgrade(db.engine(migrate=False))
    state = "started" if started else "already running"
    return f"database: {state} ({cluster.datadir})"


def _db_down() -> str:
    if config.database_url():
        return "database: external, left running"
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    stopped = stop_programs(["postgres"])
    # a cluster a command started on its own (pg_ctl), outside 'up'
    stopped = cluster.stop() or stopped
    return "database: stopped" if stopped else "database: not running"


def up(services: Sequence[Service], db_only: bool = False, workers: int = 0) -> Iterator[str]:
    """Start the database and ``services`` in order; ``workers``: at least that many local
    Buildbot workers."""
    if not supervisor_running():
        for name, pid in stop_orphans().items():
            yield f"{name}: stopped pid {pid}, left running by a supervisor that died"
    yield _db_up()
    if db_only:
        return
    # the local workers post their runs to the web UI started beside them, as a lab's boxes do
    web = local_web_url() if any(name == "web" for name, _s, _t in services) else None
    for name, start, _stop in services:
        if name == "buildbot":
            yield start(workers=max(workers, 1), results_url=web)
        else:
            yield start()
    if supervisor_running():
        yield start_health_check()


def start_health_check() -> str:
    """The health check watches the programs declared so far that have a probe."""
    probes = [f"{p['name']}={url}" for p in declared() if (url := p.get("probe"))]
    argv = [*stackbench_command(), "health-check", *(a for p in probes for a in ("--probe", p))]
    prog = Program(
        HEALTH,
        argv,
        log=config.home() / "health.log",
        priority=99,
        listener_events="PROCESS_STATE,TICK_5",
        startsecs=1,
    )
    started = start_programs([prog])
    return f"health: {'started' if started else 'already running'} ({len(probes)} probes)"


def stackbench_command() -> list[str]:
    beside = Path(sys.executable).parent / "stackbench"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "stackbench"]


def local_web_url() -> str:
    """Where a process on this host reaches the web UI that ``stackbench up`` serves (a
    wildcard bind address is reached on 127.0.0.1)."""
    host = config.get("STACKBENCH_WEB_HOST")
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{host}:{config.get_int('STACKBENCH_WEB_PORT')}"


def down(services: Sequence[Service]) -> Iterator[str]:
    if not supervisor_running():
        for name, pid in stop_orphans().items():
            yield f"{name}: stopped pid {pid}, left running by a supervisor that died"
    for _name, _start, stop in reversed(services):
        yield stop()
    if stop_programs([HEALTH]):
        yield "health: stopped"
    yield _db_down()
    shutdown()


# -- the health check -----------------------------------------------------------------------

# failed probes (one each 5 s) among the last PROBE_WINDOW before a program is restarted: a
# master drowning in hung-up clients answers now and then, and one lucky answer between
# timeouts must not keep it from being restarted
PROBE_FAILURES = 3
PROBE_WINDOW = 5
PROBE_TIMEOUT_S = 3.0
# a program just started is not probed yet: a master loads its configuration first
PROBE_GRACE_S = 15.0
# until a program started anew first answers, failed probes do not count, this long at most:
# gunicorn's workers import the app for 19 s on a loaded host, and one restarted while
# loading only starts loading again
STARTUP_LIMIT_S = 120.0
# supervisord gives up after STARTRETRIES quick exits (FATAL); the check starts it again
FATAL_RETRY_S = 60.0
DOWN_STATES = ("EXITED", "BACKOFF", "FATAL")


def health_file() -> Path:
    return supervisor_dir() / "health.json"


def _load_health() -> dict[str, dict[str, Any]]:
    try:
        return json.loads(health_file().read_text())
    except (OSError, ValueError):
        return {}


def _save_health(state: dict[str, dict[str, Any]]) -> None:
    path = health_file()
    tmp = path.with_name(".health.json.tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, path)


def window(recent: list[bool], failed: bool) -> list[bool]:
    """The last PROBE_WINDOW probes of a program with this one added, True for a failure."""
    return [*recent, failed][-PROBE_WINDOW:]


def probe(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when ``url`` answers (any HTTP status), else what went wrong in a few words."""
    import http.client

    from stackbench.httpclient import Client, HttpError, describe

    try:
        Client(url, timeout=timeout).send("GET", "")
    except HttpError:
        return None
    except (OSError, http.client.HTTPException) as exc:
        return describe(exc)
    return None


class HealthCheck:
    """What ``stackbench health-check`` does with each event supervisord sends it: counts
    restarts and notes since when a program is down (PROCESS_STATE_*), and on each TICK_5
    probes the programs that have a URL, restarting one after PROBE_FAILURES failures among
    its last PROBE_WINDOW probes (and one supervisord gave up on, after FATAL_RETRY_S)."""

    def __init__(self, probes: dict[str, str], sup: Any) -> None:
        self.probes = probes
        self.sup = sup
        self.state = _load_health()

    def entry(self, name: str) -> dict[str, Any]:
        return self.state.setdefault(
            name, {"restarts": 0, "down_since": None, "recent": [], "reason": None}
        )

    def on_state(self, name: str, new: str, old: str | None, now: float) -> None:
        e = self.entry(name)
        if new == "STARTING" and old in DOWN_STATES:
            e["restarts"] += 1
            e["last_restart"] = now
            e["reason"] = "exited" if old != "BACKOFF" else "exited again at start"
        elif new in DOWN_STATES:
            e["down_since"] = e["down_since"] or now
        elif new == "RUNNING":
            e["down_since"] = None
            e["recent"] = []
        elif new == "STOPPED" and not e.get("restarting"):
            e["down_since"] = None  # stopped on purpose ('down')

    def note_pids(self) -> dict[str, dict[str, Any]]:
        """Each program's pid and start: what a new supervisord must stop should this one
        die (see :func:`stop_orphans`). The infos by name."""
        infos = {i["name"]: i for i in self.sup.getAllProcessInfo()}
        for name, info in infos.items():
            if info["statename"] in ("RUNNING", "STARTING") and info["pid"]:
                e = self.entry(name)
                e["pid"], e["started"] = int(info["pid"]), float(info["start"])
        return infos

    def on_tick(self, now: float) -> None:
        infos = self.note_pids()
        for name, info in infos.items():
            if info["statename"] == "FATAL" and now - info["stop"] >= FATAL_RETRY_S:
                self.restart(name, "supervisord gave up; started again", now)
        for name, url in self.probes.items():
            info = infos.get(name)
            if not info or info["statename"] != "RUNNING" or now - info["start"] < PROBE_GRACE_S:
                continue
            e = self.entry(name)
            failed = probe(url)
            if e.get("answered") != info["start"]:  # this run of it has not answered yet
                if failed is None:
                    e["answered"], e["recent"] = info["start"], []
                elif now - info["start"] < STARTUP_LIMIT_S:
                    continue  # still starting
            e["recent"] = window(e.get("recent", []), failed is not None)
            if failed is None:
                e["down_since"] = None
                continue
            e["down_since"] = e["down_since"] or now
            e["last_failure"] = f"{url}: {failed}"
            log.warning("%s: %s (%d of the last %d probes)", name, e["last_failure"],
                        sum(e["recent"]), len(e["recent"]))  # fmt: skip
            if sum(e["recent"]) >= PROBE_FAILURES:
                self.restart(name, f"not answering ({failed})", now)

    def restart(self, name: str, reason: str, now: float) -> None:
        """Stop (SIGTERM to the process group, SIGKILL if it is wedged) and start again."""
        e = self.entry(name)
        log.warning("%s: restarting: %s", name, reason)
        e.update(restarting=True, reason=reason, last_restart=now, recent=[])
        e["restarts"] += 1
        with contextlib.suppress(xmlrpc.client.Fault):  # FATAL: nothing to stop
            self.sup.stopProcess(name, False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._state(name) == "STOPPING":
            time.sleep(0.2)
        pid = self.sup.getProcessInfo(name)["pid"]
        if self._state(name) == "STOPPING" and pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # supervisord makes each program a group
            while time.monotonic() < deadline + 10 and self._state(name) == "STOPPING":
                time.sleep(0.2)
        with contextlib.suppress(xmlrpc.client.Fault):  # ALREADY_STARTED
            self.sup.startProcess(name, False)
        e["restarting"] = False

    def _state(self, name: str) -> str:
        return str(self.sup.getProcessInfo(name)["statename"])


def health_listener(probes: dict[str, str]) -> None:
    """The event listener loop (supervisor.childutils' protocol on stdin/stdout)."""
    from supervisor import childutils

    check = HealthCheck(probes, childutils.getRPCInterface(os.environ).supervisor)
    with contextlib.suppress(OSError, xmlrpc.client.Error):
        check.note_pids()  # the programs up before it, started without an event to it
        _save_health(check.state)
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        event = headers["eventname"]
        now = time.time()
        try:
            if event.startswith("PROCESS_STATE_"):
                fields = childutils.get_headers(payload.split("\n", 1)[0])
                name = fields["processname"]
                if name != HEALTH:
                    check.on_state(name, event.removeprefix("PROCESS_STATE_"),
                                   fields.get("from_state"), now)  # fmt: skip
            elif event.startswith("TICK_"):
                check.on_tick(now)
            _save_health(check.state)
        except (OSError, xmlrpc.client.Error) as exc:
            log.warning("health check: %s", exc)  # the next event tries again
        childutils.listener.ok(sys.stdout)


def systemd_health_loop(probes: dict[str, str], every: float = 5.0, rounds: int = 0) -> None:
    """The health check of a host whose services are systemd units (Ansible): GET each
    unit's URL every ``every`` s and ``systemctl restart`` the unit after PROBE_FAILURES
    failures among its last PROBE_WINDOW probes; a unit just restarted is left
    PROBE_GRACE_S to come up. ``rounds``: stop after that many (tests), 0 for ever."""
    from stackbench import proc

    recent: dict[str, list[bool]] = {unit: [] for unit in probes}
    restarted: dict[str, float] = {}
    done = 0
    while not rounds or done < rounds:
        for unit, url in probes.items():
            if time.monotonic() - restarted.get(unit, -PROBE_GRACE_S) < PROBE_GRACE_S:
                continue
            failed = probe(url)
            recent[unit] = window(recent[unit], failed is not None)
            if failed is None:
                continue
            log.warning("%s: %s: %s (%d of the last %d probes)", unit, url, failed,
                        sum(recent[unit]), len(recent[unit]))  # fmt: skip
            if sum(recent[unit]) >= PROBE_FAILURES:
                log.warning("%s: restarting: not answering (%s)", unit, failed)
                res = proc.run(["systemctl", "restart", unit], check=False, timeout=300)
                if res.returncode:
                    log.warning("%s: systemctl restart failed: %s", unit, res.stdout.strip())
                recent[unit], restarted[unit] = [], time.monotonic()
        done += 1
        time.sleep(every)


# -- programs a dead supervisord left behind ---------------------------------------------------


def orphans() -> dict[str, int]:
    """With no supervisord running, the programs the last one started that still run (it
    was killed, so it stopped nothing): name -> pid. A pid is taken only when the process
    started when the program did (a pid is reused) and leads its process group."""
    if supervisor_running():
        return {}
    out = {}
    for name, e in _load_health().items():
        pid, started = e.get("pid"), e.get("started")
        if name == HEALTH or not pid or not started:
            continue
        born = _started_at(int(pid))
        with contextlib.suppress(ProcessLookupError):
            if born is not None and abs(born - float(started)) < 2.0 and os.getpgid(pid) == pid:
                out[name] = int(pid)
    return out


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), None when there is none."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def stop_orphans(grace_s: float = 60.0) -> dict[str, int]:
    """Stop what :func:`orphans` finds, as supervisord would have (SIGTERM to the process
    group; PostgreSQL's postmaster alone, a fast shutdown), SIGKILL after ``grace_s``."""
    found = orphans()
    for name, pid in found.items():
        with contextlib.suppress(ProcessLookupError):
            if name == "postgres":
                os.kill(pid, signal.SIGINT)
            else:
                os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_started_at(p) for p in found.values()):
        time.sleep(0.2)
    for pid in found.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return found


def status() -> list[dict[str, Any]] | None:
    """Each supervised program: name, state, pid, since (epoch seconds), restarts, reason,
    and whether it is ``up`` (running and answering); None without a running supervisor."""
    if not supervisor_running():
        return None
    from stackbench.supervision import rpc

    health = _load_health()
    rows = []
    try:
        infos = rpc(10).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error):
        return None  # it stopped meanwhile
    for info in infos:
        e = health.get(info["name"], {})
        state = str(info["statename"])
        failing = e.get("recent", [])[-1:] == [True] and state == "RUNNING"  # the last probe
        up_ = state == "RUNNING" and not failing
        if up_:
            since = info["start"]
        else:
            since = e.get("down_since") or info["stop"] or info["start"] or None
        rows.append({
            "name": info["name"],
            "state": "not answering" if failing else state.lower(),
            "up": up_,
            "pid": info["pid"] or None,
            "since": since,
            "restarts": int(e.get("restarts", 0)),
            "reason": e.get("last_failure") if failing else e.get("reason"),
        })  # fmt: skip
    return rows
