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
from stackbench.jobs import build_stage, lifecycle, rounds
from stackbench.jobs import plan as boot_plan
from stackbench.jobs.faults import first_error, host_fault
from stackbench.jobs.faults import first_line as _first_line
from stackbench.resultsdb import db, kernels_store, series_runs_store, series_store, signals

log = logging.getLogger(__name__)

LOCK_KEY = signals.DISPATCHER_LOCK
DISPATCH_RETRY_S = 5.0  # how long one Buildbot request of the dispatcher retries
PASSED = (0, 1)  # buildbot.process.results SUCCESS, WARNINGS
RETRY = 5
# between looks when nothing woke it: a submission, the end of local work and the master's
# reporter (every build's start and end, jobs.buildbot.reporter) NOTIFY it at once
POLL_S = 10.0
RECONNECT_MIN_S, RECONNECT_MAX_S = 0.5, 30.0  # backoff of a dispatcher that lost its database
HOST_RETRY_MIN_S, HOST_RETRY_MAX_S = 2.0, 300.0  # and of a series waiting on a host fault
RESULT_NAMES = {2: "failure", 3: "skipped", 4: "exception", 6: "cancelled"}
LOG_TAIL_LINES = 25


def _props(build: dict[str, Any]) -> dict[str, Any]:
    raw = build.get("properties") or {}
    return {k: v[0] for k, v in raw.items()}


