"""Fault makers shared by the suite (tests/) and the chaos bench (bench/chaos.py): a tiny
kernel tree to submit series against, a flood of clients hanging up early, a disk filled
to the last byte.

Neither side imports the other (tests/ is pytest's, bench/ the measurements'), and none of
this belongs in the shipped package, so the one copy lives here: tests/conftest.py and
bench/chaos.py put this folder on sys.path. Plain functions, no pytest: a failure raises
with the tool's own words.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import subprocess
import threading
from pathlib import Path

GIT_ENV = {"GIT_AUTHOR_NAME": "Fault Kit", "GIT_AUTHOR_EMAIL": "faults@example.org",
           "GIT_COMMITTER_NAME": "Fault Kit", "GIT_COMMITTER_EMAIL": "faults@example.org",
           "GIT_AUTHOR_DATE": "2024-01-17T10:00:00+00:00", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd``: its output; a failure raises with git's words."""
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def tiny_tree(root: Path, patches: int = 0) -> Path:
    """A kernel tree ``tiny`` (tag v0) and a clone ``work`` beside it with ``patches`` mm
    commits on top; the folder of tree definitions naming it."""
    repo, work = root / "tiny", root / "work"
    (repo / "mm").mkdir(parents=True)
    (repo / "mm" / "compaction.c").write_text("int compaction;\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "v0")
    git(root, "clone", "-q", str(repo), str(work))
    for i in range(1, patches + 1):
        with open(work / "mm" / "compaction.c", "a") as fh:
            fh.write(f"int step{i};\n")
        git(work, "commit", "-q", "-am", f"mm/compaction: step {i}\n\nBecause {i}.")
    defs = root / "trees"
    defs.mkdir()
    (defs / "tiny.yaml").write_text(
        f"name: tiny\ndescription: a tiny tree\nsource:\n  path: {repo}\ndefault_base: v0\n"
    )
    return defs


def flood(host: str, port: int, path: str, total: int = 2000, at_once: int = 50) -> dict[str, int]:
    """``total`` GETs, ``at_once`` in flight, each client hanging up before the answer;
    every other one with SO_LINGER 0 (a reset instead of a FIN). How many were sent, and
    how many found the port refusing."""
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


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` with one file until it is full, then give ``leave`` bytes back; the file
    (remove it to free the disk). Any error but a full disk is raised."""
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
        fh.truncate(max(0, fh.tell() - leave))
    return filler
