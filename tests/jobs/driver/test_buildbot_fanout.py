"""Buildbot for real: a master and two workers on loopback, a 3-commit series fanned out,
one worker killed mid-step.

The kernel builds and guest runs are the one thing replaced here: real kernel builds take
minutes, so the master is configured with ``dry_kernel`` and every build and benchmark step
runs ``stackbench worker build|bench --dry-kernel``, which produces a tiny synthetic kernel
artifact and synthetic samples. Everything around it is the real path: Buildbot's triggerable
fan-out, worker locks, artifact transfer through the master, the ``stackbench worker upload``
command posting to the real web API (``POST /api/runs``) with each worker's own token, and
the runs landing in the test's PostgreSQL database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

import pytest
from helpers.lifecycle import wait_for
from sqlalchemy import text

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402

RETRY, SUCCESS = 5, 0  # buildbot.process.results
COMMITS = ["a" * 40, "b" * 40, "c" * 40, "d" * 40]  # base + 3 patches
JOBS = ["dry-vm", "dry-thp"]
RUNS = 2


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it: a worker and the commands and guests it runs."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4 of stat: the parent
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kill_machine(worker_base: Path) -> None:
    """Simulate a machine dying: SIGKILL the worker and everything it started. Not its
    session: under ``stackbench up`` that is the supervisor's, with every other service."""
    pid = int((worker_base / "twistd.pid").read_text())
    for p in descendants(pid):
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(p, signal.SIGKILL)


def start_web(tmp_path: Path):
    from werkzeug.serving import make_server

    from stackbench.web import create_app

    app = create_app({"SECRET_KEY": "test", "TESTING": True})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_port}"


def worker_token(name: str) -> str:
    from stackbench.mail import accounts
    from stackbench.resultsdb import db

    with db.session() as s:
        user = accounts.create_user(s, name, worker=True)
        return accounts.create_token(s, user, f"buildbot worker {name}")


def start_worker(base: Path, cfg: dict, name: str, web_url: str) -> Path:
    """Create and start worker ``name`` of the master in ``base/master``, posting its runs
    to the web API at ``web_url`` with a token of its own; its base directory."""
    wb = base / name
    services.create_worker(
        wb,
        f"127.0.0.1:{cfg['pb_port']}",
        name,
        services.worker_password(base / "master", name),
    )
    env = {"STACKBENCH_URL": web_url, "STACKBENCH_WORKER_TOKEN": worker_token(name)}
    services.start_worker(wb, env=env)
    return wb


def make_series(eng) -> int:
    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import Patch, Series

    with db.session() as s:
        series = Series(
            title="mm: three compaction tweaks", base_commit=COMMITS[0], state="applied"
        )
        for i, sha in enumerate(COMMITS[1:], 1):
            series.patches.append(Patch(idx=i, total=3, subject=f"mm: patch {i}", commit_sha=sha))
        s.add(series)
        s.flush()
        return series.id


@pytest.fixture
def cluster(eng, tmp_path):
    """A master with two qemu workers (w1, w2) and the web API, all on 127.0.0.1."""
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    workers = [{"name": n, "kind": "qemu", "cpus": 2, "memory_mb": 2048} for n in ("w1", "w2")]
    cfg = services.create_master(
        base / "master",
        workers,
        extra={
            "dry_kernel": True,
            "dry_seconds": 2,
            "jobs": JOBS,
            "runs": RUNS,
            "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}],
        },
    )
    started = []
    try:
        services.start_master(base / "master")
        started.append(("master", base / "master"))
        for w in workers:
            started.append(("worker", start_worker(base, cfg, w["name"], web_url)))
        master = client.embedded_master_at(base / "master")
        wait_for("both workers connected", lambda: len(connected(master)) == 2, timeout=60)
        yield master, base
    finally:
        for kind, path in reversed(started):
            if kind == "worker":
                services.stop_worker(path)
            else:
                services.stop_master(path)
        server.shutdown()


def connected(master) -> list[str]:
    return [w["name"] for w in master.get("workers")["workers"] if w["connected_to"]]


