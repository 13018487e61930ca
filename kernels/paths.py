"""Where kernel state lives: tree repositories, ccache, object dirs and built artifacts.

They sit under ``$STACKBENCH_KERNEL_CACHE`` when set, else under ``$STACKBENCH_HOME``. The
separate knob lets tests (whose STACKBENCH_HOME is a fresh temporary directory) share one
unpacked tree, one ccache and the object dirs between runs, so only the first run pays for a
cold kernel build.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stackbench import config


def cache_root() -> Path:
    raw = config.get("STACKBENCH_KERNEL_CACHE")
    root = Path(raw) if raw else config.home()
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def trees_dir() -> Path:
    return _sub("trees")


def obj_dir() -> Path:
    return _sub("obj")


def artifacts_dir() -> Path:
    return _sub("artifacts")


def ccache_dir() -> Path:
    raw = os.environ.get("CCACHE_DIR")
    return Path(raw) if raw else _sub("ccache")


def locks_dir() -> Path:
    return _sub("locks")


def _sub(name: str) -> Path:
    path = cache_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


_local = threading.local()


@contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive inter-process lock named ``name`` (a file under locks/).

    Re-entrant within one thread: flock treats two opens of the same file as two owners, so a
    nested acquisition (build() inside a caller's workspace lock) would deadlock without this
    count. Other threads open their own descriptor and so wait like other processes.
    """
    path = locks_dir() / f"{name}.lock"
    held: dict[str, int] = _local.__dict__.setdefault("held", {})
    key = str(path)
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held[key] = 1
        try:
            yield
        finally:
            del held[key]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def held(name: str) -> bool:
    """Whether a live process (this one included) holds the lock ``name`` of
    :func:`locked`: the lock goes with its holder, so a killed one holds nothing."""
    path = locks_dir() / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor lets go of a lock taken here
    return False
