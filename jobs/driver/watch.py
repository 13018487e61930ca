"""A thin client of one series: it follows what is stored (the dispatcher of ``stackbench up``
moves the series; the Buildbot workers store the runs) and prints it, with an ETA.

Watching changes nothing, so a watcher can stop at any moment (Ctrl-C, a lost connection)
and a new one picks up where the series is. A database that goes away for a while (a
restart) is retried with backoff; only when it stays away does the watcher give up, with one
line that says to run the command again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from stackbench.errors import StackbenchError
from stackbench.jobs.driver.lifecycle import FINAL
from stackbench.jobs.executors.progress import fmt_duration
from stackbench.resultsdb import db, series_runs_store, series_store

RETRY_BUDGET_S = 300.0  # how long an unreachable database is waited for
HEARTBEAT_S = 60.0


@dataclass
class Seen:
    state: str
    progress: str
    meta: dict[str, Any]
    error: str
    events: list[tuple[int, str]]


def look(eng: Engine, sid: int, after_event: int) -> Seen:
    with db.session(eng) as s:
        row = series_store.get(s, sid)
        if row is None:
            raise StackbenchError(f"series {sid} is gone from the database")
        events = series_store.events_after(s, sid, after_event)
        meta = dict(row.meta or {})
        step = series_runs_store.progress(s, [sid]).get(sid, "")
        return Seen(row.state, step, meta, row.error or "", events)


def last_event(eng: Engine, sid: int) -> int:
    with db.session(eng) as s:
        return series_store.last_event_id(s, sid)


@dataclass
class PhaseEta:
    """Time left in the current phase (building k/N, running k/M) from how long its
    finished units took: units of one phase cost about the same once the first is done."""

    phase: str = ""
    started: float = 0.0
    first: tuple[float, int] | None = None  # when the first units were seen done, and how many

    def update(self, state: str, progress: str, now: float) -> str:
        try:
            k, n = (int(x) for x in progress.split("/", 1))
        except ValueError:
            return ""
        if state != self.phase:
            self.phase, self.started, self.first = state, now, None
        if k <= 0:
            return ""
        if self.first is None:
            self.first = (now, k)
        if n <= k:
            return ""
        t0, k0 = self.first
        # the first units of a phase carry its start-up (a cold build): later ones pace it.
        # Units may land together (a round's boots are stored as one), so the pace is per
        # unit since the first seen, never the gap between two units of one batch
        per = (now - t0) / (k - k0) if k > k0 else (t0 - self.started) / k0
        return f"ETA {fmt_duration(per * (n - k))}"


def follow(
    eng: Engine,
    sid: int,
    *,
    say: Callable[[str], None] = print,
    poll: float = 1.0,
    keep_alive: Callable[[], str | None] | None = None,
    since_event: int | None = None,
    budget_s: float = RETRY_BUDGET_S,
) -> str:
    """Print the series' events and progress until it ends; its final state.
    ``keep_alive`` is called now and then (it restarts a dispatcher that died) and may
    return a line to print."""
    after = last_event(eng, sid) if since_event is None else since_event
    started = time.monotonic()
    eta = PhaseEta()
    shown = ("", "")
    last_line = started
    last_alive = 0.0
    failing_since: float | None = None
    backoff = 1.0
    while True:
        now = time.monotonic()
        try:
            seen = look(eng, sid, after)
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
            failing_since = failing_since or now
            if now - failing_since > budget_s:
                raise StackbenchError(
                    f"the database stayed unreachable for {budget_s:.0f} s; the series goes "
                    "on without this client: run the same command again to attach"
                ) from exc
            say(f"database not reachable; retrying in {backoff:.0f} s")
            time.sleep(backoff)
            backoff = min(backoff * 2, 30.0)
            continue
        failing_since, backoff = None, 1.0
        at = fmt_duration(now - started)
        for eid, message in seen.events:
            after = eid
            say(f"[{at}] {message.splitlines()[0] if message else ''}")
            last_line = now
        if seen.state in FINAL:
            return seen.state
        if (seen.state, seen.progress) != shown or now - last_line >= HEARTBEAT_S:
            left = eta.update(seen.state, seen.progress, now)
            what = f"{seen.state} {seen.progress}".strip()
            say(f"[{at}] series {sid}: {what}" + (f", {left}" if left else ""))
            shown, last_line = (seen.state, seen.progress), now
        if keep_alive is not None and now - last_alive >= 10.0:
            last_alive = now
            line = keep_alive()
            if line:
                say(line)
        time.sleep(poll)
