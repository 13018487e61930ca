"""The one wrapper through which stackbench runs other programs.

Commands are argument lists, never shell strings, so nothing taken from a patch or a form can
be interpreted by a shell.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from stackbench.errors import StackbenchError

log = logging.getLogger(__name__)


class CommandError(StackbenchError):
    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-20:])
        super().__init__(f"{argv[0]} exited {returncode}: {tail}")


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
    log_path: Path | None = None,
    user: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and capture stdout+stderr together (as text).

    ``env`` entries are added to the current environment. With ``log_path`` the output is
    streamed to that file instead of memory (kernel builds), and ``.stdout`` holds its tail.
    ``user`` runs the command as another account (root dropping to the postgres user).
    """
    args = [os.fspath(a) for a in argv]
    if user is not None:
        args = ["runuser", "-u", user, "--", *args]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log.debug("run %s", args)
    data = input.encode() if isinstance(input, str) else input
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as fh:
            proc = subprocess.run(
                args,
                cwd=cwd,
                env=full_env,
                input=data,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        out = tail_text(log_path, 200)
    else:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=full_env,
            input=data,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        out = proc.stdout.decode(errors="replace")
    result = subprocess.CompletedProcess(args, proc.returncode, out, "")
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, out)
    return result


def tail_text(path: Path, lines: int = 50) -> str:
    """The last ``lines`` lines of a (possibly large) text file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def live_pid(pidfile: Path) -> int | None:
    """The pid a daemon wrote to ``pidfile`` while that process still exists, else None.
    A process owned by someone else (PermissionError) still counts as running."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid
