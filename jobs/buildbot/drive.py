"""Run an applied series through a Buildbot master and wait for the result: how ``stackbench
demo`` uses the embedded master and its local QEMU worker.

The master fans the series out (a kernel build per commit, a benchmark build per job) and
the worker stores the runs itself, so this module only submits, reports each build as it
finishes and sets the series' state from the builds' results.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine, text

from stackbench.errors import StackbenchError
from stackbench.jobs import pipeline
from stackbench.jobs.buildbot.client import Master, series_commits, submit

# buildbot.process.results: success and warnings count as passed, the rest as failed
PASSED = (0, 1)
HEARTBEAT_S = 60.0
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
    names: list[str] | None = None,
    say: Callable[[str], None] = print,
    timeout: float = 6 * 3600,
    poll: float = 2.0,
) -> str:
    """Submit series ``series_id`` (applied) for qemu workers; wait until the master has no
    unfinished build request; return the series' new state, ``done`` or ``failed``."""
    since = _last_build_id(master)
    first_run = _last_run_id(eng) + 1
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    pipeline.set_state(eng, series_id, "building", "handed to Buildbot")
    sub = submit(master, series=series_id, names=names, jobs=jobs, runs=runs, kinds=["qemu"])
    say(f"buildbot: series {series_id} submitted (buildset {sub['buildset']})")
    reported: set[int] = set()
    failed: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while True:
        builds = [b for b in master.get("builds")["builds"] if b["buildid"] > since]
        for b in builds:
            if b["complete"] and b["buildid"] not in reported:
                reported.add(b["buildid"])
                quiet_since = time.monotonic()
                outcome = RESULT_NAMES.get(b["results"], str(b["results"]))
                say(f"buildbot: {_label(master, builders, b)}: {outcome}")
                if b["results"] not in PASSED:
                    link = master.url + f"#/builders/{b['builderid']}/builds/{b['number']}"
                    name = builders.get(b["builderid"], str(b["builderid"]))
                    failed.append(f"{name} {_what(master, b)}: {outcome} (log: {link})")
        if time.monotonic() - quiet_since > HEARTBEAT_S:
            # a cold kernel build is minutes without a finished build: say what runs
            for b in builds:
                if not b["complete"]:
                    say(f"buildbot: {_label(master, builders, b)}: {b['state_string']}")
            quiet_since = time.monotonic()
        pending = master.get("buildrequests?complete=false")["buildrequests"]
        if not pending and builds and all(b["complete"] for b in builds):
            break
        if time.monotonic() > deadline:
            pipeline.set_state(eng, series_id, "failed", "Buildbot did not finish in time")
            raise StackbenchError(f"Buildbot did not finish series {series_id} in time")
        time.sleep(poll)
    failed += _bad_runs(eng, series_id, first_run)
    if failed:
        error = "; ".join(failed)
        what = f"{len(failed)} failed builds or runs"
        pipeline.set_state(eng, series_id, "failed", what, error=error)
        return "failed"
    pipeline.set_state(eng, series_id, "done", f"{len(reported)} Buildbot builds passed", error="")
    return "done"


def _label(master: Master, builders: dict[int, str], build: dict) -> str:
    """'<builder> #<number> <kernel> <job>', as the progress lines show a build."""
    name = builders.get(build["builderid"], str(build["builderid"]))
    return f"{name} #{build['number']} {_what(master, build)}"


def _what(master: Master, build: dict) -> str:
    """The kernel (and job) a build was about, from its properties."""
    props = master.get(f"builds/{build['buildid']}/properties")["properties"]
    p = {k: v[0] for k, v in (props[0] if props else {}).items()}
    kernel = p.get("kernel_name") or str(p.get("commit") or "")[:12]
    return " ".join(x for x in (kernel, p.get("job")) if x) or f"series {p.get('series', '')}"


def _last_run_id(eng: Engine) -> int:
    with eng.connect() as conn:
        return conn.execute(text("SELECT coalesce(max(id), 0) FROM run")).scalar_one()


def _bad_runs(eng: Engine, series_id: int, first_run: int) -> list[str]:
    """Runs of this series' kernels stored since the submission that did not finish well
    (a guest that panicked or hung): the builds succeed, the kernel does not."""
    commits = series_commits(series_id)
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT k.name, r.status, count(*) FROM run r "
                "JOIN kernel_build k ON k.id = r.build_id WHERE r.id >= :first "
                "AND k.commit = ANY(:commits) AND r.status <> 'done' GROUP BY k.name, r.status "
                "ORDER BY k.name"
            ),
            {"first": first_run, "commits": commits},
        ).all()
    return [f"{name}: {n} run(s) {status}" for name, status, n in rows]