def test_series_fans_out_over_both_workers_and_survives_a_lost_worker(cluster, eng):
    master, base = cluster
    series_id = make_series(eng)
    sub = client.submit(master, series=series_id)
    assert sub["commits"] == COMMITS

    names = {w["workerid"]: w["name"] for w in master.get("workers")["workers"]}
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}

    def running_bench():
        for b in master.get("builds?complete=false")["builds"]:
            if builders[b["builderid"]] != "bench-qemu":
                continue
            steps = master.get(f"builds/{b['buildid']}/steps")["steps"]
            if any(
                s["name"] == "benchmark" and s["started_at"] and not s["complete"] for s in steps
            ):
                return b
        return None

    # independent work goes to both machines at once
    wait_for(
        "builds on both workers",
        lambda: len({b["workerid"] for b in master.get("builds")["builds"]}) == 2,
    )
    victim_build = wait_for("a benchmark step in progress", running_bench)
    victim = names[victim_build["workerid"]]
    kill_machine(base / victim)
    # what the dispatcher puts on the series page while the build waits for a worker
    from stackbench.jobs.driver.buildbot_executor import BuildbotExecutor

    def lost_line():
        # the victim may have held a kernel build too, which the master ends RETRY apart
        builds = master.get("builds")["builds"]
        lines = BuildbotExecutor(master).lost_workers(builds)
        return [ln for ln in lines if victim in ln and f"(build {victim_build['buildid']})" in ln]

    (line,) = wait_for("the lost worker to be named", lost_line, timeout=120)
    assert "bench-qemu" in line

    expected_requests = 1 + len(COMMITS) + len(COMMITS) * len(JOBS)
    wait_for(
        "every build request to finish",
        lambda: (
            len(master.get("buildrequests")["buildrequests"]) == expected_requests
            and not master.get("buildrequests?complete=false")["buildrequests"]
        ),
    )
    builds = master.get("builds")["builds"]
    spread = {names[b["workerid"]] for b in builds}
    assert spread == {"w1", "w2"}

    # the lost attempt was retried on the other worker and succeeded there
    lost = next(b for b in builds if b["buildid"] == victim_build["buildid"])
    assert lost["results"] == RETRY
    retries = [
        b
        for b in builds
        if b["buildrequestid"] == lost["buildrequestid"] and b["buildid"] != lost["buildid"]
    ]
    assert [r["results"] for r in retries] == [SUCCESS]
    assert names[retries[0]["workerid"]] != victim
    requests = master.get("buildrequests")["buildrequests"]
    assert all(r["results"] == SUCCESS for r in requests), requests

    with eng.connect() as conn:
        done = conn.execute(
            text(
                "SELECT k.commit, j.suite, r.iteration, count(*) FROM run r "
                "JOIN kernel_build k ON k.id = r.build_id JOIN job j ON j.id = r.job_id "
                "WHERE r.status = 'done' GROUP BY 1, 2, 3"
            )
        ).all()
        lost_rows = conn.execute(
            text(
                "SELECT m.name, r.meta, (SELECT count(*) FROM sample s WHERE s.run_id = r.id) "
                "FROM run r JOIN machine m ON m.id = r.machine_id WHERE r.status = 'lost'"
            )
        ).all()
        machines = conn.execute(
            text("SELECT DISTINCT m.name FROM run r JOIN machine m ON m.id = r.machine_id")
        ).scalars()
        machines = set(machines)
        sizes = conn.execute(
            text(
                "SELECT DISTINCT m.cpus, m.memory_mb FROM run r "
                "JOIN machine m ON m.id = r.machine_id WHERE r.status = 'done'"
            )
        ).all()
    # the workers declare 2 GiB; their benchmarks measure the kind's tiny guest all the same
    assert sizes == [(2, 1024)]
    # one run per (commit, job, iteration): nothing missing, nothing twice
    assert len(done) == len(COMMITS) * len(JOBS) * RUNS
    assert all(n == 1 for *_k, n in done)
    assert {c for c, *_ in done} == set(COMMITS)
    # the attempt that lost its worker is on record, with no samples
    assert [(name, meta["buildbot_build"], n) for name, meta, n in lost_rows] == [
        (victim, str(victim_build["buildid"]), 0)
    ]
    assert machines <= {"w1", "w2"}
