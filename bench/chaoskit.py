"""What bench/chaos.py sets up and does around the stack it tries, with stackbench's own
APIs where it has them: a tiny kernel tree to submit series against, a token, a series
posted over the web API, a flood of clients hanging up early, a full disk and a local
public-inbox v2 archive. (The suite has its own, pytest-bound, versions in tests/.)"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

JOB = "vm-scalability"
GIT_ENV = {"GIT_AUTHOR_NAME": "Chaos Bench", "GIT_AUTHOR_EMAIL": "chaos@example.org",
           "GIT_COMMITTER_NAME": "Chaos Bench", "GIT_COMMITTER_EMAIL": "chaos@example.org",
           "GIT_AUTHOR_DATE": "2024-01-17T10:00:00+00:00"}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd``: its output; a failure stops the bench with git's words."""
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"chaos: git {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


def tiny_tree(root: Path) -> Path:
    """A kernel tree ``tiny`` (tag v0) and a clone ``work`` beside it to commit series in;
    the folder of tree definitions naming it."""
    repo, work = root / "tiny", root / "work"
    (repo / "mm").mkdir(parents=True)
    (repo / "mm" / "compaction.c").write_text("int compaction;\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "v0")
    git(root, "clone", "-q", str(repo), str(work))
    defs = root / "trees"
    defs.mkdir()
    (defs / "tiny.yaml").write_text(
        f"name: tiny\ndescription: chaos bench tree\nsource:\n  path: {repo}\ndefault_base: v0\n"
    )
    return defs


def add_token(name: str) -> str:
    """An API token of a new account ``name`` (in the stack's database)."""
    from stackbench.mail import accounts
    from stackbench.resultsdb import db

    with db.session() as s:
        user = accounts.create_user(s, name, password=f"pw-{name}-1", email=f"{name}@example.org")
        return accounts.create_token(s, user, f"token of {name}")


def post_series(web: str, token: str, mbox: str) -> int:
    """Submit ``mbox`` to the web API (``POST /api/series``): the new series' id."""
    from stackbench.apiclient import ApiClient

    body = {"mbox": mbox, "tree": "tiny", "jobs": [JOB], "runs": 2}
    return int(ApiClient(web, token, timeout=30).post("/api/series", body)["id"])


def flood(host: str, port: int, path: str, total: int = 2000, at_once: int = 50) -> dict[str, int]:
    """``total`` GETs, ``at_once`` in flight, each client hanging up before the answer;
    every other one with SO_LINGER 0 (a reset instead of a FIN)."""
    counts = {"sent": 0, "refused": 0}
    lock = threading.Lock()
    todo = iter(range(total))

    def client() -> None:
        for i in todo:
            try:
                with socket.create_connection((host, port), timeout=5) as s:
                    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                    if i % 2:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                key = "sent"
            except OSError:
                key = "refused"
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=client) for _ in range(at_once)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def fill(disk: Path) -> Path:
    """Fill ``disk`` with one file until it is full; the file (remove it to free the disk)."""
    filler = disk / "filler"
    chunk = b"\xa5" * 65536
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


class Inbox:
    """A public-inbox v2 archive of list ``address`` (public-inbox-init -V2) that mails are
    delivered to as the list's MTA would (public-inbox-mda)."""

    def __init__(self, root: Path, address: str, name: str = "chaos") -> None:
        if not shutil.which("public-inbox-init"):
            raise SystemExit("chaos: public-inbox is not installed (scripts/bootstrap installs it)")
        self.address = address
        self.dir = root / "inbox"
        self.env = {**os.environ, "PI_CONFIG": str(root / "pi-config"), "HOME": str(root)}
        root.mkdir(parents=True, exist_ok=True)
        self._run(["public-inbox-init", "-V2", "-L", "basic", name, str(self.dir),
                   f"http://127.0.0.1/{name}", address])  # fmt: skip
        # no SpamAssassin here: every mail is delivered
        self._run(["git", "config", "-f", self.env["PI_CONFIG"], "publicinboxmda.spamcheck",
                   "none"])  # fmt: skip

    def _run(self, argv: list[str], data: bytes | None = None, **env: Any) -> None:
        subprocess.run(argv, input=data, env={**self.env, **env}, check=True,
                       capture_output=True, timeout=60)  # fmt: skip

    def deliver(self, raw: bytes) -> None:
        self._run(["public-inbox-mda", "--no-precheck"], raw, ORIGINAL_RECIPIENT=self.address)
