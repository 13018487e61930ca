"""Ways Buildbot 4.3 loses work without a health check noticing (issue 38), healed:

- a build request claimed with no build (a worker that died as a build started on it:
  ``buildPreparationFailure ... putInQuarantine`` in twistd.log): the dispatcher cancels it
  after STACKBENCH_STUCK_REQUEST_S, hands the series over again and says so on its page;
  the state is planted here (the request claimed in the master's own database, as
  Buildbot's failed start leaves it), the race itself is not reliably triggered;
- a worker cut off while the master attaches it: the master kept the dead connection and
  refused every later attach ("already connected"); cut here by a TCP proxy between the
  worker and the master once the master has begun the attach (its first call after the
  worker's info is held, and the line hung up), so the race is hit every time, and the
  worker's own reconnection must then get work;
- a master restarted mid-round and the worker killed as the round runs again: the
  restart's RETRY is not a lost attempt, so the round is not given up.

Real PostgreSQL, a real master and worker (dry kernels and boots, tests/test_buildbot_fanout.py),
the real dispatcher under the supervisor.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from test_buildbot_fanout import (  # noqa: E402
    kill_machine,
    start_web,
    start_worker,
    worker_token,
)
from test_lifecycle_support import finished, wait_for  # noqa: E402

from stackbench.jobs.driver import dispatcher_service, lifecycle  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402

pytest_plugins = ["test_lifecycle_support"]
COMMITS = ["a" * 40, "b" * 40]  # base + 1 patch
JOB = "dry-vm"
STUCK_S = 20
RETRY, SUCCESS = 5, 0  # buildbot.process.results


def make_series(eng) -> int:
    from stackbench.resultsdb import db, series_runs_store
    from stackbench.resultsdb.models import Patch, Series

    with db.session(eng) as s:
        series = Series(title="mm: one tweak", base_commit=COMMITS[0], state="applied")
        series.patches.append(Patch(idx=1, total=1, subject="mm: tweak", commit_sha=COMMITS[1]))
        s.add(series)
        s.flush()
        # the plan, on an attempt waiting for the hand-over
        series_runs_store.begin(s, series.id, source="test", executor=series_runs_store.WAITING,
                                jobs=[JOB], runs=2, adaptive=False)  # fmt: skip
        return series.id


@pytest.fixture
def lab(eng, tmp_path, monkeypatch, request):
    """The web API, a master with one dry worker declared (not started), the dispatcher;
    a dry boot or kernel build lasts ``request.param`` seconds (1 unless parametrized)."""
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    workers = [{"name": "w1", "kind": "qemu", "cpus": 2, "memory_mb": 1024, "pool": "lab"}]
    dry_s = getattr(request, "param", 1)
    extra = {"dry_kernel": True, "dry_seconds": dry_s, "jobs": [JOB],
             "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}]}  # fmt: skip
    cfg = services.create_master(base / "master", workers, extra=extra)
    master = client.embedded_master_at(base / "master")
    monkeypatch.setenv("STACKBENCH_BUILDBOT_URL", master.url)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_USER", master.user)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_PASSWORD", master.password)
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", web_url)
    monkeypatch.setenv("STACKBENCH_STUCK_REQUEST_S", str(STUCK_S))
    started = []
    try:
        services.start_master(base / "master")
        print(dispatcher_service.start())
        yield {"master": master, "base": base, "cfg": cfg, "web": web_url, "started": started}
    finally:
        print(dispatcher_service.stop())
        for wb in started:
            services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()


def _events(eng, sid: int) -> list[str]:
    from sqlalchemy import text

    with eng.connect() as conn:
        rows = conn.execute(
            text("SELECT message FROM event WHERE series_id = :s ORDER BY id"), {"s": sid}
        ).all()
    return [r[0] for r in rows]


def test_a_request_claimed_without_a_build_is_cancelled_and_the_series_ends_done(eng, lab):
    master, base = lab["master"], lab["base"]
    sid = make_series(eng)
    lifecycle.hand_over(eng, sid, source="test", fresh=True)
    # no worker yet: the series' first request (the build that starts its kernel builds)
    # waits, unclaimed
    reqs = wait_for("the series' build request", lambda: [
        r for r in master.get("buildrequests?complete=false")["buildrequests"]
        if not r["claimed"]], timeout=120)  # fmt: skip
    victim = min(r["buildrequestid"] for r in reqs)
    masterid = master.get("masters")["masters"][0]["masterid"]
    # what Buildbot's failed build start leaves: the request claimed by this master, no build
    with contextlib.closing(sqlite3.connect(base / "master" / "state.sqlite", timeout=30)) as db:
        db.execute("INSERT INTO buildrequest_claims (brid, masterid, claimed_at) VALUES (?, ?, ?)",
                   (victim, masterid, int(time.time())))  # fmt: skip
        db.commit()
    lab["started"].append(start_worker(base, lab["cfg"], "w1", lab["web"]))

    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=400, every=1)
    assert x.state == "done", (x.state, x.error)
    from stackbench.resultsdb import db as sbdb
    from stackbench.resultsdb import series_runs_store

    with sbdb.session(eng) as s:  # said while it waited, gone once under way
        assert series_runs_store.current(s, sid).host_fault is None
    said = "\n".join(_events(eng, sid))
    assert f"build request {victim} claimed without a build since " in said, said
    assert "cancelled, resubmitting" in said and "handed over again" in said, said
    with sbdb.session(eng) as s:
        outcomes = [a.outcome for a in series_runs_store.attempts(s, sid)]
    assert outcomes[-2:] == ["resubmitted", "done"], outcomes
    # Buildbot itself holds the planted request until its master restarts; nothing waits on it
    left = master.get(f"buildrequests/{victim}")["buildrequests"][0]
    assert left["claimed"] and not left["complete"], left


def test_which_claimed_requests_count_as_stuck():
    from stackbench.jobs.driver.buildbot_executor import stuck_requests

    now, limit = 10_000.0, 300.0

    def req(brid, claimed_at, claimed=True):
        return {"buildrequestid": brid, "claimed": claimed, "claimed_at": claimed_at}

    def build(bid, brid, state, started, complete=False):
        return {"buildid": bid, "buildrequestid": brid, "complete": complete,
                "state_string": state, "started_at": started}  # fmt: skip

    requests = [
        req(1, now - 400),  # claimed long ago, no build at all
        req(2, now - 10),  # claimed a moment ago: its build is on its way
        req(3, now - 400),  # a build under way
        req(4, now - 400),  # a build that never got past pinging its worker
        req(5, now - 400),  # its one build ended (a lost worker's RETRY): none under way
        req(6, None, claimed=False),  # waiting for a worker
    ]
    builds = [
        build(30, 3, "building", now - 390),
        build(40, 4, "pinging worker", now - 390),
        build(50, 5, "retry", now - 390, complete=True),
    ]
    lines = stuck_requests(requests, builds, now, limit)
    assert [int(x.split()[2]) for x in lines] == [1, 4, 5], lines
    assert lines[0].startswith("build request 1 claimed without a build since ")
    assert "(build 40 still 'pinging worker')" in lines[1]
    assert stuck_requests(requests, builds, now, 500.0) == []


def test_which_earlier_attempts_lost_their_worker():
    from stackbench.jobs.executors.buildbot.steps import worker_went_away

    def build(state, results=5):
        return {"results": results, "state_string": state}

    # what Buildbot's Build writes when it loses its worker while it runs
    assert worker_went_away(build("retry lost connection"))
    assert worker_went_away(build("retry no report within 2s (0 of 2 run(s))"))  # a box
    # a worker gone before the build began: the round ran nothing (the chaos bench's
    # back-to-back worker kills gave a round up with one of these as its second loss)
    assert not worker_went_away(build("worker not pinged"))
    assert not worker_went_away(build("worker not available"))
    # what a master's going leaves: the next master's housekeeping, a clean shutdown
    assert not worker_went_away(build("building"))
    assert not worker_went_away(build("created"))
    assert not worker_went_away(build("retry (Master Shutdown) lost connection"))
    assert not worker_went_away(build("build successful", results=0))


def _pid(base) -> int:
    return int((base / "twistd.pid").read_text())


def _round_builds(master) -> list[dict]:
    """The benchmark builds of the series' rounds, oldest first, each with its steps."""
    names = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    out = []
    for b in master.get("builds")["builds"]:
        if names[b["builderid"]] == "bench-qemu":
            b["steps"] = master.get(f"builds/{b['buildid']}/steps")["steps"]
            out.append(b)
    return sorted(out, key=lambda b: b["buildid"])


