"""The Buildbot master as an executor of :class:`stackbench.jobs.driver.journey.Journey`.

The driver hands the master a series (``rounds_by=dispatcher``: its kernel builds store
their artifacts and trigger no benchmark), then, once every kernel is built, batches of
rounds: the master hands each round to a worker of the kind as one benchmark build, every
round at once (``steps.BootRounds``), so the rounds spread over every idle worker and a round
runs whole on one, its boots in the round's order. A worker's offset then falls on every
kernel of its round alike. Bare-metal boxes are workers of their own kind (``jobs/executors/box.py``).

This module reads back, from the master's REST API, what the driver asks of an executor:
which kernels are built, how many boots of the plan ended, what is still queued or running,
which worker was lost mid-round (``series_round``'s tries), and why something failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from stackbench import config
from stackbench.errors import StackbenchError
from stackbench.httpclient import Transient
from stackbench.jobs.driver import buildbot_evidence, lifecycle
from stackbench.jobs.driver.journey import Batch, Journey, Kernel, Progress
from stackbench.jobs.executors import build_stage
from stackbench.jobs.executors import plan as boot_plan
from stackbench.jobs.executors.faults import first_error
from stackbench.jobs.executors.jobspecs import split_job_specs
from stackbench.resultsdb import db, kernels_store, quarantine, series_runs_store, series_store

log = logging.getLogger(__name__)

KIND = "qemu"
PASSED = (0, 1)  # buildbot.process.results SUCCESS, WARNINGS
RETRY, CANCELLED = 5, 6
# what Buildbot 4.3 says of a build a clean stop of its master, or of its parent, cancelled
CUT_SHORT = ("(Master Shutdown)", "(parent build was interrupted)")
RESULT_NAMES = {2: "failure", 3: "skipped", 4: "exception", 6: "cancelled"}
LOG_TAIL_LINES = 25
# what a build says while Buildbot prepares its worker: a build still saying it long after
# its request was claimed will not start (Buildbot 4.3, see stuck_requests)
PREPARING = ("created", "starting", "preparing worker", "pinging worker")


def _props(build: dict[str, Any]) -> dict[str, Any]:
    raw = build.get("properties") or {}
    return {k: v[0] for k, v in raw.items()}


class BuildbotExecutor:
    """A Buildbot master as the driver's executor: it is handed a series (its kernel builds),
    then batches of rounds, and says from the master's builds how far they got."""

    name = "buildbot"

    def __init__(self, master: Any, unreachable: Callable[[str], None] | None = None) -> None:
        self.master = master
        # told when the master could not be reached (the dispatcher stops asking it for a while)
        self._unreachable = unreachable or (lambda why: None)
        self._builders: dict[int, str] = {}
        self._workers: dict[int, str] = {}
        self._warned: set[int] = set()
        # per series, what the last look saw: the builds (latest attempts), their builders'
        # names and the boots measured
        self._seen: dict[int, tuple[list[dict[str, Any]], dict[int, str], int]] = {}
        self._evidence_stored: set[int] = set()  # evidence rounds whose counts are kept

    # -- the driver's interface (stackbench.jobs.driver.journey.Executor)

    def hand_over(self, journey: Journey) -> dict[str, Any] | None:
        eng, sid = journey.eng, journey.sid
        kernels = kernel_names(eng, sid)
        with db.session(eng) as s:
            number = series_runs_store.current(s, sid).number
        submission = f"stackbench-series-{sid}-{number}"
        try:
            since = self.last_build_id()
            bsid = self.submit(sid, submission, kernels, journey.jobs, journey.runs)
        except StackbenchError as exc:
            # the master is down or restarting: the series waits, said once on its page
            if isinstance(exc, Transient):
                self._unreachable(str(exc))
            if sid not in self._warned:
                self._warned.add(sid)
                lifecycle.event(eng, sid, f"series:{sid}", "applied",
                                f"waiting for Buildbot: {exc}")  # fmt: skip
            return None
        self._warned.discard(sid)
        return {
            "submission": submission, "buildset": bsid, "since_build": since,
            "first_run": _last_run_id(eng) + 1, "kernels": len(kernels),
            # one benchmark build per boot, every job in it
            "benchmarks": len(kernels) * boot_plan.boots_for(journey.runs, journey.boots),
            "buildbot": self.master.url, "progress": f"0/{len(kernels)}",
            "message": f"handed to Buildbot (buildset {bsid}): {len(kernels)} kernels, "
                       f"{len(journey.jobs)} job(s) x {journey.runs} run(s)",
        }  # fmt: skip

    def runs(self, journey: Journey) -> int:
        return journey.runs

    def build(self, journey: Journey) -> None:
        """Nothing to do: the master builds the kernels of the buildset it was handed."""

    def progress(self, journey: Journey) -> Progress | None:
        eng, sid = journey.eng, journey.sid
        with db.session(eng) as s:
            d = series_runs_store.dispatch(s, sid)
        if d is None:
            return None
        try:
            every = self.builds(d.submission, d.since_build)
            requests = self.open_requests(d.submission)
        except StackbenchError as exc:
            log.warning("series %s: Buildbot not reachable: %s", sid, exc)
            if isinstance(exc, Transient):
                self._unreachable(str(exc))
            return None
        pending = [self.builder(r["builderid"]) for r in requests]
        names = {b["buildid"]: self.builder(b["builderid"]) for b in every}
        kernel_builds = [b for b in every if names[b["buildid"]].startswith("build-")]
        build_stage.record_built(eng, sid, kernel_builds)  # on the page at once
        # an evidence round Buildbot runs again has not ended: its counts come with the next
        buildbot_evidence.store_counts(eng, sid, [b for b in every if not runs_again(b)],
                                       self._evidence_stored)  # fmt: skip
        record_rounds(eng, self, sid, every, names)
        builds = latest_attempts(every, names)
        benches = [b for b in builds if names[b["buildid"]].startswith("bench-")
                   and not buildbot_evidence.is_evidence(b)]  # fmt: skip
        ended = sum(1 for b in kernel_builds if b["complete"] and not runs_again(b))
        measured = sum(boots_of(b) for b in benches if b["complete"] and not runs_again(b))
        finished = bool(builds) and not pending and all(b["complete"] for b in builds)
        # a batch's rounds build ends a moment after its last round (Buildbot's trigger
        # wait): once every planned boot is measured, its end says nothing new, unless it
        # runs again a round that measures nothing (an evidence round a clean stop cut)
        others = [b for b in builds if names[b["buildid"]] != "rounds"]
        finished = finished or (0 < d.benchmarks <= measured and set(pending) <= {"rounds"}
                                and all(b["complete"] and not runs_again(b) for b in others))  # fmt: skip
        lost = None
        if not finished:
            with suppress(StackbenchError):  # said on the next look
                lost = self.lost_workers(every)
        self._seen[sid] = (builds, names, measured)
        built = built_kernels(builds, self.builder)
        return Progress(
            kernels=d.kernels,
            built=[Kernel(c, c) for c, _ in kernel_names(eng, sid) if c in built],
            builds_ended=ended,
            boots_ended=measured,
            busy=not finished,
            failing=any(
                b["results"] not in PASSED and not runs_again(b)
                for b in builds
                if b["complete"] and not buildbot_evidence.is_evidence(b)
            ),  # fmt: skip
            lost=lost,
            stuck=stuck_requests(requests, every, time.time(),
                                 config.get_int("STACKBENCH_STUCK_REQUEST_S")) or None,
        )  # fmt: skip

    def boot(self, journey: Journey, batch: Batch, handed: Callable[..., None]) -> bool:
        eng, sid = journey.eng, journey.sid
        with db.session(eng) as s:
            d = series_runs_store.dispatch(s, sid)
            avoid = quarantine.avoided(s)
        jobs = journey.jobs
        if batch.more is not None:  # the jobs whose sub-jobs are in doubt
            of = subjob_jobs(eng, sid)
            jobs = [j for j in jobs if any(of.get(sj) == j for sj in batch.more.subjobs)]
        builds, _names, _measured = self._seen.get(sid, ([], {}, 0))
        built = built_kernels(builds, self.builder)
        boots = plan_boots(batch.plan, built, jobs, dict(d.offsets))
        if not boots:
            return False
        # once, after the first rounds: the counts do not depend on how many rounds follow
        evidence = [] if batch.more is not None else buildbot_evidence.evidence_round(
            eng, sid, [built[c] for c in dict.fromkeys(b["commit"] for b in boots)], jobs, KIND
        )  # fmt: skip
        bsid = self.submit_rounds(sid, d.submission, batch.key, boots + evidence, avoid)
        handed(buildset=bsid, offsets=next_offsets(dict(d.offsets), boots))
        return True

    def abandon(self, journey: Journey) -> None:
        """Cancel what the master still holds of the series' attempt: each open build
        request (Buildbot's ``cancel``, which stops the request's builds too) and each build
        under way (a rounds build waiting for a request that will never run). A request
        Buildbot holds claimed with no live build stays so until the master restarts; the
        attempt that follows has a submission key of its own, so nothing of it is counted."""
        with db.session(journey.eng) as s:
            d = series_runs_store.dispatch(s, journey.sid)
        if d is None or not d.submission:
            return
        why = {"reason": f"stackbench: series {journey.sid} handed over again"}
        for r in self.open_requests(d.submission):
            with suppress(StackbenchError):  # one refused does not keep the others
                self.master.control(f"buildrequests/{r['buildrequestid']}", "cancel", why)
        for b in self.builds(d.submission, d.since_build):
            if not b["complete"]:
                with suppress(StackbenchError):
                    self.master.control(f"builds/{b['buildid']}", "stop", why)

    def failures(self, journey: Journey) -> list[str]:
        eng, sid = journey.eng, journey.sid
        with db.session(eng) as s:
            d = series_runs_store.dispatch(s, sid)
        builds, names, measured = self._seen.get(sid, ([], {}, 0))
        # a rounds build fails (or is cut short) with its boots: they say why, not it
        failed = [b for b in builds if b["results"] not in PASSED and not runs_again(b)
                  and names[b["buildid"]] != "rounds" and not buildbot_evidence.is_evidence(b)]  # fmt: skip
        reasons = [self.failure(b) for b in failed]
        reasons += stored_failures(eng, sid, d.first_run if d is not None else 0)
        if d is not None and d.batches and not reasons and measured < d.benchmarks:
            # never a silent gap: a rounds build that ended without running all its boots
            reasons.append(f"{d.benchmarks - measured} of {d.benchmarks} planned boots did "
                           "not run: submit the series again to measure them")  # fmt: skip
        if reasons:
            record_failed_builds(eng, sid, failed, reasons)
        return reasons

    # -- the master's REST API

    def ping(self) -> None:
        """One small request: raises when the master does not answer."""
        self.master.get("masters")

    def submissions_of_builds(self, buildids: list[int]) -> dict[int, str]:
        """The submission key of each build the reporter named (its series'), "" if none;
        a wave of builds in one request (50 ids at most: the URL's length), not one each."""
        out = dict.fromkeys(buildids, "")
        for i in range(0, len(buildids), 50):
            ids = "&".join(f"buildid={b}" for b in buildids[i : i + 50])
            for b in self.master.get(f"builds?{ids}&property=submission")["builds"]:
                out[int(b["buildid"])] = str(_props(b).get("submission") or "")
        return out

    def builder(self, builderid: int) -> str:
        if builderid not in self._builders:
            self._builders = {
                b["builderid"]: b["name"] for b in self.master.get("builders")["builders"]
            }
        return self._builders.get(builderid, str(builderid))

    def worker(self, workerid: int) -> str:
        """A worker's name: one request for all of them when one is new (a look at every
        build's end asked for each worker of the series' rounds, at the moment the master
        was busiest, starting the next rounds)."""
        if workerid not in self._workers:
            self._workers = {
                w["workerid"]: w["name"] for w in self.master.get("workers")["workers"]
            }
        return self._workers.get(workerid, "")

    def last_build_id(self) -> int:
        builds = self.master.get("builds?order=-buildid&limit=1")["builds"]
        return int(builds[0]["buildid"]) if builds else 0

    def find_buildset(self, submission: str) -> int | None:
        """The buildset of an earlier submission with this key (a dispatcher that stopped
        between submitting and recording it)."""
        for bs in self.master.get("buildsets?order=-bsid&limit=50")["buildsets"]:
            if bs["parent_buildid"] is not None:  # the fan-out's triggered ones carry it too
                continue
            props = self.master.get(f"buildsets/{bs['bsid']}/properties")["properties"]
            if (props[0] if props else {}).get("submission", [None])[0] == submission:
                return int(bs["bsid"])
        return None

    def submit(self, series_id: int, submission: str, kernels: list[tuple[str, str]],
               jobs: list[str], runs: int) -> int:  # fmt: skip
        """Hand the series over; its benchmarks wait for the dispatcher's rounds."""
        from stackbench.jobs.executors.buildbot.client import submit

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
        from stackbench.jobs.executors.buildbot.client import submit_rounds

        return submit_rounds(self.master, series=series_id, submission=submission,
                             rounds_key=key, boots=boots, avoid=avoid or [])  # fmt: skip

    def builds(self, submission: str, since: int) -> list[dict[str, Any]]:
        wanted = ("submission", "kernel_name", "commit", "job", "position", "tree",
                  "kernel_config", "round", "boots", "kernel", "coverage")  # fmt: skip
        q = "&".join(f"property={p}" for p in wanted)
        builds = self.master.get(f"builds?buildid__gt={since}&{q}")["builds"]
        return [b for b in builds if _props(b).get("submission") == submission]

    def open_requests(self, submission: str) -> list[dict[str, Any]]:
        """This submission's build requests not finished yet (queued, claimed or running),
        their buildsets' submissions read in the same request."""
        reqs = self.master.get("buildrequests?complete=false&property=submission")
        return [r for r in reqs["buildrequests"] if _props(r).get("submission") == submission]

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