class BuildbotExecutor:
    """Hands series to a Buildbot master and reads back how its builds went."""

    def __init__(self, master: Any) -> None:
        self.master = master
        self._builders: dict[int, str] = {}
        self._bs_sub: dict[int, str] = {}

    def builder(self, builderid: int) -> str:
        if builderid not in self._builders:
            self._builders = {
                b["builderid"]: b["name"] for b in self.master.get("builders")["builders"]
            }
        return self._builders.get(builderid, str(builderid))

    def last_build_id(self) -> int:
        builds = self.master.get("builds?order=-buildid&limit=1")["builds"]
        return int(builds[0]["buildid"]) if builds else 0

    def find_buildset(self, submission: str) -> int | None:
        """The buildset of an earlier submission with this key (a dispatcher that stopped
        between submitting and recording it)."""
        for bs in self.master.get("buildsets?order=-bsid&limit=50")["buildsets"]:
            # the fan-out's triggered buildsets carry the key too: only the submitted one
            if bs["parent_buildid"] is None and self._submission_of(int(bs["bsid"])) == submission:
                return int(bs["bsid"])
        return None

    def _submission_of(self, bsid: int) -> str:
        if bsid not in self._bs_sub:
            props = self.master.get(f"buildsets/{bsid}/properties")["properties"]
            value = (props[0] if props else {}).get("submission")
            self._bs_sub[bsid] = str(value[0]) if value else ""
        return self._bs_sub[bsid]

    def submit(self, series_id: int, submission: str, kernels: list[tuple[str, str]],
               jobs: list[str], runs: int) -> int:  # fmt: skip
        """Hand the series over; its benchmarks wait for the dispatcher's rounds."""
        from stackbench.jobs.buildbot.client import submit

        found = self.find_buildset(submission)
        if found is not None:
            return found
        sub = submit(
            self.master,
            series=series_id,
            commits=[c for c, _ in kernels],
            names=[n for _, n in kernels],
            jobs=jobs,
            runs=runs,
            kinds=["qemu"],
            submission=submission,
            title=f"series {series_id}",
            rounds_by="dispatcher",
        )
        return int(sub["buildset"])

    def submit_rounds(self, series_id: int, submission: str, key: str,
                      boots: list[dict[str, Any]], avoid: list[str] | None = None) -> int:  # fmt: skip
        from stackbench.jobs.buildbot.client import submit_rounds

        return submit_rounds(self.master, series=series_id, submission=submission,
                             rounds_key=key, boots=boots, avoid=avoid or [])  # fmt: skip

    def builds(self, submission: str, since: int) -> list[dict[str, Any]]:
        wanted = ("submission", "kernel_name", "commit", "job", "position", "tree",
                  "kernel_config", "round", "boots", "kernel")  # fmt: skip
        q = "&".join(f"property={p}" for p in wanted)
        builds = self.master.get(f"builds?buildid__gt={since}&{q}")["builds"]
        return [b for b in builds if _props(b).get("submission") == submission]

    def pending(self, submission: str) -> int:
        """Build requests of this submission not finished yet (queued or running)."""
        reqs = self.master.get("buildrequests?complete=false")["buildrequests"]
        return sum(1 for r in reqs if self._submission_of(int(r["buildsetid"])) == submission)

    def lost_workers(self, builds: list[dict[str, Any]]) -> list[str]:
        """A line for each worker that went away mid-build and is not back: Buildbot ends
        its build RETRY and runs it again when a worker returns, which the page must say."""
        out = []
        for b in builds:
            if b.get("results") != RETRY or not b.get("workerid"):
                continue
            workers = self.master.get(f"workers/{b['workerid']}")["workers"]
            if not workers or workers[0].get("connected_to"):
                continue
            p = _props(b)
            what = " ".join(str(x) for x in (p.get("kernel_name"), p.get("job")) if x)
            out.append(f"worker {workers[0]['name']} lost during {self.builder(b['builderid'])}"
                       f"{' ' + what if what else ''} (build {b['buildid']}): Buildbot runs it "
                       "again when a worker is back")  # fmt: skip
        return sorted(set(out))

    def failure(self, build: dict[str, Any]) -> str:
        """One line saying which build failed, where, why (the failing step's last error
        line) and the Buildbot log's address; the log tail follows on later lines."""
        p = _props(build)
        name = self.builder(build["builderid"])
        what = " ".join(x for x in (p.get("kernel_name") or str(p.get("commit", ""))[:12],
                                    p.get("job")) if x)  # fmt: skip
        outcome = RESULT_NAMES.get(build["results"], str(build["results"]))
        link = f"{self.master.url}#/builders/{build['builderid']}/builds/{build['number']}"
        step, tail = self._failed_step_tail(build["buildid"])
        why = first_error(tail)
        kind = "build failed" if name.startswith("build-") else f"{name} {outcome}"
        head = f"{what}: {kind}" + (f" in step '{step}'" if step else "")
        return (
            head + (f": {why}" if why else "") + f" (log: {link})" + (f"\n{tail}" if tail else "")
        )

    def _failed_step_tail(self, buildid: int) -> tuple[str, str]:
        try:
            steps = self.master.get(f"builds/{buildid}/steps")["steps"]
            bad = next((s for s in steps if s["results"] not in (None, *PASSED)), None)
            if bad is None:
                return "", ""
            logs = self.master.get(f"steps/{bad['stepid']}/logs")["logs"]
            stdio = next((lg for lg in logs if lg["name"] == "stdio"), logs[0] if logs else None)
            if stdio is None:
                return bad["name"], ""
            n = int(stdio.get("num_lines") or 0)
            first = max(0, n - LOG_TAIL_LINES)
            lines = self.master.get(
                f"logs/{stdio['logid']}/contents?offset={first}&limit={LOG_TAIL_LINES}"
            )["logchunks"]
            content = "".join(c["content"] for c in lines)
            # stdio lines carry a one-letter stream prefix: h(eader), o(ut), e(rr)
            tail = "\n".join(ln[1:] for ln in content.splitlines() if ln[:1] in ("o", "e"))
            return bad["name"], tail
        except StackbenchError as exc:
            return "", f"(log not available: {exc})"