def _benchmarking(b: dict) -> bool:
    return not b["complete"] and any(
        s["name"] == "benchmark" and s["started_at"] and not s["complete"] for s in b["steps"]
    )


# a dry boot and a dry kernel build of 8 s: a round's benchmark step runs long enough to be
# cut twice
@pytest.mark.parametrize("lab", [8], indirect=True)
def test_a_master_restart_and_a_lost_worker_in_one_round_do_not_give_it_up(eng, lab):
    """The chaos bench's kill-dispatcher (bench/README.md, issue 38): the master SIGKILLed
    mid-round and restarted, then the worker SIGKILLed while the round runs again. The
    master's restart ends the round RETRY as a lost worker does, but only the worker's loss
    counts towards ``round_attempts`` (2): the third try runs and the series ends done."""
    master, base, cfg = lab["master"], lab["base"], lab["cfg"]
    assert cfg.get("round_attempts", 2) == 2
    wb = base / "w1"
    services.create_worker(wb, f"127.0.0.1:{cfg['pb_port']}", "w1",
                           services.worker_password(base / "master", "w1"))  # fmt: skip
    env = {"STACKBENCH_URL": lab["web"], "STACKBENCH_WORKER_TOKEN": worker_token("w1")}
    services.start_worker(wb, env=env)
    lab["started"].append(wb)
    sid = make_series(eng)
    lifecycle.hand_over(eng, sid, source="test", fresh=True)

    first = wait_for("a round's benchmark under way",
                     lambda: next(filter(_benchmarking, _round_builds(master)), None),
                     timeout=300, every=0.5)  # fmt: skip
    os.kill(_pid(base / "master"), signal.SIGKILL)
    wait_for("the master to die", lambda: not services.running(base / "master"), timeout=30)
    (base / "master" / "twistd.pid").unlink(missing_ok=True)
    services.start_master(base / "master")

    def again():
        return next((b for b in _round_builds(master) if _benchmarking(b)
                     and b["buildrequestid"] == first["buildrequestid"]), None)  # fmt: skip

    second = wait_for("the round under way again", again, timeout=300, every=0.5)
    kill_machine(wb)
    wait_for("the worker to die", lambda: not services.running(wb), timeout=30)
    # twistd refuses to start over the pid file of a killed worker left a zombie
    (wb / "twistd.pid").unlink(missing_ok=True)
    services.start_worker(wb, env=env)

    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=400, every=1)
    assert x.state == "done", (x.state, x.error)
    tries = [b for b in _round_builds(master) if b["buildrequestid"] == first["buildrequestid"]]
    assert [b["buildid"] for b in tries[:2]] == [first["buildid"], second["buildid"]]
    # (a try the master began on the dying worker, "worker not pinged", may come between)
    assert [b["results"] for b in (tries[0], tries[1], tries[-1])] == [RETRY, RETRY, SUCCESS]
    assert "lost connection" in tries[1]["state_string"], tries[1]
    props = master.get(f"builds/{tries[-1]['buildid']}/properties")["properties"][0]
    assert props["lost_attempts"][0] == [f"{second['buildid']}:w1"]
    assert props["spared_attempts"][0][0] == f"{first['buildid']}:w1"