def runs_again(build: dict[str, Any]) -> bool:
    """Whether Buildbot runs an ended build again, so it ends none of the work: RETRY (a lost
    worker, a killed master's housekeeping) or a round cancelled with its rounds build, which
    ends RETRY and boots it again (steps.BootRounds): a master stopping cleanly (the health
    check's restart) cancels the rounds it waits for, saying one of CUT_SHORT. A round
    cancelled for good (its series abandoned) is a planned boot that did not run (failures)."""
    results, state = build.get("results"), str(build.get("state_string") or "")
    return results == RETRY or (results == CANCELLED and any(w in state for w in CUT_SHORT))


def stuck_requests(
    requests: list[dict[str, Any]], builds: list[dict[str, Any]], now: float, limit_s: float
) -> list[str]:
    """A line for each build request claimed more than ``limit_s`` ago that has no build
    under way: none at all, or one still preparing its worker that long after it started.
    Buildbot 4.3 leaves both when a worker dies as a build starts on it (its
    ``buildPreparationFailure`` fails on the worker it no longer has: "putInQuarantine"
    in twistd.log): the request stays claimed, nothing runs it again, and the master
    answers as usual."""
    live: dict[int, dict[str, Any]] = {}
    for b in builds:
        if not b["complete"]:
            brid = int(b.get("buildrequestid") or 0)
            if brid not in live or b["buildid"] > live[brid]["buildid"]:
                live[brid] = b
    out = []
    for r in requests:
        claimed_at = r.get("claimed_at")
        if not r.get("claimed") or claimed_at is None or now - float(claimed_at) < limit_s:
            continue
        brid = int(r["buildrequestid"])
        b = live.get(brid)
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(claimed_at)))
        if b is None:
            out.append(f"build request {brid} claimed without a build since {since}")
        elif b.get("state_string") in PREPARING and now - float(b["started_at"]) >= limit_s:
            out.append(f"build request {brid} claimed without a build under way since {since} "
                       f"(build {b['buildid']} still {b['state_string']!r})")  # fmt: skip
    return out


