"""Run an applied series through a Buildbot master and wait for the result: how ``stackbench
demo --buildbot`` uses the embedded master and its local QEMU worker.

The master fans the series out (a kernel build per commit, a benchmark build per job) and
the worker stores the runs itself, so this module only submits, reports each build as it
finishes and sets the series' state from the builds' results.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.jobs import pipeline
from stackbench.jobs.buildbot.client import Master, submit

# buildbot.process.results: success and warnings count as passed, the rest as failed
PASSED = (0, 1)
RESULT_NAMES = {
    0: "success",
    1: "warnings",
    2: "failure",
    3: "skipped",
    4: "exception",
    5: "retry",
    6: "cancelled",
}


def wait_for_worker(master: Master, name: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = master.get("workers")["workers"]
        if any(w["name"] == name and w["connected_to"] for w in workers):
            return
        time.sleep(0.5)
    raise StackbenchError(f"Buildbot worker {name} did not connect within {timeout:.0f} s")


def _last_build_id(master: Master) -> int:
    builds = master.get("builds?order=-buildid&limit=1")["builds"]
    return builds[0]["buildid"] if builds else 0


def run_series(
    eng: Engine,
    master: Master,
    series_id: int,
    *,
    jobs: list[str],
    runs: int,
    say: Callable[[str], None] = print,
    timeout: float = 6 * 3600,
    poll: float = 2.0,
) -> str:
    """Submit series ``series_id`` (applied) for qemu workers; wait until the master has no
    unfinished build request; return the series' new state, ``done`` or ``failed``."""
    since = _last_build_id(master)
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    pipeline.set_state(eng, series_id, "building", "handed to Buildbot")
    sub = submit(master, series=series_id, jobs=jobs, runs=runs, kinds=["qemu"])
    say(f"buildbot: series {series_id} submitted (buildset {sub['buildset']})")
    reported: set[int] = set()
    failed: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        builds = [b for b in master.get("builds")["builds"] if b["buildid"] > since]
        for b in builds:
            if b["complete"] and b["buildid"] not in reported:
                reported.add(b["buildid"])
                name = builders.get(b["builderid"], str(b["builderid"]))
                outcome = RESULT_NAMES.get(b["results"], str(b["results"]))
                say(f"buildbot: {name} #{b['number']}: {outcome} ({b['state_string']})")
                if b["results"] not in PASSED:
                    failed.append(f"{name} #{b['number']}: {b['state_string']}")
        pending = master.get("buildrequests?complete=false")["buildrequests"]
        if not pending and builds and all(b["complete"] for b in builds):
            break
        if time.monotonic() > deadline:
            pipeline.set_state(eng, series_id, "failed", "Buildbot did not finish in time")
            raise StackbenchError(f"Buildbot did not finish series {series_id} in time")
        time.sleep(poll)
    if failed:
        error = "; ".join(failed)
        pipeline.set_state(eng, series_id, "failed", f"{len(failed)} builds failed", error=error)
        return "failed"
    pipeline.set_state(eng, series_id, "done", f"{len(reported)} Buildbot builds passed", error="")
    return "done"
