"""The dispatcher: the service that takes every submitted series to ``done`` or ``failed``.

``stackbench up`` runs it beside the web UI and the master. It looks at what is stored:

- a series in ``new`` is applied (``git am``) here: ``applied`` or ``apply-failed``;
- an ``applied`` series goes to Buildbot (the executor of record whenever a master is
  configured: ``$STACKBENCH_BUILDBOT_URL`` or the embedded one), with a submission key of its
  own so a restarted dispatcher finds its buildset instead of submitting a second one; with
  no Buildbot it runs in this process (the in-process pipeline, one series at a time);
- a series at Buildbot advances from its builds and its stored runs (``building k/N``,
  ``running k/M``) and ends with its last build: ``failed`` with every reason (log tails and
  addresses, ``build-failed`` kernels, crashed runs) or ``done``, and its report is queued.

What the master did is learnt from its reporter's NOTIFY (``build <id> started|finished``):
only the series that build belongs to is read back over REST; without news a series at
Buildbot is read every SLOW_LOOK_S (a NOTIFY sent while the database was away is lost). Each
look starts with one small request saying whether the master answers at all: while it does
not, nothing else is asked of it (it is asked again with backoff), and each series whose
work is there says on its page since when it is unreachable (the series' ``host_fault``).

One dispatcher works on a database at a time (an advisory lock): a second waits.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from sqlalchemy import Engine

from stackbench import config
from stackbench.errors import StackbenchError
from stackbench.jobs.driver import lifecycle
from stackbench.jobs.driver.buildbot_executor import BuildbotExecutor
from stackbench.jobs.driver.journey import Journey
from stackbench.jobs.executors.faults import first_line as _first_line
from stackbench.jobs.executors.faults import host_fault, next_wait
from stackbench.resultsdb import db, series_runs_store, series_store, signals

log = logging.getLogger(__name__)

LOCK_KEY = signals.DISPATCHER_LOCK
DISPATCH_RETRY_S = 5.0  # how long one Buildbot request of the dispatcher retries
# between looks when nothing woke it: a submission, the end of local work and the master's
# reporter (every build's start and end, jobs.executors.buildbot.reporter) NOTIFY it at once
POLL_S = 10.0
# a series at Buildbot read back without news from the reporter: the one look a lost NOTIFY costs
SLOW_LOOK_S = 60.0
MASTER_TIMEOUT_S = 10.0  # one request to a master that accepts but does not answer (SIGSTOP)
STOP_CHECK_S = 0.5  # how soon a stopped dispatcher notices, while it waits for news
STARTS_GATHER_S = 1.0  # how long news of builds starting waits for the rest of its wave
RECONNECT_MIN_S, RECONNECT_MAX_S = 0.5, 30.0  # backoff of a dispatcher that lost its database


class Dispatcher:
    def __init__(self, eng: Engine, master: Callable[[], Any | None] | None = None) -> None:
        self.eng = eng
        self._master_of = master or configured_master
        self._executor: BuildbotExecutor | None = None
        self._local: queue.Queue[tuple[str, int]] = queue.Queue()
        self._queued: set[int] = set()
        self._retry_at: dict[int, float] = {}  # series waiting on a host fault: next try
        self._backoff: dict[int, float] = {}
        self._news: set[int] = set()  # builds the reporter said started or ended
        self._urgent = False  # news since the last look that is more than builds starting
        self._looked: dict[int, float] = {}  # series at Buildbot: when last read back
        self._master_down: dict[str, Any] | None = None  # since (epoch s), retry_at, wait
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._local_worker, daemon=True)

    # -- the loop

    def serve(self, poll: float = POLL_S) -> None:
        """Work until stopped, through database restarts: holding the one-dispatcher lock,
        and when the connection is lost, connecting again with backoff (0.5 s doubling to
        RECONNECT_MAX_S) and taking the lock again. It starts by removing what killed work
        left behind (:func:`clean_up`)."""
        clean_up()
        delay = RECONNECT_MIN_S
        while not self.stop.is_set():
            try:
                lock = hold_lock(self.eng, lambda: not self.stop.is_set())
                if lock is None:
                    return
                delay = RECONNECT_MIN_S
                log.info("dispatcher: working on %s",
                         self.eng.url.render_as_string(hide_password=True))  # fmt: skip
                try:
                    self.run(poll)
                    return
                finally:
                    with suppress(Exception):  # the lock's connection may be gone already
                        lock.close()
            except Exception as exc:
                if not db.connection_lost(exc):
                    raise
                log.warning("dispatcher: database connection lost (%s); trying again in "
                            "%.1f s", _first_line(exc), delay)  # fmt: skip
                self.stop.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)

    def run(self, poll: float = POLL_S) -> None:
        """Work until stopped: a tick at every notification, and every ``poll`` seconds.
        A lost database connection ends it (``serve`` connects again)."""
        if not self._thread.is_alive():
            self._thread.start()
        conn = signals.listen(db.resolve_url(start=False), lifecycle.CHANNEL)
        try:
            while not self.stop.is_set():
                try:
                    self.tick()
                except StackbenchError as exc:
                    log.warning("dispatcher: %s", exc)
                except Exception as exc:  # a bad series must not stop the service for the others
                    if db.connection_lost(exc):
                        raise
                    log.exception("dispatcher tick failed")
                self._wait_for_news(conn, poll)
                # what came meanwhile too: one look sees a burst (a wave of rounds ending
                # and the next starting is eight builds' events, all on the busy master)
                for n in conn.notifies(timeout=0.0):
                    self._note_news(n.payload)
                self._let_starts_gather(conn)
        finally:
            with suppress(Exception):
                conn.close()

    def _wait_for_news(self, conn: Any, poll: float) -> None:
        """Until a notification comes, ``poll`` seconds pass or the dispatcher is stopped:
        the wait is cut in slices, since a SIGTERM (`stackbench down`, the supervisor) only
        sets ``stop`` and must not wait out a whole poll."""
        deadline = time.monotonic() + poll
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for n in conn.notifies(timeout=min(left, STOP_CHECK_S), stop_after=1):
                self._note_news(n.payload)
                return

    def _note_news(self, payload: str) -> None:
        """Keep the build id of the reporter's ``build <id> started|finished``; anything
        but a build's start (an end, a submission, a local run's end) is urgent."""
        word, _, rest = (payload or "").partition(" ")
        buildid, _, what = rest.partition(" ")
        if word == "build" and buildid.isdigit():
            self._news.add(int(buildid))
        if not (word == "build" and what == "started"):
            self._urgent = True

    def _let_starts_gather(self, conn: Any) -> None:
        """When the only news is builds that started, wait up to STARTS_GATHER_S for the rest
        of their wave (or for anything urgent) before the look. A start decides nothing, and
        each look is several requests to the master: ten rounds starting together woke a
        look per start or two, and the master answered them while it started the rounds."""
        if self._urgent or not self._news:
            self._urgent = False
            return
        deadline = time.monotonic() + STARTS_GATHER_S
        while not (self._urgent or self.stop.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for n in conn.notifies(timeout=min(left, STOP_CHECK_S), stop_after=1):
                self._note_news(n.payload)
        self._urgent = False

    def tick(self) -> None:
        news, self._news = self._news, set()
        reachable: bool | None = None  # asked once a tick, when a series needs the master

        def master_answers() -> bool:
            nonlocal reachable
            if reachable is None:
                reachable = self._master_answers()
            return reachable

        at_master = []
        for sid, state, how, source, fault, fetched in self._active():
            waits = (fault or {}).get("step") == BUILDBOT_STEP
            if state in ("new", "applying") and not how:
                self._enqueue("apply", sid)
            elif state == "applied" and not how and source == "push" and fetched is None:
                self._enqueue("fetch", sid)
            elif state == "applied" and not how:
                if master_answers():
                    self._hand_over(sid)
                self._say_master(sid, waits)
            elif how == "buildbot" and state in ("building", "running"):
                if master_answers():
                    at_master.append(sid)
                self._say_master(sid, waits)
            elif how == "in-process" and state in ("applied", "building", "running"):
                self._enqueue("run", sid)  # a dispatcher stopped mid-run: run it again
        owners = self._owners(news) if at_master and news else set()
        now = time.monotonic()
        for sid in at_master:
            looked = self._looked.get(sid)
            if owners is None or sid in owners or looked is None or now - looked >= SLOW_LOOK_S:
                self._looked[sid] = now
                self._reconcile(sid)
        for sid in self._unreported():  # finished while no dispatcher was there to report
            self._report(sid, "finished")

    # -- the master's reachability, said on the pages of the series waiting on it

    def _master_answers(self) -> bool:
        """Whether the master answers one small request; while it does not, it is asked
        again only after a growing wait (2 s doubling to 300 s), and nothing else is."""
        bb = self._buildbot()
        if bb is None:
            return True  # no master: the series run in this process
        down = self._master_down
        if down is not None and time.monotonic() < down["retry_at"]:
            return False
        try:
            bb.ping()
        except StackbenchError as exc:
            self.master_unreachable(str(exc))
            return False
        if down is not None:
            log.info("dispatcher: Buildbot answers again (unreachable since %s)",
                     _when(down["since"]))  # fmt: skip
            # what it reported meanwhile was dropped with the ticks that could not ask it
            # (a restart ends builds): every series there is read now, not at its slow look
            self._looked.clear()
        self._master_down = None
        return True

    def master_unreachable(self, why: str) -> None:
        """Note the master as down (a request to it failed): since when, and when to ask."""
        down = self._master_down or {"since": time.time(), "wait": None}
        down["wait"] = next_wait(down["wait"])
        down["retry_at"] = time.monotonic() + down["wait"]
        if self._master_down is None:
            log.warning("dispatcher: Buildbot unreachable, retrying: %s", why.splitlines()[0])
        self._master_down = down

    def _say_master(self, sid: int, said: bool) -> None:
        """The series' note of an unreachable master (its ``host_fault``, through the
        lifecycle): written once an outage, removed with an event once it answers again."""
        down = self._master_down
        if down is None:
            if said:
                fault = self._fault(sid)
                if fault.get("step") == BUILDBOT_STEP:
                    self._note(sid, host_fault=None)
                    lifecycle.event(self.eng, sid, f"series:{sid}", "resumed",
                                    f"Buildbot answers again ({fault.get('error')})")  # fmt: skip
            return
        error = f"Buildbot unreachable since {_when(down['since'])}, retrying"
        if self._fault(sid).get("error") == error:
            return
        self._note(sid, host_fault={
            "error": error, "step": BUILDBOT_STEP, "since": down["since"]})  # fmt: skip
        lifecycle.event(self.eng, sid, f"series:{sid}", "waiting", error)

    def _owners(self, builds: set[int]) -> set[int] | None:
        """The series the builds the reporter named belong to (by their submission
        property); None when that is not known (then every series is read)."""
        bb = self._buildbot()
        if bb is None:
            return None
        with db.session(self.eng) as s:
            by_submission = {}
            for sid, _state, how, *_flags in series_runs_store.active(s, lifecycle.PENDING):
                d = series_runs_store.dispatch(s, sid) if how == "buildbot" else None
                if d is not None and d.submission:
                    by_submission[d.submission] = sid
        try:
            subs = bb.submissions_of_builds(sorted(builds))
            owners = {by_submission[sub] for sub in subs.values() if sub in by_submission}
        except StackbenchError as exc:
            self.master_unreachable(str(exc))
            return None
        return owners

    def _active(self) -> list[series_runs_store.Active]:
        # only series a front door handed over (an open attempt): a foreground
        # `stackbench demo` or `submit` runs its own
        with db.session(self.eng) as s:
            return series_runs_store.active(s, lifecycle.PENDING)

    def _unreported(self) -> list[int]:
        with db.session(self.eng) as s:
            return series_store.unreported(s)

    # -- local work: apply, and the in-process executor

    def _enqueue(self, what: str, sid: int) -> None:
        if sid in self._queued or self._retry_at.get(sid, 0.0) > time.monotonic():
            return
        self._queued.add(sid)
        self._local.put((what, sid))

    def _local_worker(self) -> None:
        while not self.stop.is_set():
            try:
                what, sid = self._local.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._work(what, sid)
            except Exception:  # the thread must outlive any series and any outage
                log.exception("series %s: %s failed", sid, what)
            finally:
                self._queued.discard(sid)
            # the loop waits for a NOTIFY: the next step (the hand-over after an apply)
            # starts now instead of at the next poll
            with suppress(Exception), db.session(self.eng) as s:
                lifecycle.notify(s)

    def _work(self, what: str, sid: int) -> None:
        try:
            if what == "apply":
                self._apply(sid)
            elif what == "fetch":
                self._fetch(sid)
            else:
                self._run_in_process(sid)
        except Exception as exc:
            if db.connection_lost(exc):
                # nothing to record while the database is away: the series keeps its
                # state, and the next tick after the reconnection takes it up again
                log.warning("series %s: %s stopped, database lost: %s", sid, what,
                            _first_line(exc))  # fmt: skip
                return
            fault = host_fault(exc)
            if fault is None:  # the series' own fault: recorded on it, for good
                log.exception("series %s: %s failed", sid, what)
                reason = _first_line(exc)
                lifecycle.set_state(self.eng, sid, "failed", f"{what} failed: {reason}",
                                    error=f"{what} failed: {reason}")  # fmt: skip
                return
            self._wait_on_host(sid, what, fault)
            return
        if sid in self._retry_at:
            self._retry_at.pop(sid)
            self._backoff.pop(sid, None)
            fault = self._fault(sid)
            self._note(sid, host_fault=None)
            if fault.get("error"):
                lifecycle.event(self.eng, sid, f"series:{sid}", "resumed",
                                f"{what}: the host fault is gone, going on ({fault['error']})")  # fmt: skip

    def _wait_on_host(self, sid: int, what: str, fault: str) -> None:
        """A fault of this machine (a read-only or full disk, a permission): the series is
        not to blame, so it keeps its state and is tried again, less often each time, until
        the host is fixed; its page says what it waits on."""
        delay = next_wait(self._backoff.get(sid))
        self._backoff[sid] = delay
        self._retry_at[sid] = time.monotonic() + delay
        log.warning("series %s: %s waits on a host fault (retry in %.0f s): %s",
                    sid, what, delay, fault)  # fmt: skip
        if self._fault(sid).get("error") != fault:
            self._note(sid, host_fault={"error": fault, "step": what})
            lifecycle.event(self.eng, sid, f"series:{sid}", "waiting",
                            f"{what}: waiting on a host fault, retried until fixed: {fault}")  # fmt: skip

    def _apply(self, sid: int) -> None:
        from stackbench.jobs.driver.apply_stage import apply_only

        apply_only(self.eng, sid)  # records applied / apply-failed itself
        line = lifecycle.report_apply_failed(self.eng, sid)
        if line:
            log.info("series %s: apply-failed; %s", sid, line)

    def _fetch(self, sid: int) -> None:
        """Pushed commits live in the intake repository: copy them into the tree's
        repository, where this machine's builds (in-process or its local worker) look."""
        from stackbench.jobs.driver import apply_stage
        from stackbench.kernels import trees

        with db.session(self.eng) as s:
            series = series_store.get(s, sid)
            name = series.tree.name if series is not None and series.tree else ""
        try:
            tree = trees.load_tree(name)
        except StackbenchError:
            tree = None  # a tree only the database knows: its workers fetch for themselves
        if tree is not None:
            apply_stage.fetch_pushed(self.eng, sid, trees.ensure_repo(tree))
        self._note(sid, fetched=tree is not None)

    def _fault(self, sid: int) -> dict[str, Any]:
        """The host fault the series' attempt waits on ({} when none)."""
        with db.session(self.eng) as s:
            row = series_runs_store.current(s, sid)
            return dict(row.host_fault or {}) if row is not None else {}

    def _note(self, sid: int, **flags: Any) -> None:
        with db.session(self.eng) as s:
            series_runs_store.note(s, sid, **flags)

    def _run_in_process(self, sid: int) -> None:
        from stackbench.jobs.driver import pipeline

        state = pipeline.run_series(self.eng, sid, executor="in-process")
        if state in ("done", "failed"):
            self._report(sid, state)

    # -- Buildbot

    def _buildbot(self) -> BuildbotExecutor | None:
        if self._executor is None:
            master = self._master_of()
            if master is None:
                return None
            # the dispatcher tries again on its next tick: a request must not hold the
            # loop (and every other series) for the interactive clients' retry budget
            if getattr(master, "budget_s", "absent") is None:
                master.budget_s = DISPATCH_RETRY_S
            http = getattr(master, "_http", None)
            if http is not None:
                http.timeout = MASTER_TIMEOUT_S
            self._executor = BuildbotExecutor(master, unreachable=self.master_unreachable)
        return self._executor

    def _hand_over(self, sid: int) -> None:
        bb = self._buildbot()
        if bb is None:
            with db.session(self.eng) as s:
                series_runs_store.take(s, sid, "in-process")
                series_store.add_event(s, sid, f"series:{sid}", "applied",
                                       "no Buildbot master configured: running it in the dispatcher")  # fmt: skip
            self._enqueue("run", sid)
            return
        Journey(self.eng, sid, bb).start()

    def _reconcile(self, sid: int) -> None:
        bb = self._buildbot()
        if bb is None:
            return
        state = Journey(self.eng, sid, bb).advance()
        if state in ("done", "failed"):
            self._report(sid, state)

    def _report(self, sid: int, state: str) -> None:
        # the series' own comparison first: the page links it, nobody needs an account
        key = lifecycle.publish_comparison(self.eng, sid)
        log.info("series %s: %s; comparison %s; %s", sid, state, key or "none",
                 lifecycle.queue_report(self.eng, sid))  # fmt: skip