@dataclass(frozen=True)
class Built:
    """A kernel the master built for the series, where its artifact is kept."""

    commit: str
    name: str
    position: int
    tree: str
    kernel_config: str
    artifact: str


def built_kernels(builds: list[dict[str, Any]], builder_of: Any) -> dict[str, Built]:
    """The series' kernel builds that passed, by commit (the latest attempt of each)."""
    from stackbench.jobs.executors.buildbot.steps import artifact_path

    out: dict[str, Built] = {}
    for b in sorted(builds, key=lambda b: b["buildid"]):
        name = builder_of(b["builderid"])
        if not name.startswith("build-") or not b["complete"] or b["results"] not in (0, 1):
            continue
        p = {k: v[0] for k, v in (b.get("properties") or {}).items()}
        commit = str(p.get("commit") or "")
        if not commit:
            continue
        out[commit] = Built(
            commit=commit,
            name=str(p.get("kernel_name") or commit[:12]),
            position=int(p.get("position") or 0),
            tree=str(p.get("tree") or ""),
            kernel_config=str(p.get("kernel_config") or ""),
            artifact=artifact_path(name, int(b["number"])),
        )
    return out


def latest_attempts(builds: list[dict[str, Any]], names: dict[int, str]) -> list[dict[str, Any]]:
    """The builds without the boots a later build measured again: a master stopped mid-boot
    cancels the boot its rounds build was waiting for, and the rounds build, run again,
    boots it anew; only that later attempt says how the boot went."""
    last: dict[tuple[str, ...], int] = {}
    for b in builds:
        if names[b["buildid"]] == "bench-qemu" and "round" in (b.get("properties") or {}):
            p = {k: v[0] for k, v in b["properties"].items()}
            key = (str(p.get("commit")), str(p.get("job")), str(p.get("round")))
            last[key] = max(last.get(key, 0), int(b["buildid"]))
    keep = set(last.values())
    return [
        b
        for b in builds
        if names[b["buildid"]] != "bench-qemu"
        or "round" not in (b.get("properties") or {})
        or b["buildid"] in keep
    ]


