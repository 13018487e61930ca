"""supervisord, the one supervisor of the embedded services (``stackbench up``): the
programs it runs, its configuration under $STACKBENCH_HOME/supervisor, and its XML-RPC
interface on a unix socket (supervisor's documented API; no pid files of ours).

Every program is restarted when it exits, with supervisord's backoff; the health check of
``stackbench.services`` restarts one that stops answering. Core: it imports no component,
so the embedded cluster (resultsdb) can hand its server to the supervisor too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
import xmlrpc.client
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.errors import StackbenchError

# supervisord's own states (supervisor.states.ProcessStates): a program in one of these
# is up or on its way up
UP_STATES = ("RUNNING", "STARTING")
# the health check program (stackbench.services): it alone running keeps nothing alive
HEALTH = "health"


@dataclass
class Program:
    """One long-running process supervisord keeps alive."""

    name: str
    argv: list[str]
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    user: str | None = None
    priority: int = 50
    stopsignal: str = "TERM"
    stopwaitsecs: int = 30
    # the whole process group is signalled on stop: a twistd's build steps, gunicorn's
    # workers. PostgreSQL's backends must be left to their postmaster.
    stopasgroup: bool = True
    # seconds a start must last to count as started: quicker exits are retried with a
    # growing delay (1 s, 2 s, ...), STARTRETRIES times; the health check revives a FATAL one
    startsecs: int = 2
    # a URL the health check GETs: a refused, reset or timed out answer counts as a failure
    probe: str | None = None
    listener_events: str | None = None
    # the caller's STACKBENCH_* settings reach the program (through a file of its own,
    # see :func:`env_file`); off for a program run as another account (PostgreSQL)
    inherit_env: bool = True

    def command(self) -> list[str]:
        if not self.inherit_env:
            return self.argv
        return [sys.executable, "-m", "stackbench.supervision", str(env_file(self.name)),
                "--", *self.argv]  # fmt: skip

    def section(self) -> str:
        kind = "eventlistener" if self.listener_events else "program"
        lines = [
            f"[{kind}:{self.name}]",
            f"command={_esc(shlex.join(self.command()))}",
            f"priority={self.priority}",
            "autostart=false",
            "autorestart=true",
            f"startsecs={self.startsecs}",
            f"startretries={STARTRETRIES}",
            f"stopsignal={self.stopsignal}",
            f"stopwaitsecs={self.stopwaitsecs}",
            f"stopasgroup={str(self.stopasgroup).lower()}",
            f"killasgroup={str(self.stopasgroup).lower()}",
        ]
        if self.cwd is not None:
            lines.append(f"directory={_esc(str(self.cwd))}")
        if self.user:
            lines.append(f"user={self.user}")
        if self.listener_events:
            # an event listener's stdout is the protocol; what it says goes to stderr
            lines += [f"events={self.listener_events}", "buffer_size=100"]
            if self.log is not None:
                lines.append(f"stderr_logfile={_esc(str(self.log))}")
        else:
            lines.append("redirect_stderr=true")
            if self.log is not None:
                lines.append(f"stdout_logfile={_esc(str(self.log))}")
        if self.log is not None:
            lines += ["stdout_logfile_maxbytes=10MB", "stdout_logfile_backups=2"]
        if self.env and not self.inherit_env:
            lines.append("environment=" + ",".join(_env(k, v) for k, v in self.env.items()))
        return "\n".join(lines) + "\n"

    def settings(self) -> dict[str, str]:
        """What the program gets in its environment beside supervisord's own."""
        env = {k: v for k, v in os.environ.items() if k.startswith("STACKBENCH_")}
        return {**env, **self.env}


def env_file(name: str) -> Path:
    return supervisor_dir() / "programs" / f"{name}.env.json"


STARTRETRIES = 10


def _esc(value: str) -> str:
    return value.replace("%", "%%")  # supervisord expands %(name)s in every value


