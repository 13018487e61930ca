"""Buildbot workers from the configuration, and the rule that matches jobs to machines.

Each worker advertises its kind, CPUs and memory as worker properties; a build request may ask
for a kind (by its builder) and a minimum size (``min_cpus``, ``min_memory_mb`` properties), and
:func:`fits` keeps it off workers that are too small.
"""

from __future__ import annotations

from typing import Any

from buildbot.plugins import util, worker
from twisted.internet import defer
from twisted.python import log

from stackbench.jobs.executors.buildbot.config import BuildbotConfig

# one benchmark or kernel build at a time per machine: parallel work would skew the numbers
MACHINE_LOCK = util.WorkerLock("machine", maxCount=1)


class Worker(worker.Worker):
    """Buildbot's worker, healing a race of its attach (Buildbot 4.3). A worker process that
    dies while the master attaches it (a restarted master, a worker killed meanwhile) leaves
    the master holding that connection for good: it was lost before Twisted's login could
    ask to hear of its loss, so it is never detached. Every later attach of the worker is
    then refused ("already connected"), and the worker, whose login succeeded, waits for
    work that never comes until the master restarts. A new connection finding the old
    one's broker gone detaches the old one first, as its loss would have."""

    @defer.inlineCallbacks
    def attached(self, conn: Any) -> Any:
        old = self.conn
        if old is not None and old is not conn and connection_lost(old):
            log.msg(f"worker {self.name}: detaching a connection lost while it attached")
            sub = getattr(self, "_detached_sub", None)
            if sub is not None:
                sub.unsubscribe()
            getattr(old, "stopKeepaliveTimer", lambda: None)()
            yield self.detached()
        yield super().attached(conn)


def connection_lost(conn: Any) -> bool:
    """Whether a PB connection's broker is gone (its peer hung up or was reset)."""
    mind = getattr(conn, "mind", None)
    broker = getattr(mind, "broker", None)
    return mind is None or bool(getattr(broker, "disconnected", False))


def make(cfg: BuildbotConfig) -> list[Any]:
    """One :class:`Worker` per configured machine, its size in its properties."""
    out = []
    for w in cfg.workers:
        out.append(
            Worker(
                w.name,
                w.password,
                properties=w.properties(),
                # keepalives make a dead machine show up as lost instead of hanging a step
                keepalive_interval=60,
            )
        )
    return out


def machine_lock(cfg: BuildbotConfig) -> Any:
    """The per-worker lock for heavy builders, with each worker's slot count."""
    per_worker = {w.name: w.slots for w in cfg.workers}
    return util.WorkerLock("machine", maxCount=1, maxCountForWorker=per_worker)


def _prop(props: Any, name: str) -> Any:
    try:
        return props.getProperty(name)
    except Exception:
        return None


def fits(worker_props: Any, request_props: Any) -> bool:
    """True when the worker is at least as large as the request asks (missing means any)."""
    for need, have in (("min_cpus", "cpus"), ("min_memory_mb", "memory_mb")):
        wanted = _prop(request_props, need)
        if wanted in (None, ""):
            continue
        got = _prop(worker_props, have)
        if got is None or int(got) < int(wanted):
            return False
    wanted_kind = _prop(request_props, "machine_kind")
    return not wanted_kind or wanted_kind == _prop(worker_props, "machine_kind")


def can_start_build(builder: Any, workerforbuilder: Any, request: Any) -> bool:
    """Buildbot's ``canStartBuild`` hook: size and kind checks against worker properties,
    and no rounds on a worker the request says is quarantined (its A/A went bad)."""
    avoid = str(_prop(request.properties, "quarantined") or "").split(",")
    if workerforbuilder.worker.workername in avoid:
        return False
    return fits(workerforbuilder.worker.properties, request.properties)