def boots_of(build: dict[str, Any]) -> int:
    """How many boots of the plan a benchmark build ran: a round's, else one."""
    return int(((build.get("properties") or {}).get("boots") or [1])[0] or 1)


def plan_boots(
    plan: boot_plan.Plan, built: dict[str, Built], jobs: list[str], offset: dict[str, int]
) -> list[dict[str, Any]]:
    if not jobs:
        return []
    # one boot runs every job, as a boot of the in-process executor does: a benchmark build
    # per (kernel, round, job) booted the guest once per job, 3x the boots of the demo stack
    # for the same runs. Iterations continue after the furthest job's, so no key repeats.
    first = max(offset.get(job, 0) for job in jobs)
    out = []
    for boot in plan.boots_in_order():
        k = built[boot.kernel]
        out.append(
            {
                "commit": k.commit,
                "kernel_name": k.name,
                "position": k.position,
                "tree": k.tree,
                "kernel_config": k.kernel_config,
                "artifact": k.artifact,
                "job": ",".join(jobs),
                "machine_kind": KIND,
                "runs": boot.runs,
                "round": boot.round,
                "first": first + boot.first,
            }
        )
    return out


def subjob_jobs(eng: Engine, series_id: int) -> dict[str, str]:
    """Which job spec each sub-job of the series' Buildbot boots came from (the worker
    records the spec it ran in every run's meta)."""
    with db.session(eng) as s:
        return series_store.subjob_job_specs(s, series_id)


