"""Whose fault is an error: the host's (a read-only or full disk, a forbidden directory),
which is retried once fixed, or the series' own, which ends it; and which line of a log
says why. The dispatcher asks."""

from __future__ import annotations

import errno
import os

# what a broken host says (not a broken series): a read-only, full or forbidden directory
HOST_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO}
HOST_MESSAGES = tuple(os.strerror(e) for e in sorted(HOST_ERRNOS))


def host_fault(exc: BaseException) -> str | None:
    """The line saying what is wrong with the host when ``exc`` comes from it (an OSError
    of HOST_ERRNOS, or a git or tool error quoting one), else None."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in HOST_ERRNOS:
            return first_line(e)
        text = str(e)
        for msg in HOST_MESSAGES:
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