def _env(key: str, value: str) -> str:
    if '"' in value or "\n" in value:
        raise StackbenchError(f"{key}: a value with a quote or newline cannot be passed on")
    return f'{key}="{_esc(value)}"'


# -- supervisord ----------------------------------------------------------------------------


def supervisor_dir() -> Path:
    return config.home() / "supervisor"


def socket_path() -> Path:
    """supervisord's unix socket: in the home, unless that path is too long for a socket."""
    path = supervisor_dir() / "supervisord.sock"
    if len(os.fsencode(path)) <= 100:
        return path
    digest = hashlib.sha256(os.fsencode(config.home().resolve())).hexdigest()[:12]
    return Path("/tmp") / f"stackbench-supervisor-{digest}.sock"


def rpc(timeout: float = 30.0) -> Any:
    """A proxy of supervisord's XML-RPC interface (``.supervisor.getAllProcessInfo()`` ...)."""
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{socket_path()}")
    transport.timeout = timeout
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def supervisor_running() -> bool:
    try:
        return rpc(5).supervisor.getState()["statename"] == "RUNNING"
    except (OSError, xmlrpc.client.Error):
        return False


def _write_main_config() -> Path:
    d = supervisor_dir()
    (d / "programs").mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)  # program sections carry the database URL
    conf = d / "supervisord.conf"
    sock = socket_path()
    text = (
        "[unix_http_server]\n"
        f"file={_esc(str(sock))}\n"
        "chmod=0700\n"
        "[supervisord]\n"
        f"logfile={_esc(str(d / 'supervisord.log'))}\n"
        "logfile_maxbytes=10MB\n"
        f"pidfile={_esc(str(d / 'supervisord.pid'))}\n"
        f"childlogdir={_esc(str(d))}\n"
        f"directory={_esc(str(config.home()))}\n"
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
        "[include]\n"
        f"files={_esc(str(d / 'programs'))}/*.conf\n"
    )
    if not conf.exists() or conf.read_text() != text:
        conf.write_text(text)
    return conf