BUILDBOT_STEP = "buildbot"  # the host_fault step of a series waiting on an unreachable master


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def clean_up() -> None:
    """What work killed midway left on this machine: the worktrees of an apply (``apply-*``,
    registered in the tree's git) and the working directories of boots, past their age."""
    from stackbench.jobs.driver.apply_stage import prune_apply_worktrees
    from stackbench.jobs.executors.boot_stage import prune_workdirs

    for what, prune in (("apply worktree", prune_apply_worktrees), ("boot directory", prune_workdirs)):  # fmt: skip
        try:
            for path in prune():
                log.info("dispatcher: removed the %s %s, left by work that was stopped", what, path)  # fmt: skip
        except (OSError, StackbenchError) as exc:  # the service starts all the same
            log.warning("dispatcher: could not remove old %ss: %s", what, _first_line(exc))


def configured_master() -> Any | None:
    """The Buildbot master series go to: $STACKBENCH_BUILDBOT_URL, else the embedded one
    when ``stackbench up`` made it; None when there is none (the in-process executor)."""
    from stackbench.jobs.executors.buildbot import client

    if config.get("STACKBENCH_BUILDBOT_URL"):
        return client.default_master()
    return client.embedded_master()


def hold_lock(eng: Engine, wait: Callable[[], bool]) -> Any:
    """Take the one-dispatcher-per-database lock on a connection kept open (the lock goes
    with it); waits while ``wait()`` says so. None when told to stop first."""
    conn = eng.connect()
    while True:
        if signals.try_lock(conn, LOCK_KEY):
            return conn
        if not wait():
            conn.close()
            return None
        time.sleep(2.0)
