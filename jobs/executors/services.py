"""The embedded Buildbot: ``stackbench up`` has the supervisor run a master and one local
QEMU worker (or ``--workers N``) on loopback under ``$STACKBENCH_HOME/buildbot``;
``stackbench down`` stops them all. :func:`start_master` and :func:`start_worker` start a
daemon of a base directory of its own outside the supervisor (a lab's box, the tests' labs).

The master's base directory holds ``stackbench.yaml`` (ports, the worker, the admin user) and
``secrets.yaml`` (generated passwords, mode 600); its ``buildbot.tac`` points at the packaged
``master.cfg``. Production masters use the same layout, written by Ansible or compose.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stackbench import config, proc, supervision
from stackbench.errors import StackbenchError
from stackbench.supervision import Program

MASTER_CFG = Path(__file__).resolve().parent / "master.cfg"
LOCAL_WORKER = "local"


def buildbot_dir() -> Path:
    return config.home() / "buildbot"


def tool(name: str) -> str:
    """A Buildbot program from this Python's environment (the venv), else from PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise StackbenchError(
            f"{name} not found: install stackbench with the 'buildbot' extra "
            "(buildbot, buildbot-worker, buildbot-www)"
        )
    return found


def stackbench_argv() -> list[str]:
    """How a worker on this machine runs stackbench (the same installation as ours)."""
    beside = Path(sys.executable).parent / "stackbench"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "stackbench"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_private(path: Path, text: str) -> None:
    """Create a file readable by its owner only (secrets), atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def machine_size() -> tuple[int, int]:
    cpus = os.cpu_count() or 1
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return cpus, max(mem_kb // 1024, 64)


def create_master(
    base: Path,
    workers: list[dict[str, Any]],
    *,
    extra: Mapping[str, Any] | None = None,
    admin: str = "admin",
) -> dict[str, Any]:
    """Create a master base directory (once): configuration, secrets, Buildbot's database.

    Returns the configuration as written. ``workers`` are dicts of name/kind/cpus/memory_mb;
    their passwords and the admin's are generated here and kept in ``secrets.yaml``.
    """
    base.mkdir(parents=True, exist_ok=True)
    cfg_path, secrets_path = base / "stackbench.yaml", base / "secrets.yaml"
    if cfg_path.exists() and secrets_path.exists() and (base / "buildbot.tac").exists():
        return yaml.safe_load(cfg_path.read_text())
    cfg: dict[str, Any] = {
        "bind": "127.0.0.1",
        "www_port": free_port(),
        "pb_port": free_port(),
        "workers": workers,
        "admins": [admin],
        "secrets_file": "secrets.yaml",
        "stackbench": stackbench_argv(),
    }
    cfg.update(extra or {})
    secret_data = {
        "workers": {w["name"]: secrets.token_urlsafe(24) for w in workers},
        "users": {admin: secrets.token_urlsafe(24)},
    }
    write_private(secrets_path, yaml.safe_dump(secret_data))
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc.run(
        [
            tool("buildbot"),
            "create-master",
            "--relocatable",
            "--quiet",
            f"--config={MASTER_CFG}",
            str(base),
        ],
        timeout=120,
    )
    # Buildbot writes a sample next to the real configuration; ours is the packaged one
    (base / "master.cfg.sample").unlink(missing_ok=True)
    return cfg


def worker_password(master_base: Path, name: str) -> str:
    data = yaml.safe_load((master_base / "secrets.yaml").read_text()) or {}
    return str(data["workers"][name])


def create_worker(base: Path, master: str, name: str, password: str) -> None:
    """Create a worker base directory (once); its buildbot.tac carries the password: mode 600."""
    if (base / "buildbot.tac").exists():
        return
    base.mkdir(parents=True, exist_ok=True)
    proc.run(
        [
            tool("buildbot-worker"),
            "create-worker",
            "--relocatable",
            "--quiet",
            "--umask=0o077",
            str(base),
            master,
            name,
            password,
        ],
        timeout=60,
    )
    os.chmod(base / "buildbot.tac", 0o600)


def running(base: Path) -> bool:
    from stackbench import proc

    # a daemon killed before twistd could remove its pidfile may linger as a zombie that
    # nothing reaps yet: it is not running
    pid = proc.live_pid(base / "twistd.pid")
    return pid is not None and _running(pid)


def start_master(base: Path, env: Mapping[str, str] | None = None) -> bool:
    """Start the master (waits until it runs); False when it was already running."""
    if running(base):
        return False
    # buildbot start gives up after 10 s by default, which a master starting on a busy host
    # (its migrations, the www plugin) passes while it goes on to run fine
    proc.run([tool("buildbot"), "start", "--start_timeout=90", str(base)], env=env, timeout=120)
    return True


def stop_master(base: Path, grace_s: float = 90.0) -> bool:
    """Stop the master; False when it was not running. A master with builds in flight can
    take longer to shut down than ``buildbot stop`` waits (10 s, then it gives up with an
    error while the master goes on stopping): wait for it, and kill it past ``grace_s``."""
    return _terminate(base, grace_s)


def start_worker(base: Path, env: Mapping[str, str] | None = None) -> bool:
    if running(base):
        return False
    # --quiet: twistd returns once the daemon runs, instead of buildbot-worker following
    # its log until the master's "attached" (up to 10 s with a master still starting after
    # 'up'); the worker retries until it attaches, and a build waits for it anyway
    try:
        proc.run([tool("buildbot-worker"), "start", "--quiet", str(base)], env=env, timeout=60)
    except proc.CommandError:
        if not running(base):
            raise
    deadline = time.monotonic() + 10.0  # the daemon may write its pid file a moment later
    while not running(base) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def stop_worker(base: Path, grace_s: float = 30.0) -> bool:
    return _terminate(base, grace_s)


def _terminate(base: Path, grace_s: float) -> bool:
    """SIGTERM the twistd daemon of ``base`` (all ``buildbot stop`` and ``buildbot-worker
    stop`` do, after a second or two of imports, the latter then looking once a second) and
    wait for it in short steps; SIGKILL past ``grace_s``. False when it was not running."""
    pid = proc.live_pid(base / "twistd.pid")
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _running(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
    return True


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[3])


def leftover_processes(base: Path) -> list[int]:
    """Processes that belong to a daemon's base directory: the daemon (its pid file), every
    process of its session and their descendants, and anything running below the directory
    (a command's cwd is its step's build directory, inherited by the QEMU guest it starts)."""
    base = base.resolve()
    me = os.getpid()
    roots: set[int] = set()
    try:
        daemon = int((base / "twistd.pid").read_text().strip())
        info = _stat(daemon)
        if info is not None:
            roots.add(daemon)
            # a daemon leads its own session; otherwise the session is its caller's (ours)
            session = info[1] if info[1] == daemon else None
        else:
            session = None
    except (OSError, ValueError):
        session = None
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        info = _stat(pid)
        if info is None:
            continue
        table[pid] = info
        if session is not None and info[1] == session:
            roots.add(pid)
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if base in cwd.parents:  # inside a build directory, not a shell sitting in base
            roots.add(pid)
    found = set(roots)
    grew = True
    while grew:  # descendants, whatever session they started
        grew = False
        for pid, (ppid, _sid) in table.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return sorted(found)


def reap(pids: list[int], grace_s: float = 5.0) -> int:
    """End these processes (TERM, then KILL after ``grace_s``); how many were still alive."""
    import signal
    import time

    alive = [p for p in dict.fromkeys(pids) if _stat(p) is not None and p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_running(p) for p in alive):
            time.sleep(0.1)
        if not any(_running(p) for p in alive):
            break
    return len(alive)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie is gone, only its parent has not read its status)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def local_names(n: int) -> list[str]:
    """The local workers' names: ``local``, then ``local-2`` ... ``local-N``."""
    return [LOCAL_WORKER] + [f"{LOCAL_WORKER}-{i}" for i in range(2, n + 1)]