def next_offsets(offset: dict[str, int], boots: list[dict[str, Any]]) -> dict[str, int]:
    """Iteration numbers taken so far per job, after ``boots``: a later batch starts there."""
    out = dict(offset)
    for b in boots:
        for job in split_job_specs(str(b["job"])):
            out[job] = max(out.get(job, 0), int(b["first"]) + int(b["runs"]))
    return out


def record_rounds(
    eng: Engine, bb: Any, sid: int, builds: list[dict], names: dict[int, str]
) -> None:
    """Each round's try as the master ran it: on which worker, and how it went (a round
    whose worker was lost ends RETRY, and its run again is the next try)."""
    tries = [b for b in builds if names[b["buildid"]].startswith("bench-")
             and "round" in (b.get("properties") or {})
             and not buildbot_evidence.is_evidence(b)]  # fmt: skip
    if not tries:
        return
    with db.session(eng) as s:
        attempt = series_runs_store.current(s, sid)
        for b in sorted(tries, key=lambda b: b["buildid"]):
            if not b["complete"]:
                state = "running"
            elif runs_again(b):
                state = "lost"
            else:
                state = "done" if b["results"] in PASSED else "failed"
            rnd = int(b["properties"]["round"][0])
            worker = bb.worker(b["workerid"]) if b.get("workerid") else ""
            series_runs_store.record_round(s, attempt, rnd, int(b["buildid"]), worker, state)


def kernel_names(eng: Engine, sid: int) -> list[tuple[str, str]]:
    """(commit, kernel name) of the base and every applied commit, as the pipeline names
    them (``v6.1-debian``, ``1/3-abcdef12``)."""
    with db.session(eng) as s:
        series = series_store.get(s, sid)
        if series is None or not series.base_commit:
            raise StackbenchError(f"series {sid} is not applied: no base commit")
        out = kernels_store.stack_names(series)
        for commit, name in out[1:]:
            if not commit:
                raise StackbenchError(f"series {sid}: patch {name} has no commit")
        return out


def stored_failures(eng: Engine, sid: int, first_run: int) -> list[str]:
    """What the workers stored that failed: kernels recorded ``build-failed`` and runs since
    the hand-over that did not finish (a kernel that panicked or hung)."""
    commits = [c for c, _ in kernel_names(eng, sid)]
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


def record_failed_builds(eng: Engine, sid: int, failed: list[dict], reasons: list[str]) -> None:
    """A kernel whose build failed at Buildbot gets its ``build-failed`` row (with the log
    tail) when the worker did not write one, so the series page's matrix says why."""
    with db.session(eng) as s:
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