class CutAtAttach:
    """A TCP proxy to the master's worker port that hangs up its first connection in the
    middle of Buildbot's attach, as a worker killed at that moment does; later connections
    pass untouched.

    The race needs the connection gone while the master writes the worker connected to its
    database, with no call of its own waiting on the worker: its next call then meets a
    stale broker, and Twisted's login, finishing after the loss, never hears of it. A cut
    right after the worker's info passed sometimes came too late on a loaded host (the
    master had written and sent its next call, whose loss Buildbot does handle: no race).
    So the proxy takes the master database's write lock (BEGIN IMMEDIATE: Buildbot retries
    a locked write) before it passes the info on, hangs up both sides (FINs), and lets go
    of the lock only once the master had ``hold_s`` to read the hang-up."""

    def __init__(self, upstream: int, database: Path, hold_s: float = 2.0) -> None:
        self.upstream = upstream
        self.database = database
        self.hold_s = hold_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            up = socket.create_connection(("127.0.0.1", self.upstream))
            first = self.connections == 1
            threading.Thread(target=self._pump, args=(down, up, first), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        lock = None
        try:
            while chunk := src.recv(65536):
                if watch and b"worker_commands" in chunk:
                    lock = sqlite3.connect(self.database, timeout=60, isolation_level=None)
                    lock.execute("BEGIN IMMEDIATE")  # the master's next write waits
                    dst.sendall(chunk)
                    break  # the worker info is on its way: hang up both sides
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        if lock is not None:
            time.sleep(self.hold_s)
            lock.execute("ROLLBACK")
            lock.close()
            self.cut.set()

    def close(self) -> None:
        self.listener.close()


def test_a_worker_cut_off_while_it_attaches_gets_work_when_it_comes_back(eng, lab):
    base, cfg = lab["base"], lab["cfg"]
    proxy = CutAtAttach(int(cfg["pb_port"]), base / "master" / "state.sqlite")
    try:
        start_worker(base, {**cfg, "pb_port": proxy.port}, "w1", lab["web"])
        lab["started"].append(base / "w1")
        wait_for("the attach to be cut", proxy.cut.is_set, timeout=120)
        # buildbot-worker connects again by itself (its reconnecting client)
        wait_for("the worker to connect again", lambda: proxy.connections >= 2, timeout=120)
        sid = make_series(eng)
        lifecycle.hand_over(eng, sid, source="test", fresh=True)
        x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=1)
    finally:
        proxy.close()
    assert x.state == "done", (x.state, x.error)
    log = (base / "master" / "twistd.log").read_text()
    assert "Calling Stale Broker" in log  # the race: the attach met the connection gone
    assert "detaching a connection lost while it attached" in log
    assert "but we are already connected to" not in log
