"""Waiting for a bare-metal box after its kexec, and what a box that never reports leaves.

A box queued with ``stackbench worker baremetal`` goes away (kexec into the kernel under
test), runs the job natively (jobs/executors/native.py), uploads and reboots into its production
kernel. Whoever waits for it, Buildbot's AwaitReport step (jobs.executors.buildbot.box_steps) or ``stackbench worker
await-box``, looks for exactly the runs' idempotency keys. A box that does not report within
its timeout is lost: one ``lost`` run records the attempt with the reason and, when the
box's serial console is logged somewhere readable (a BMC's serial-over-LAN log, QEMU's
console file), its tail. The runs of the job are stored all or not at all: they are uploaded
by the box only after the whole job ran, and a lost attempt adds no sample.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stackbench import proc

CONSOLE_TAIL_LINES = 40


@dataclass
class BoxOutcome:
    status: str  # reported | lost
    reason: str
    found: int
    wanted: int
    waited_s: float


def console_tail(path: Path | None, lines: int = CONSOLE_TAIL_LINES) -> str:
    if path is None or not Path(path).is_file():
        return ""
    return proc.tail_text(Path(path), lines)


def wait_for_report(
    keys: list[str],
    commit: str,
    url: str | None,
    *,
    timeout_s: float,
    poll_s: float = 30.0,
    lookup: Callable[[list[str], str, str | None], set[str]] | None = None,
) -> BoxOutcome:
    """Poll stackbench until every key is stored or ``timeout_s`` passes."""
    from stackbench.jobs.executors.buildbot import reported

    look = lookup or reported.stored_keys
    started = time.monotonic()
    found: set[str] = set()
    while True:
        # a lookup that fails (the server restarting) is asked again at the next poll
        with contextlib.suppress(Exception):
            found = look(keys, commit, url)
        waited = time.monotonic() - started
        if set(keys) <= found:
            return BoxOutcome("reported", "", len(found), len(keys), waited)
        if waited >= timeout_s:
            reason = (
                f"the box did not report within {timeout_s:g} s "
                f"({len(found)} of {len(keys)} run(s) stored); the kernel under test hung or "
                f"never came up"
            )
            return BoxOutcome("lost", reason, len(found), len(keys), waited)
        time.sleep(min(poll_s, max(0.0, timeout_s - waited)) or 0.1)


def lost_error(reason: str, console: str) -> str:
    """The error text of a lost attempt: the reason, then the console's last lines."""
    if not console.strip():
        return reason
    return f"{reason}\n--- console ---\n{console.rstrip()}"
