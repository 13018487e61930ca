"""Where stackbench keeps its state, and which services it talks to.

Everything is read from the environment each time so tests can point a process at a private
home with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``$STACKBENCH_HOME``, default ``~/.local/share/stackbench``; created on demand."""
    raw = os.environ.get("STACKBENCH_HOME")
    path = Path(raw) if raw else Path.home() / ".local" / "share" / "stackbench"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def database_url() -> str | None:
    """An external server's URL, or None for the embedded cluster."""
    return os.environ.get("STACKBENCH_DATABASE_URL") or None


def server_url() -> str | None:
    """A stackbench web server the CLI should talk to instead of the database."""
    return os.environ.get("STACKBENCH_URL") or None


def project_root() -> Path:
    """The source checkout (useful for shipped stacks and trees in editable installs)."""
    return Path(__file__).resolve().parent.parent
