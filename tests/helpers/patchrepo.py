"""A small git repository for the patch tests: git run under one fixed author and date and
a bare environment, so the commits, and the mails made from them, are the same every run."""

from __future__ import annotations

import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Ann Author",
    "GIT_AUTHOR_EMAIL": "ann@example.org",
    "GIT_COMMITTER_NAME": "Ann Author",
    "GIT_COMMITTER_EMAIL": "ann@example.org",
    "GIT_AUTHOR_DATE": "2024-03-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-03-01T12:00:00+00:00",
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
}
# far enough apart that each patch's hunk has its own context
FILLER = "".join(f"/* line {i} */\n" for i in range(8))
LIB = f"int a = 1;\n{FILLER}int b = 2;\n{FILLER}int c = 3;\n"


def sh(repo: Path, *args: str) -> str:
    """``git -C REPO ARGS...`` under ENV: its output, stripped; a failure raises."""
    out = subprocess.run(
        ["git", "-C", str(repo), *args], env=ENV, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()