class Dispatcher:
    def __init__(self, eng: Engine, master: Callable[[], Any | None] | None = None) -> None:
        self.eng = eng
        self._master_of = master or configured_master
        self._executor: BuildbotExecutor | None = None
        self._local: queue.Queue[tuple[str, int]] = queue.Queue()
        self._queued: set[int] = set()
        self._warned: set[int] = set()
        self._retry_at: dict[int, float] = {}  # series waiting on a host fault: next try
        self._backoff: dict[int, float] = {}
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._local_worker, daemon=True)

    # -- the loop

    def serve(self, poll: float = POLL_S) -> None:
        """Work until stopped, through database restarts: holding the one-dispatcher lock,
        and when the connection is lost, connecting again with backoff (0.5 s doubling to
        RECONNECT_MAX_S) and taking the lock again."""
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
                for _ in conn.notifies(timeout=poll, stop_after=1):
                    pass
        finally:
            with suppress(Exception):
                conn.close()

    def tick(self) -> None:
        for sid, state, meta, how in self._active():
            if state in ("new", "applying") and not how:
                self._enqueue("apply", sid)
            elif state == "applied" and not how and meta.get("push") and "fetched" not in meta:
                self._enqueue("fetch", sid)
            elif state == "applied" and not how:
                self._hand_over(sid, meta)
            elif how == "buildbot" and state in ("building", "running"):
                self._reconcile(sid, meta)
            elif how == "in-process" and state in ("applied", "building", "running"):
                self._enqueue("run", sid)  # a dispatcher stopped mid-run: run it again
        for sid in self._unreported():  # finished while no dispatcher was there to report
            self._report(sid, "finished")

    def _active(self) -> list[tuple[int, str, dict[str, Any], str]]:
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
            lifecycle.update_meta(self.eng, sid, host_fault=None)

    def _wait_on_host(self, sid: int, what: str, fault: str) -> None:
        """A fault of this machine (a read-only or full disk, a permission): the series is
        not to blame, so it keeps its state and is tried again, less often each time, until
        the host is fixed; its page says what it waits on."""
        delay = min(self._backoff.get(sid, HOST_RETRY_MIN_S / 2) * 2, HOST_RETRY_MAX_S)
        self._backoff[sid] = delay
        self._retry_at[sid] = time.monotonic() + delay
        log.warning("series %s: %s waits on a host fault (retry in %.0f s): %s",
                    sid, what, delay, fault)  # fmt: skip
        meta = lifecycle.update_meta(self.eng, sid)
        if (meta.get("host_fault") or {}).get("error") != fault:
            lifecycle.update_meta(self.eng, sid, host_fault={"error": fault, "step": what})
            lifecycle.event(self.eng, sid, f"series:{sid}", "waiting",
                            f"{what}: waiting on a host fault, retried until fixed: {fault}")  # fmt: skip

    def _apply(self, sid: int) -> None:
        from stackbench.jobs import pipeline

        pipeline.apply_only(self.eng, sid)  # records applied / apply-failed itself
        line = lifecycle.report_apply_failed(self.eng, sid)
        if line:
            log.info("series %s: apply-failed; %s", sid, line)

    def _fetch(self, sid: int) -> None:
        """Pushed commits live in the intake repository: copy them into the tree's
        repository, where this machine's builds (in-process or its local worker) look."""
        from stackbench.jobs import apply_stage
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
        lifecycle.update_meta(self.eng, sid, fetched=tree is not None)

    def _run_in_process(self, sid: int) -> None:
        from stackbench.jobs import pipeline

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
            self._executor = BuildbotExecutor(master)
        return self._executor

    def _hand_over(self, sid: int, meta: dict[str, Any]) -> None:
        bb = self._buildbot()
        if bb is None:
            with db.session(self.eng) as s:
                series_runs_store.take(s, sid, "in-process")
                series_store.add_event(s, sid, f"series:{sid}", "applied",
                                       "no Buildbot master configured: running it in the dispatcher")  # fmt: skip
            self._enqueue("run", sid)
            return
        from stackbench.jobs import pipeline

        kernels = series_kernels(self.eng, sid)
        jobs = list(meta.get("jobs") or pipeline.DEFAULT_JOBS)
        runs = int(meta.get("runs") or lifecycle.DEFAULT_RUNS)
        with db.session(self.eng) as s:
            number = series_runs_store.current(s, sid).number
        submission = f"stackbench-series-{sid}-{number}"
        try:
            since = bb.last_build_id()
            bsid = bb.submit(sid, submission, kernels, jobs, runs)
        except StackbenchError as exc:
            # the master is down or restarting: the series waits, said once on its page
            if sid not in self._warned:
                self._warned.add(sid)
                lifecycle.event(self.eng, sid, f"series:{sid}", "applied",
                                f"waiting for Buildbot: {exc}")  # fmt: skip
            return
        self._warned.discard(sid)
        dispatch = {
            "submission": submission, "buildset": bsid, "since_build": since,
            "first_run": _last_run_id(self.eng) + 1, "kernels": len(kernels),
            # one benchmark build per boot, every job in it (jobs.rounds)
            "benchmarks": len(kernels) * boot_plan.boots_for(runs),
            "buildbot": bb.master.url,
        }  # fmt: skip
        lifecycle.set_state(
            self.eng, sid, "building",
            f"handed to Buildbot (buildset {bsid}): {len(kernels)} kernels, "
            f"{len(jobs)} job(s) x {runs} run(s)",
            progress=f"0/{len(kernels)}",
            record=lambda s: series_runs_store.take(s, sid, "buildbot", **dispatch),
        )  # fmt: skip

    def _reconcile(self, sid: int, meta: dict[str, Any]) -> None:
        bb = self._buildbot()
        with db.session(self.eng) as s:
            d = series_runs_store.dispatch(s, sid)
        if bb is None or d is None:
            return
        try:
            builds = bb.builds(d.submission, d.since_build)
            pending = bb.pending(d.submission)
        except StackbenchError as exc:
            log.warning("series %s: Buildbot not reachable: %s", sid, exc)
            return
        names = {b["buildid"]: bb.builder(b["builderid"]) for b in builds}
        kernel_builds = [b for b in builds if names[b["buildid"]].startswith("build-")]
        build_stage.record_built(self.eng, sid, kernel_builds)  # on the page at once
        every = builds
        rounds.record(self.eng, bb, sid, every, names)
        builds = rounds.latest_attempts(builds, names)
        benches = [b for b in builds if names[b["buildid"]].startswith("bench-")]
        built = sum(1 for b in kernel_builds if b["complete"] and b["results"] != RETRY)
        measured = sum(
            rounds.boots_of(b) for b in benches if b["complete"] and b["results"] != RETRY
        )
        n, m = d.kernels, d.benchmarks
        finished = bool(builds) and not pending and all(b["complete"] for b in builds)
        if built >= n:
            if not d.batches and rounds.start(self.eng, bb, sid, meta, builds):
                return
            failing = any(b["results"] not in (*PASSED, RETRY) for b in builds if b["complete"])
            if finished and not failing and rounds.go_on(self.eng, bb, sid, meta, builds):
                return
        if not finished:
            try:
                lost = {"lost_workers": bb.lost_workers(every)}
            except StackbenchError:
                lost = None  # said on the next tick
            if built < n:
                lifecycle.set_state(self.eng, sid, "building", f"{built} of {n} kernels built",
                                    progress=f"{built}/{n}", meta=lost)  # fmt: skip
            else:
                lifecycle.set_state(self.eng, sid, "running",
                                    f"{measured} of {m} benchmarks measured",
                                    progress=f"{measured}/{m}", meta=lost)  # fmt: skip
            return
        # a rounds build fails (or is cut short) with its boots: they say why, not it
        failed = [b for b in builds if b["results"] not in (*PASSED, RETRY)
                  and names[b["buildid"]] != "rounds"]  # fmt: skip
        reasons = [bb.failure(b) for b in failed]
        reasons += stored_failures(self.eng, sid, d.first_run)
        if d.batches and not reasons and measured < m:
            # never a silent gap: a rounds build that ended without running all its boots
            reasons.append(f"{m - measured} of {m} planned boots did not run: submit the "
                           "series again to measure them")  # fmt: skip
        if reasons:
            self._record_failed_builds(sid, failed, reasons)
            firsts = list(dict.fromkeys(r.splitlines()[0] for r in reasons))
            lifecycle.set_state(
                self.eng, sid, "failed", f"{len(firsts)} failure(s): " + "; ".join(firsts),
                error="; ".join(firsts),
            )  # fmt: skip
            for r in reasons:
                lifecycle.event(self.eng, sid, f"series:{sid}", "failed", r)
            self._report(sid, "failed")
            return
        lifecycle.set_state(self.eng, sid, "done",
                            f"{built} kernels built, {measured} benchmarks measured", error="")  # fmt: skip
        self._report(sid, "done")

    def _report(self, sid: int, state: str) -> None:
        # the series' own comparison first: the page links it, nobody needs an account
        key = lifecycle.publish_comparison(self.eng, sid)
        log.info("series %s: %s; comparison %s; %s", sid, state, key or "none",
                 lifecycle.queue_report(self.eng, sid))  # fmt: skip

    def _record_failed_builds(self, sid: int, failed: list[dict], reasons: list[str]) -> None:
        """A kernel whose build failed at Buildbot gets its ``build-failed`` row (with the log
        tail) when the worker did not write one, so the series page's matrix says why."""
        with db.session(self.eng) as s:
            for b, reason in zip(failed, reasons, strict=False):
                p = _props(b)
                commit = str(p.get("commit") or "")
                if not commit or p.get("job") or kernels_store.has_build(s, commit):
                    continue
                row = kernels_store.save_build(
                    s, commit, "", "", series_id=sid, name=str(p.get("kernel_name") or commit[:12])
                )
                kernels_store.update_build(
                    row, status="build-failed", log=reason, meta={"buildbot_build": b["buildid"]}
                )