def add_local_workers(master_base: Path, n: int) -> bool:
    """Declare local workers up to ``n`` in an existing master's configuration (and their
    passwords in its secrets); True when it changed. Local workers share the pool ``local``:
    one host, one guest size, so their runs pool and each worker is a block."""
    cfg_path, secrets_path = master_base / "stackbench.yaml", master_base / "secrets.yaml"
    cfg = yaml.safe_load(cfg_path.read_text()) or {}
    data = yaml.safe_load(secrets_path.read_text()) or {}
    have = {str(w["name"]) for w in cfg.get("workers") or []}
    cpus, mem = machine_size()
    new = [n for n in local_names(n) if n not in have]
    for name in new:
        cfg.setdefault("workers", []).append(
            {"name": name, "kind": "qemu", "cpus": cpus, "memory_mb": mem, "pool": "local"}
        )
        data.setdefault("workers", {})[name] = secrets.token_urlsafe(24)
    if new:
        write_private(secrets_path, yaml.safe_dump(data))
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return bool(new)


def _local_workers(cfg: dict[str, Any]) -> list[str]:
    names = {str(w["name"]) for w in cfg.get("workers") or []}
    return [n for n in local_names(len(names) + 1) if n in names]


LOCAL_UPLOADER = "local-workers"


def local_upload_env(url: str) -> dict[str, str]:
    """What local workers need to post their runs to the web API at ``url``, as a lab's boxes
    do: the URL and the token file of the worker account ``local-workers`` (made once, kept
    in $STACKBENCH_HOME/worker.token, mode 600, made again when the database no longer
    knows it). A round's process then loads no database layer: it sends its runs."""
    from stackbench.jobs.executors.buildbot.results import worker_token_file
    from stackbench.mail import accounts
    from stackbench.resultsdb import accounts_q, db

    path = worker_token_file()
    with db.session() as s:
        held = path.read_text().strip() if path.exists() else ""
        if not held or accounts.user_for_token(s, held) is None:
            user = accounts_q.user_named(s, LOCAL_UPLOADER)
            if user is None:
                user = accounts.create_user(s, LOCAL_UPLOADER, worker=True)
            write_private(path, accounts.create_token(s, user, "the local Buildbot workers") + "\n")
    return {"STACKBENCH_URL": url, "STACKBENCH_WORKER_TOKEN_FILE": str(path)}


