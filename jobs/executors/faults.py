"""Whose fault is an error: the host's (a read-only or full disk, a forbidden directory),
which is retried once fixed, or the series' own, which ends it; and which line of a log
says why. The dispatcher and a Buildbot worker's build step ask."""

from __future__ import annotations

import errno
import os

from stackbench.errors import StackbenchError

# what a broken host says (not a broken series): a read-only, full or forbidden directory
HOST_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO}
# what a full or read-only disk makes tools print: the C library's words, and git's own for
# a failed write ("sha1 file '.../index.lock' write error. Out of diskspace")
DISK_MESSAGES = (
    *(os.strerror(e) for e in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)),
    "Out of diskspace",
)
HOST_MESSAGES = (*(os.strerror(e) for e in sorted(HOST_ERRNOS)), "Out of diskspace")


# a step waiting on a host fault is tried again after 2 s, then twice as late each time, up
# to every 5 minutes, for as long as the fault lasts
HOST_RETRY_MIN_S, HOST_RETRY_MAX_S = 2.0, 300.0


def next_wait(previous: float | None) -> float:
    """Seconds until the next try of a step waiting on a host fault (``previous``: the last
    wait, None for the first)."""
    return HOST_RETRY_MIN_S if previous is None else min(previous * 2, HOST_RETRY_MAX_S)


class HostFault(StackbenchError):
    """A step stopped by this machine (its disk), not by the series: whoever runs the step
    waits and tries again instead of failing the series."""


def host_fault(exc: BaseException) -> str | None:
    """The line saying what is wrong with the host when ``exc`` comes from it (an OSError
    of HOST_ERRNOS, a HostFault, or a git or tool error quoting one), else None."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in HOST_ERRNOS:
            return first_line(e)
        if isinstance(e, HostFault):
            return first_line(e)
        line = _line_with(str(e), HOST_MESSAGES)
        if line:
            return line
    return None


def build_fault(exc: BaseException) -> str | None:
    """:func:`host_fault` for what a kernel build raised: an OSError of the host's, or a
    tool's output naming a full or read-only disk (:func:`disk_fault_in`), else None."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in HOST_ERRNOS:
            return first_line(e)
        line = disk_fault_in(str(e))
        if line:
            return line
    return None


def disk_fault_in(output: str) -> str | None:
    """The line of a tool's output (git am's, a build log's tail) that says the disk is
    full or read-only, else None. Narrower than :func:`host_fault`: a build that prints
    "Permission denied" may well be the patch's doing (a script added without its mode)."""
    return _line_with(output, DISK_MESSAGES)


def _line_with(text: str, messages: tuple[str, ...]) -> str | None:
    for msg in messages:
        if msg in text:
            line = next(ln for ln in text.splitlines() if msg in ln)
            return line.strip()[:300]
    return None


def _chain(exc: BaseException | None) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc
    return next((ln.strip() for ln in str(cause).splitlines() if ln.strip()),
                type(cause).__name__)[:200]  # fmt: skip


def first_error(tail: str) -> str:
    """The line that says why: the compiler's first ``error:``, else make's last error
    line, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for pick in (
        lambda: next(ln for ln in lines if "error:" in ln),
        lambda: next(ln for ln in reversed(lines) if "error" in ln.lower()),
        lambda: lines[-1],
    ):
        try:
            return pick()[:300]
        except (StopIteration, IndexError):
            continue
    return ""