def ensure_supervisor() -> bool:
    """Start supervisord for this home unless it runs; True when this call started it."""
    if supervisor_running():
        return False
    # one still shutting down would remove the new one's socket as it exits
    old = _supervisord_pid()
    deadline = time.monotonic() + 60
    while old is not None and _alive(old) and time.monotonic() < deadline:
        time.sleep(0.1)
    conf = _write_main_config()
    exe = Path(sys.executable).parent / "supervisord"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "supervisor.supervisord"]
    socket_path().unlink(missing_ok=True)  # left by a supervisord that was killed
    res = subprocess.run([*argv, "-c", str(conf)], capture_output=True, text=True, timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if supervisor_running():
            return True
        time.sleep(0.1)
    log = supervisor_dir() / "supervisord.log"
    raise StackbenchError(
        f"supervisord did not start: {(res.stderr or res.stdout).strip()[-300:]} (log {log})"
    )


def _declare(programs: list[Program]) -> None:
    """Write the programs' sections and have supervisord take them in (what
    ``supervisorctl update`` does): a changed one is stopped and made anew."""
    d = supervisor_dir() / "programs"
    d.mkdir(parents=True, exist_ok=True)
    changed = False
    for prog in programs:
        if prog.inherit_env:
            settings = json.dumps(prog.settings(), indent=1, sort_keys=True)
            envf = env_file(prog.name)
            if not envf.exists() or envf.read_text() != settings:
                _write_private(envf, settings)
                # other settings than the running program has: it starts again with them
                if _info(prog.name) is not None:
                    _stop(prog.name)
        path = d / f"{prog.name}.conf"
        text = prog.section()
        if not path.exists() or path.read_text() != text:
            _write_private(path, text)
            changed = True
    if not changed and all(_info(p.name) is not None for p in programs):
        return
    sup = rpc().supervisor
    added, modified, removed = sup.reloadConfig()[0]
    for name in modified + removed:
        _stop(name)
        sup.removeProcessGroup(name)
    for name in added + modified:
        sup.addProcessGroup(name)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _info(name: str) -> dict[str, Any] | None:
    try:
        return rpc().supervisor.getProcessInfo(name)
    except xmlrpc.client.Fault:
        return None  # BAD_NAME: not declared
    except OSError:
        return None


def _stop(name: str) -> bool:
    try:
        rpc(120).supervisor.stopProcess(name, True)
    except xmlrpc.client.Fault as exc:
        if "NOT_RUNNING" in exc.faultString or "BAD_NAME" in exc.faultString:
            return False
        raise
    return True


def start_programs(programs: list[Program]) -> bool:
    """Declare ``programs`` and start those not up; False when all were up already."""
    ensure_supervisor()
    for prog in programs:
        set_probe(prog.name, prog.probe)
    _declare(programs)
    started = False
    sup = rpc(120).supervisor
    for prog in programs:
        info = _info(prog.name)
        if info is not None and info["statename"] in UP_STATES:
            continue
        try:
            sup.startProcess(prog.name, True)
        except xmlrpc.client.Fault as exc:
            if "ALREADY_STARTED" not in exc.faultString:
                log = prog.log or supervisor_dir()
                raise StackbenchError(
                    f"{prog.name}: did not start ({exc.faultString}); see {log}"
                ) from None
        started = True
    return started


def stop_programs(names: list[str]) -> bool:
    """Stop these programs (their process groups); False when none was running. With
    nothing left running, supervisord itself ends."""
    if not supervisor_running():
        return False
    stopped = [_stop(n) for n in names if _info(n) is not None]
    idle = ("STOPPED", "EXITED", "FATAL")
    running = [p for p in rpc().supervisor.getAllProcessInfo() if p["statename"] not in idle]
    if not running or all(p["name"] == HEALTH for p in running):
        shutdown()
    return any(stopped)


def declared_program(name: str) -> bool:
    """Whether a running supervisord of this home has program ``name``."""
    return supervisor_running() and _info(name) is not None


def program_pid(name: str) -> int | None:
    """The pid of a running program, None when it is not up."""
    if not supervisor_running():
        return None
    info = _info(name)
    return int(info["pid"]) if info and info["statename"] in UP_STATES and info["pid"] else None


def shutdown() -> bool:
    """Stop every program and supervisord (waits for it); False when it was not running."""
    if not supervisor_running():
        return False
    pid = _supervisord_pid()
    sup = rpc(300).supervisor
    sup.stopAllProcesses(True)
    with contextlib.suppress(OSError, xmlrpc.client.Error):  # it may hang up first
        sup.shutdown()
    deadline = time.monotonic() + 60
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def _supervisord_pid() -> int | None:
    try:
        return int((supervisor_dir() / "supervisord.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def declared() -> list[dict[str, str]]:
    """The programs written for supervisord: name and, when it has one, its probe URL."""
    found = []
    for path in sorted((supervisor_dir() / "programs").glob("*.conf")):
        probe = path.with_suffix(".probe")
        entry = {"name": path.stem}
        if probe.exists():
            entry["probe"] = probe.read_text().strip()
        found.append(entry)
    return found


def set_probe(name: str, url: str | None) -> None:
    """Record the URL the health check GETs for program ``name`` (None: not checked)."""
    path = supervisor_dir() / "programs" / f"{name}.probe"
    path.parent.mkdir(parents=True, exist_ok=True)
    if url:
        path.write_text(url + "\n")
    else:
        path.unlink(missing_ok=True)


def _exec(argv: list[str]) -> None:
    """``python -m stackbench.supervision ENV_FILE -- ARGV``: how supervisord starts a
    program: ARGV with the settings of the ``up`` that declared it (not of whoever
    started supervisord first), and without supervisord's own STACKBENCH_* ones."""
    envf, sep, *cmd = argv
    if sep != "--" or not cmd:
        raise SystemExit("usage: python -m stackbench.supervision ENV_FILE -- ARGV")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STACKBENCH_")}
    env.update(json.loads(Path(envf).read_text()))
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    _exec(sys.argv[1:])