def series_kernels(eng: Engine, sid: int) -> list[tuple[str, str]]:
    """(commit, kernel name) of the base and every applied commit, as the pipeline names
    them (``v6.1-debian``, ``1/3-abcdef12``)."""
    from stackbench.jobs.pipeline import kernel_name

    with db.session(eng) as s:
        series = series_store.get(s, sid)
        if series is None or not series.base_commit:
            raise StackbenchError(f"series {sid} is not applied: no base commit")
        base = series.base_ref or series.base_commit
        out = [(series.base_commit, base if base != series.base_commit else base[:12])]
        for k in kernels_store.stack(series)[1:]:
            p = k.patch
            if not k.commit:
                raise StackbenchError(f"series {sid}: patch {p.idx} has no commit")
            out.append((k.commit, kernel_name(p.idx, p.total, k.commit)))
        return out


def attach_builds(eng: Engine, sid: int) -> None:
    """Tie the kernels the workers stored to the series' patches, so its page's matrix
    shows them (an upload knows the commit, not the patch row)."""
    with db.session(eng) as s:
        kernels_store.attach_to_series(s, sid)


def stored_failures(eng: Engine, sid: int, first_run: int) -> list[str]:
    """What the workers stored that failed: kernels recorded ``build-failed`` and runs since
    the hand-over that did not finish (a kernel that panicked or hung)."""
    commits = [c for c, _ in series_kernels(eng, sid)]
    with db.session(eng) as s:
        builds = kernels_store.failed_builds(s, commits)
        runs = kernels_store.unfinished_runs(s, commits, first_run)
    out = []
    for name, commit, blog in builds:
        tail = "\n".join((blog or "").splitlines()[-LOG_TAIL_LINES:])
        first = first_error(tail)
        out.append(f"{name or commit[:12]}: build failed" + (f": {first}" if first else "")
                   + (f"\n{tail}" if tail else ""))  # fmt: skip
    for name, status, n, error in runs:
        why = (error or "").splitlines()[0] if error else ""
        out.append(f"{name}: {n} run(s) {status}" + (f" ({why})" if why else ""))
    return out


def _last_run_id(eng: Engine) -> int:
    with db.session(eng) as s:
        return kernels_store.last_run_id(s)


def configured_master() -> Any | None:
    """The Buildbot master series go to: $STACKBENCH_BUILDBOT_URL, else the embedded one
    when ``stackbench up`` made it; None when there is none (the in-process executor)."""
    from stackbench.jobs.buildbot import client

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
