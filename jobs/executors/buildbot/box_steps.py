"""Build steps of a bare-metal box: queue the job and kexec, give up after lost attempts, and
wait on the master for the box to report (it reboots twice meanwhile)."""

from __future__ import annotations

import json
import time
from typing import Any

from buildbot.plugins import steps
from buildbot.process import buildstep
from buildbot.process.results import CANCELLED, FAILURE, RETRY, SUCCESS
from twisted.internet import defer, task, threads

from stackbench.jobs.executors.buildbot.config import BuildbotConfig
from stackbench.jobs.executors.buildbot.steps import gave_up, worker_command


def queued_from_output(rc: int, stdout: str, stderr: str) -> dict[str, Any]:
    """SetPropertyFromCommand extractor for ``stackbench worker baremetal``: its last line."""
    if rc != 0:
        return {}
    lines = [line for line in stdout.splitlines() if line.strip()]
    return {"baremetal": json.loads(lines[-1])} if lines else {}


def queue_on_box(cfg: BuildbotConfig) -> Any:
    """Write the job into the box's spool and arm the kexec (ends before the box goes down)."""
    return steps.SetPropertyFromCommand(
        name="queue job and kexec",
        command=worker_command(cfg, "baremetal"),
        extract_fn=queued_from_output,
        haltOnFailure=True,
        timeout=600,
    )


class GiveUpAfterLostAttempts(buildstep.BuildStep):
    """Stop retrying a benchmark whose earlier attempts were all lost (a bare-metal box that
    never reported, e.g. because the kernel under test does not boot on it)."""

    name = "give up after lost attempts"

    def __init__(self, limit: int, **kwargs: Any) -> None:
        kwargs.setdefault("haltOnFailure", True)
        super().__init__(**kwargs)
        self.limit = limit

    def run(self) -> Any:
        lost = self.getProperty("lost_attempts") or []
        why = gave_up(lost, self.limit)
        self.descriptionDone = [why or f"{len(lost)} of {self.limit} attempt(s) lost"]
        return FAILURE if why else SUCCESS


class _Unsubscribed:
    def unsubscribe(self) -> None:
        pass


class AwaitReport(buildstep.BuildStep):
    """On the master: wait until stackbench holds every run the box was asked to report.

    The box reboots twice meanwhile (kexec into the test kernel, then back), so this step
    first detaches its build from the worker's connection: Buildbot would otherwise end the
    build as lost (RETRY) the moment the worker goes away, and retry a benchmark that is
    running fine. The build keeps the machine lock, so nothing else is started on the box
    until its results are in. Without a report by the timeout, or when the box comes back
    without one, the step ends in RETRY: the retry records this attempt as lost and tries
    again, up to the configured number of attempts.
    """

    name = "wait for the box to report"

    def __init__(self, cfg: BuildbotConfig, **kwargs: Any) -> None:
        kwargs.setdefault("haltOnFailure", True)
        super().__init__(**kwargs)
        self.cfg = cfg

    def _detach_from_worker(self) -> None:
        # relies on Build.subs, the worker-disconnect subscription made in Build.startBuild
        subs = getattr(self.build, "subs", None)
        if subs is not None and not isinstance(subs, _Unsubscribed):
            subs.unsubscribe()
            self.build.subs = _Unsubscribed()

    def _lookup(self, keys: list[str], commit: str) -> set[str]:
        from stackbench.jobs.executors.buildbot import reported

        return reported.stored_keys(keys, commit, self.cfg.stackbench_url or None)

    @defer.inlineCallbacks
    def _connected(self, workerid: int | None) -> Any:
        if workerid is None:
            return False
        w = yield self.master.data.get(("workers", workerid))
        return bool(w and w.get("connected_to"))

    @defer.inlineCallbacks
    def run(self) -> Any:
        queued = self.getProperty("baremetal") or {}
        if isinstance(queued, str):
            queued = json.loads(queued)
        keys, commit = list(queued.get("keys") or []), str(queued.get("commit") or "")
        if not keys or not commit:
            self.descriptionDone = ["nothing was queued"]
            return FAILURE
        if queued.get("already"):
            self.descriptionDone = ["already reported"]
            return SUCCESS
        wfb = self.build.workerforbuilder
        workerid = getattr(getattr(wfb, "worker", None), "workerid", None)
        self._detach_from_worker()
        try:
            timeout = float(self.getProperty("report_timeout") or self.cfg.report_timeout)
        except (TypeError, ValueError):
            self.descriptionDone = ["report_timeout must be a number of seconds"]
            return FAILURE
        log = yield self.addLog("report")
        yield log.addStdout(
            f"job {queued.get('job_id')}: waiting up to {timeout:.0f}s for {len(keys)} run(s) "
            f"of {commit[:12]} ({self.cfg.stackbench_url or 'database'})\n"
        )
        deadline = time.monotonic() + timeout
        went_away = False
        found: set[str] = set()
        while not self.stopped:
            try:
                found = yield threads.deferToThread(self._lookup, keys, commit)
            except Exception as exc:  # a server restart must not end a long wait
                yield log.addStderr(f"lookup failed, will retry: {exc}\n")
            if set(keys) <= found:
                self.descriptionDone = [f"{len(keys)} run(s) reported"]
                yield log.addStdout(f"all {len(keys)} run(s) reported\n")
                return SUCCESS
            connected = yield self._connected(workerid)
            if not connected and not went_away:
                went_away = True
                yield log.addStdout("worker disconnected (box rebooting into the test kernel)\n")
                self.description = ["waiting: box away"]
                self.updateSummary()
            elif connected and went_away:
                # the box reports before it reboots back: back without a report means no report
                found = yield threads.deferToThread(self._lookup, keys, commit)
                if set(keys) <= found:
                    continue
                msg = (
                    f"worker came back with {len(found)} of {len(keys)} run(s) reported; see "
                    f"done/{queued.get('job_id')}/status.json in the box's spool"
                )
                return (yield self._lost(log, msg))
            if time.monotonic() >= deadline:
                msg = f"no report within {timeout:.0f}s ({len(found)} of {len(keys)} run(s))"
                return (yield self._lost(log, msg))
            yield task.deferLater(self.master.reactor, self.cfg.report_poll, lambda: None)
        return CANCELLED

    @defer.inlineCallbacks
    def _lost(self, log: Any, msg: str) -> Any:
        yield log.addStderr(msg + "\n")
        self.descriptionDone = [msg[:80]]
        return RETRY
