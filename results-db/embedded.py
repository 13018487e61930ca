"""A private PostgreSQL cluster under ``$STACKBENCH_HOME``, created and started on first use.

PostgreSQL refuses to run as root, so when stackbench runs as root the server runs as the
``postgres`` account that Debian's package creates. That account cannot traverse a private home
such as /root, so the cluster's files then live under /var/lib/stackbench and
``$STACKBENCH_HOME/pg`` is a symlink to them.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

from stackbench import config
from stackbench.errors import StackbenchError

# proc (subprocess), secrets, socket, shutil, hashlib and logging are imported where used:
# the CLI imports this module for the database URL alone, on every command (a cached
# comparison is 60 ms; those imports were 10 of them)


def _log():
    import logging

    return logging.getLogger(__name__)


SERVICE_USER = "postgres"
DB_NAME = "stackbench"
DB_USER = "stackbench"


def pg_bindir() -> Path:
    """Debian installs versioned binaries; prefer the newest, then whatever is on PATH."""
    base = Path("/usr/lib/postgresql")
    if base.is_dir():
        versions = sorted(
            (p for p in base.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    import shutil

    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise StackbenchError(
        "PostgreSQL server binaries not found: install Debian's 'postgresql' package "
        "or set STACKBENCH_DATABASE_URL"
    )


class Cluster:
    """The embedded cluster of one stackbench home."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or config.home()
        self.link = self.home / "pg"
        self.lock_path = self.home / "pg.lock"
        self.secret_path = self.home / "pg.secret"

    # -- layout ---------------------------------------------------------------------------
    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    def _run_user(self) -> str | None:
        return SERVICE_USER if self.as_root else None

    def _traversable_by_others(self, path: Path) -> bool:
        for parent in [path, *path.parents]:
            try:
                mode = parent.stat().st_mode
            except FileNotFoundError:
                continue
            if not mode & stat.S_IXOTH:
                return False
        return True

    def _storage_dir(self) -> Path:
        if not self.as_root or self._traversable_by_others(self.home):
            return self.home / "pgdata"
        import hashlib

        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:16]
        return Path("/var/lib/stackbench/clusters") / digest

    @property
    def datadir(self) -> Path:
        # the resolved path: the postgres account may not traverse the home holding the link
        return self.link.resolve() / "data"

    @property
    def exists(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    # -- lifecycle --------------------------------------------------------------------------
    @contextmanager
    def _locked(self):
        # one process at a time creates or starts the cluster; others wait, then reuse it
        with open(self.lock_path, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _initdb(self) -> None:
        import secrets
        import shutil

        from stackbench import proc

        storage = self._storage_dir()
        if storage.exists():
            shutil.rmtree(storage)
        storage.mkdir(parents=True)
        if self.link.is_symlink() or self.link.exists():
            if self.link.is_symlink() or self.link.is_file():
                self.link.unlink()
            else:
                shutil.rmtree(self.link)
        if storage != self.link:
            if storage.parent != self.home:
                self.link.symlink_to(storage)
            else:
                storage.rename(self.link)
        (self.link / "run").mkdir(exist_ok=True)
        password = secrets.token_urlsafe(24)
        pwfile = self.link.resolve() / "pwfile"
        pwfile.write_text(password + "\n")
        if self.as_root:
            pw = pwd.getpwnam(SERVICE_USER)
            for p in (self.link.resolve(), pwfile, self.link / "run"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            if storage.parent != self.home:
                os.chmod(storage.parent, 0o755)
                os.chmod(storage.parent.parent, 0o755)
        proc.run(
            [
                pg_bindir() / "initdb",
                "-D",
                self.datadir,
                "-U",
                DB_USER,
                "--pwfile",
                pwfile,
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-instructions",
            ],
            user=self._run_user(),
        )
        pwfile.unlink()
        port = _free_port()
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write(
                "\n# stackbench embedded cluster\n"
                f"port = {port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.link.resolve() / 'run'}'\n"
                "max_connections = 200\n"
                "fsync = on\n"
                "shared_buffers = 128MB\n"
            )
        self.secret_path.write_text(f"{port}\n{password}\n")
        os.chmod(self.secret_path, 0o600)
        _log().info("created PostgreSQL cluster in %s", self.datadir)

    def _secret(self) -> tuple[int, str]:
        port, password = self.secret_path.read_text().split("\n")[:2]
        return int(port), password

    def running(self) -> bool:
        from stackbench import proc

        if not self.exists:
            return False
        res = proc.run(
            [pg_bindir() / "pg_ctl", "status", "-D", self.datadir],
            check=False,
            user=self._run_user(),
        )
        return res.returncode == 0

    def _wait_ready(self, timeout: float = 30.0) -> None:
        from stackbench import proc

        port, _ = self._secret()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = proc.run(
                [pg_bindir() / "pg_isready", "-h", "127.0.0.1", "-p", str(port), "-q"],
                check=False,
            )
            if res.returncode == 0:
                return
            time.sleep(0.1)
        raise StackbenchError(f"embedded PostgreSQL did not accept connections on port {port}")

    def program(self):
        """PostgreSQL in the foreground, as the supervisor of ``stackbench up`` runs it."""
        from stackbench.supervision import Program

        return Program(
            "postgres",
            [str(pg_bindir() / "postgres"), "-D", str(self.datadir)],
            log=self.link.resolve() / "postgres.log",
            user=self._run_user(),
            priority=1,
            stopsignal="INT",  # PostgreSQL's fast shutdown; TERM waits for every client
            stopwaitsecs=60,
            stopasgroup=False,
            inherit_env=False,
        )

    def start_supervised(self) -> bool:
        """Create the cluster if needed and run it under the supervisor (``stackbench up``);
        True when this call started it. A server a command started on its own (pg_ctl) is
        stopped first: the supervisor's would not get the data directory."""
        from stackbench import proc, supervision

        with self._locked():
            if not self.exists:
                self._initdb()
            if supervision.program_pid("postgres") is None and self.running():
                proc.run(
                    [pg_bindir() / "pg_ctl", "stop", "-D", self.datadir, "-m", "fast", "-w"],
                    user=self._run_user(),
                )
            started = supervision.start_programs([self.program()])
            self._wait_ready(60)
        self.ensure_database()
        return started

    def start(self) -> bool:
        """Create and start the cluster if needed; True when this call started it. Under
        ``stackbench up`` the supervisor starts it; a command on its own uses pg_ctl."""
        from stackbench import proc, supervision

        with self._locked():
            if not self.exists:
                self._initdb()
            # the supervisor of 'up' runs the cluster of its own home only
            if self.home == config.home() and supervision.declared_program("postgres"):
                started = supervision.start_programs([self.program()])
                self._wait_ready(60)
                return started
            if self.running():
                return False
            logfile = self.link.resolve() / "postgres.log"
            if self.as_root and not logfile.exists():
                logfile.touch()
                pw = pwd.getpwnam(SERVICE_USER)
                os.chown(logfile, pw.pw_uid, pw.pw_gid)
            res = proc.run(
                [
                    pg_bindir() / "pg_ctl",
                    "start",
                    "-D",
                    self.datadir,
                    "-l",
                    logfile,
                    "-w",
                    "-t",
                    "60",
                ],
                check=False,
                user=self._run_user(),
            )
            if res.returncode != 0:
                raise StackbenchError(
                    f"embedded PostgreSQL failed to start (log: {logfile}): "
                    + proc.tail_text(logfile, 5)
                )
            self._wait_ready()
            _log().info("started embedded PostgreSQL (%s)", self.datadir)
            return True

    def stop(self) -> bool:
        """Stop the cluster; True when it was running."""
        from stackbench import proc

        with self._locked():
            if not self.running():
                return False
            proc.run(
                [pg_bindir() / "pg_ctl", "stop", "-D", self.datadir, "-m", "fast", "-w"],
                user=self._run_user(),
            )
            return True

    def url(self) -> str:
        port, password = self._secret()
        return (
            f"postgresql+psycopg://{DB_USER}:{quote(password, safe='')}@127.0.0.1:{port}/{DB_NAME}"
        )

    def ensure_database(self) -> None:
        """Create the stackbench database inside the cluster (idempotent)."""
        import psycopg

        port, password = self._secret()
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            user=DB_USER,
            password=password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)
            ).fetchone()
            if row is None:
                with suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def destroy(cluster: Cluster) -> None:
    """Stop a cluster and remove its files (tests' private clusters)."""
    import shutil

    cluster.stop()
    target = cluster.link.resolve()
    if cluster.link.is_symlink():
        cluster.link.unlink()
    shutil.rmtree(target, ignore_errors=True)