MASTER_PROGRAM = "buildbot-master"


def worker_program_name(name: str) -> str:
    return f"buildbot-worker-{name}"


def twistd_program(
    name: str, base: Path, *, env: Mapping[str, str] | None = None, probe: str | None = None
) -> Program:
    """A master's or worker's twistd in the foreground, as the supervisor runs it; it still
    writes twistd.pid (``buildbot reconfig`` signals the pid it holds)."""
    argv = [
        tool("twistd"),
        "--nodaemon",
        "--no_save",
        "--pidfile=twistd.pid",
        "--logfile=twistd.log",
        "--python=buildbot.tac",
    ]
    is_master = name == MASTER_PROGRAM
    return Program(
        name,
        argv,
        cwd=base,
        env=dict(env or {}),
        log=base / "supervised.log",
        priority=10 if is_master else 20,
        # a master with builds in flight takes a while to shut down
        stopwaitsecs=90 if is_master else 30,
        startsecs=3,
        probe=probe,
    )


def start(workers: int = 1, results_url: str | None = None) -> str:
    """Start the master and its local workers under the supervisor (``workers``: at least
    that many, each its own process and base directory). With ``results_url``
    (``stackbench up`` gives its web UI's) the workers post their runs there; without, they
    store them in the database."""
    root = buildbot_dir()
    master_base = root / "master"
    cpus, mem = machine_size()
    first = {"name": LOCAL_WORKER, "kind": "qemu", "cpus": cpus, "memory_mb": mem}
    cfg = create_master(master_base, [{**first, "pool": "local"}])
    added = add_local_workers(master_base, workers)
    if added:
        cfg = yaml.safe_load((master_base / "stackbench.yaml").read_text())
    names = _local_workers(cfg)
    for name in names:
        create_worker(
            root / f"worker-{name}",
            f"127.0.0.1:{cfg['pb_port']}",
            name,
            worker_password(master_base, name),
        )
    www = f"http://127.0.0.1:{cfg['www_port']}/"
    was_up = supervision.program_pid(MASTER_PROGRAM) is not None
    started = supervision.start_programs(
        [twistd_program(MASTER_PROGRAM, master_base, probe=www + "api/v2/masters")]
    )
    if added and was_up:  # a running master learns of its new workers
        proc.run([tool("buildbot"), "reconfig", str(master_base)], timeout=120)
    _wait_answering(www + "api/v2/masters", master_base)
    env = local_upload_env(results_url) if results_url else None
    programs = [
        twistd_program(worker_program_name(n), root / f"worker-{n}", env=env) for n in names
    ]
    started = supervision.start_programs(programs) or started
    state = "started" if started else "already running"
    who = f"worker {names[0]}" if len(names) == 1 else f"{len(names)} workers"
    return f"buildbot: {state} ({www}, {who})"


def _wait_answering(url: str, base: Path, timeout: float = 120.0) -> None:
    """Until the master's REST API answers: a caller's first request is not refused."""
    import http.client

    from stackbench.httpclient import Client, HttpError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            Client(url, timeout=10).send("GET", "")
            return
        except HttpError:
            return  # it answered
        except (OSError, http.client.HTTPException):
            time.sleep(0.2)
    raise StackbenchError(f"the Buildbot master did not answer on {url}; see {base}/twistd.log")


def stop() -> str:
    root = buildbot_dir()
    master_base = root / "master"
    worker_bases = sorted(root.glob("worker-*"))
    # what a worker runs (a benchmark step and its QEMU guest, which has a session of its
    # own) does not die with the worker daemon: find it first, reap what outlives the stop
    bases = [*worker_bases, master_base]
    daemons = {proc.live_pid(b / "twistd.pid") for b in bases}
    doomed = [p for b in bases for p in leftover_processes(b)]
    names = [worker_program_name(b.name.removeprefix("worker-")) for b in worker_bases]
    stopped = supervision.stop_programs([*names, MASTER_PROGRAM])
    # a daemon of an earlier stackbench (``buildbot start``), outside the supervisor
    stopped = any([_terminate(b, 30.0) for b in bases]) or stopped
    doomed += [p for b in bases for p in leftover_processes(b)]
    # a daemon still shutting down (a loaded host) is ended too, but it is not a leftover
    reap([p for p in doomed if p in daemons])
    reaped = reap([p for p in doomed if p not in daemons])
    state = "stopped" if stopped else "not running"
    return f"buildbot: {state}" + (f" ({reaped} leftover processes ended)" if reaped else "")
