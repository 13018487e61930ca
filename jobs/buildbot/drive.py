"""Run an applied series through a Buildbot master and watch it: how ``stackbench demo`` uses
the embedded master and its local QEMU worker.

The master fans the series out (a kernel build per commit, a benchmark build per job) and
the worker stores the runs itself, so this module only hands the series over once, reports
each build as it finishes and sets the series' state from the builds' results.

It is resumable. The submission's key is written to ``series.meta["buildbot"]`` before the
master is asked, so a client that is interrupted (Ctrl-C, a killed process, a lost connection)
and run again finds the same submission on the master and attaches to it: a series is never
handed over twice for one plan. Transient errors of the master's API are retried by
:mod:`stackbench.jobs.buildbot.client`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
from stackbench.jobs import pipeline
from stackbench.jobs.buildbot.client import Master, find_submission, series_commits, submit
from stackbench.resultsdb.models import Series

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
# build properties a progress line names
_PROPS = ("submission", "kernel_name", "commit", "job", "series")


def wait_for_worker(master: Master, name: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = master.get("workers")["workers"]
        if any(w["name"] == name and w["connected_to"] for w in workers):
            return
        time.sleep(0.5)
    raise StackbenchError(
        f"Buildbot worker {name} did not connect within {timeout:.0f} s: "
        "see its twistd.log under $STACKBENCH_HOME/buildbot, or run 'stackbench down' and "
        "'stackbench up'"
    )


def _last_build_id(master: Master) -> int:
    builds = master.get("builds?order=-buildid&limit=1")["builds"]
    return builds[0]["buildid"] if builds else 0


def handed_over(eng: Engine, series_id: int) -> dict[str, Any]:
    """What ``series.meta["buildbot"]`` says about the series' submission (may be empty)."""
    with Session(eng) as s:
        series = s.get(Series, series_id)
        if series is None:
            raise StackbenchError(f"series {series_id} not found")
        return dict(series.meta.get("buildbot") or {})


def _remember(eng: Engine, series_id: int, **values: Any) -> None:
    with Session(eng) as s, s.begin():
        series = s.get(Series, series_id)
        series.meta = {
            **series.meta,
            "buildbot": {**(series.meta.get("buildbot") or {}), **values},
        }


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
    fresh: bool = False,
) -> str:
    """Hand series ``series_id`` (applied) to the master for qemu workers, or attach to the
    submission of the same plan that an earlier client started; wait until every build of
    it has finished; return the series' new state, ``done`` or ``failed``.

    ``fresh`` asks for a new submission even when one with this plan exists (a rerun)."""
    plan = {"jobs": list(jobs), "runs": int(runs)}
    known = handed_over(eng, series_id)
    key = known.get("submission")
    attach = bool(key) and not fresh and known.get("plan") == plan
    if attach:
        found = find_submission(master, key)
        if found is not None:
            say(f"buildbot: series {series_id} attached (buildset {found[0]}, already submitted)")
        else:
            # the earlier client stopped before the master took the submission: send it now,
            # under the same key
            _remember(eng, series_id, since=_last_build_id(master))
            found = _submit(eng, master, series_id, key, jobs, runs, names, say)
    else:
        # the key is on record before the master is asked anything: whatever happens from
        # here, the next client finds this submission instead of making a second one
        key = uuid.uuid4().hex
        _remember(
            eng,
            series_id,
            submission=key,
            plan=plan,
            first_run=_last_run_id(eng) + 1,
            since=None,
            buildset=None,
        )
        _remember(eng, series_id, since=_last_build_id(master))
        found = _submit(eng, master, series_id, key, jobs, runs, names, say)
    known = handed_over(eng, series_id)
    return _watch(eng, master, series_id, known, int(found[0]), say, timeout, poll)


def _submit(
    eng: Engine,
    master: Master,
    series_id: int,
    key: str,
    jobs: list[str],
    runs: int,
    names: list[str] | None,
    say: Callable[[str], None],
) -> list[Any]:
    pipeline.set_state(eng, series_id, "building", "handed to Buildbot")
    sub = submit(
        master,
        series=series_id,
        names=names,
        jobs=jobs,
        runs=runs,
        kinds=["qemu"],
        submission=key,
    )
    _remember(eng, series_id, buildset=sub["buildset"], kernels=len(sub["commits"]))
    say(f"buildbot: series {series_id} submitted (buildset {sub['buildset']})")
    return [sub["buildset"], sub["requests"]]


def _props(build: dict[str, Any]) -> dict[str, Any]:
    return {k: v[0] for k, v in (build.get("properties") or {}).items()}


def _ours(master: Master, key: str, since: int) -> list[dict[str, Any]]:
    query = "&".join(f"property={p}" for p in _PROPS)
    builds = master.get(f"builds?buildid__gt={since}&{query}")["builds"]
    return [b for b in builds if _props(b).get("submission") == key]


def _pending(master: Master, root: int, build_ids: set[int]) -> bool:
    """Whether the submission still has an unfinished buildset: the root one, or one that a
    build of the submission triggered (kernel builds, then benchmarks)."""
    sets = master.get("buildsets?complete=false")["buildsets"]
    return any(bs["bsid"] == root or bs.get("parent_buildid") in build_ids for bs in sets)


def _watch(
    eng: Engine,
    master: Master,
    series_id: int,
    known: dict[str, Any],
    root: int,
    say: Callable[[str], None],
    timeout: float,
    poll: float,
) -> str:
    key, since = known["submission"], int(known.get("since") or 0)
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    reported: set[int] = set()
    finished: list[dict[str, Any]] = []
    failed: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while True:
        builds = _ours(master, key, since)
        for b in builds:
            if b["complete"] and b["buildid"] not in reported:
                reported.add(b["buildid"])
                quiet_since = time.monotonic()
                outcome = RESULT_NAMES.get(b["results"], str(b["results"]))
                finished.append(b)
                say(f"buildbot: {_label(builders, b)}: {outcome} ({_progress(known, finished)})")
                if b["results"] not in PASSED and b["results"] != 5:  # a retry runs again
                    link = master.url + f"#/builders/{b['builderid']}/builds/{b['number']}"
                    name = builders.get(b["builderid"], str(b["builderid"]))
                    failed.append(f"{name} {_what(b)}: {outcome} (log: {link})")
        if time.monotonic() - quiet_since > HEARTBEAT_S:
            # a cold kernel build is minutes without a finished build: say what runs
            for b in builds:
                if not b["complete"]:
                    say(f"buildbot: {_label(builders, b)}: {b['state_string']}")
            quiet_since = time.monotonic()
        ids = {b["buildid"] for b in builds}
        if builds and all(b["complete"] for b in builds) and not _pending(master, root, ids):
            break
        if time.monotonic() > deadline:
            pipeline.set_state(eng, series_id, "failed", "Buildbot did not finish in time")
            raise StackbenchError(
                f"Buildbot did not finish series {series_id} in {timeout:.0f} s: see the "
                f"master's web UI at {master.url}"
            )
        time.sleep(poll)
    failed += _bad_runs(eng, series_id, int(known.get("first_run") or 0))
    if failed:
        error = "; ".join(failed)
        what = f"{len(failed)} failed builds or runs"
        pipeline.set_state(eng, series_id, "failed", what, error=error)
        return "failed"
    pipeline.set_state(eng, series_id, "done", f"{len(reported)} Buildbot builds passed", error="")
    return "done"


def _progress(known: dict[str, Any], finished: list[dict[str, Any]]) -> str:
    """'k/N builds, eta 3m10s': N is the plan's fan-out (the series build, a kernel build per
    commit, a benchmark per commit and job); the builds left are assumed to take as long as
    the finished ones did on average, one at a time (the worker's machine lock)."""
    plan = known.get("plan") or {}
    kernels = int(known.get("kernels") or 0)
    total = 1 + kernels + kernels * len(plan.get("jobs") or []) if kernels else 0
    done = len(finished)
    if not total:
        return f"{done} builds finished"
    spans = [
        float(b["complete_at"]) - float(b["started_at"])
        for b in finished
        if b.get("complete_at") and b.get("started_at")
    ]
    eta = ""
    if spans and done < total:
        eta = f", eta {pipeline.fmt_duration(sum(spans) / len(spans) * (total - done))}"
    return f"{min(done, total)}/{total} builds{eta}"


def _label(builders: dict[int, str], build: dict) -> str:
    """'<builder> #<number> <kernel> <job>', as the progress lines show a build."""
    name = builders.get(build["builderid"], str(build["builderid"]))
    return f"{name} #{build['number']} {_what(build)}"


def _what(build: dict) -> str:
    """The kernel (and job) a build was about, from its properties."""
    p = _props(build)
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
