"""A lab of three workers: a series' rounds spread over every worker, each round whole on one
worker, and one worker killed mid-round.

Real PostgreSQL, real Buildbot master and three workers of one pool, the real dispatcher and
web API; the kernel builds and guest runs are the workers' ``--dry-kernel`` ones (see
tests/jobs/driver/test_buildbot_fanout.py): a dry boot sleeps, so three rounds really run at once.
"""

from __future__ import annotations

import re
import urllib.request

import pytest
from sqlalchemy import text

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from helpers.lifecycle import finished, wait_for  # noqa: E402
from test_buildbot_fanout import kill_machine, start_web, start_worker  # noqa: E402

from stackbench.jobs.driver import dispatcher_service, lifecycle  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client, kept_kernels  # noqa: E402

pytest_plugins = ["helpers.lifecycle"]
COMMITS = ["a" * 40, "b" * 40, "c" * 40, "d" * 40]  # base + 3 patches
JOB = "dry-vm"
ROUNDS = 4
RUNS = ROUNDS * 4  # four runs per boot: ROUNDS boots of every kernel
WORKERS = ("w1", "w2", "w3")


def make_series(eng) -> int:
    from stackbench.resultsdb import db, series_runs_store
    from stackbench.resultsdb.models import Patch, Series

    with db.session(eng) as s:
        series = Series(title="mm: three tweaks", base_commit=COMMITS[0], state="applied")
        for i, sha in enumerate(COMMITS[1:], 1):
            series.patches.append(Patch(idx=i, total=3, subject=f"mm: tweak {i}", commit_sha=sha))
        s.add(series)
        s.flush()
        # the plan waits on the attempt the hand-over takes
        series_runs_store.begin(s, series.id, source="test", executor=series_runs_store.WAITING,
                                jobs=[JOB], runs=RUNS, adaptive=False)  # fmt: skip
        return series.id


@pytest.fixture
def lab(eng, tmp_path, monkeypatch):
    """The web API, a master with three pooled dry workers, and the dispatcher."""
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    workers = [
        {"name": n, "kind": "qemu", "cpus": 2, "memory_mb": 1024, "pool": "lab"} for n in WORKERS
    ]
    extra = {"dry_kernel": True, "dry_seconds": 3, "jobs": [JOB],
             "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}]}  # fmt: skip
    cfg = services.create_master(base / "master", workers, extra=extra)
    master = client.embedded_master_at(base / "master")
    monkeypatch.setenv("STACKBENCH_BUILDBOT_URL", master.url)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_USER", master.user)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_PASSWORD", master.password)
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", web_url)
    started = []
    try:
        services.start_master(base / "master")
        for name in WORKERS:
            started.append(start_worker(base, cfg, name, web_url))
        for name in WORKERS:
            client.wait_for_worker(master, name)
        print(dispatcher_service.start())
        yield master, base, web_url
    finally:
        print(dispatcher_service.stop())
        for wb in started:
            services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()


def _names(master) -> tuple[dict[int, str], dict[int, str]]:
    workers = {w["workerid"]: w["name"] for w in master.get("workers")["workers"]}
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    return workers, builders


def _running_round(master, eng, per_boot: int = 1):
    """A round build still running that has stored its first boot's runs, all ``per_boot``
    of them: a worker killed between two uploads of one boot leaves it half stored, and the
    retry rightly boots it again."""
    _workers, builders = _names(master)
    for b in master.get("builds?complete=false")["builds"]:
        if builders[b["builderid"]] != "bench-qemu":
            continue
        with eng.connect() as conn:
            stored = conn.execute(
                text(
                    "SELECT count(*) FROM run WHERE meta->>'buildbot_build' = :b "
                    "AND status = 'done'"
                ),
                {"b": str(b["buildid"])},
            ).scalar()
        if stored >= per_boot:
            return b
    return None


def _step_log(master, buildid: int, step: str, log: str = "") -> str:
    """The text of a step's log named ``log`` (its first log by default); "" if none."""
    for st in master.get(f"builds/{buildid}/steps")["steps"]:
        if st["name"] == step:
            logs = master.get(f"steps/{st['stepid']}/logs")["logs"]
            logs = [lg for lg in logs if lg["name"] == log] if log else logs[:1]
            if not logs:
                return ""
            chunks = master.get(f"logs/{logs[0]['logid']}/contents")["logchunks"]
            return "".join(c["content"] for c in chunks)
    return ""


def test_rounds_spread_over_the_lab_and_survive_a_lost_worker(eng, lab):
    master, base, web_url = lab
    sid = make_series(eng)
    lifecycle.hand_over(eng, sid, source="test", fresh=True)

    victim_build = wait_for(
        "a round in progress", lambda: _running_round(master, eng, RUNS // ROUNDS), timeout=240
    )
    workers, builders = _names(master)
    victim = workers[victim_build["workerid"]]
    # rounds run at once on several workers
    busy = {
        workers[b["workerid"]]
        for b in master.get("builds?complete=false")["builds"]
        if builders[b["builderid"]] == "bench-qemu"
    }
    assert len(busy) >= 2, busy
    kill_machine(base / victim)

    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=400, every=1)
    assert x.state == "done", (x.state, x.error)

    builds = master.get("builds?property=round&property=boots")["builds"]
    rounds = [b for b in builds if builders[b["builderid"]] == "bench-qemu"]
    lost = next(b for b in rounds if b["buildid"] == victim_build["buildid"])
    assert lost["results"] == 5  # RETRY: the worker went away
    retry = [b for b in rounds if b["buildrequestid"] == lost["buildrequestid"] and b is not lost]
    assert [b["results"] for b in retry] == [0]
    assert workers[retry[0]["workerid"]] != victim
    # the boots the lost attempt stored were not booted again
    assert "already stored, not booted again" in _step_log(master, retry[0]["buildid"], "benchmark")
    # every round ran once, each on one worker; all three took rounds
    done = [b for b in rounds if b["results"] == 0]
    assert sorted(int(b["properties"]["round"][0]) for b in done) == list(range(1, ROUNDS + 1))
    assert len({workers[b["workerid"]] for b in rounds}) == 3
    # a worker's later rounds boot the kernels it kept from its first: fetched once each
    fetched = [
        (workers[b["workerid"]], line)
        for b in rounds
        for line in _step_log(master, b["buildid"], "plan the round", log="fetch").splitlines()
        if line.startswith("ofetched ")
    ]
    assert fetched and len(fetched) == len(set(fetched)), fetched
    assert len(fetched) < len(COMMITS) * len(rounds)

    with eng.connect() as conn:
        total, distinct, ok = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT idempotency_key), "
                "count(*) FILTER (WHERE status = 'done') FROM run"
            )
        ).one()
        per_round = conn.execute(
            text(
                "SELECT r.boot_round, count(DISTINCT r.meta->>'worker'), min(m.name) FROM run r "
                "JOIN machine m ON m.id = r.machine_id WHERE r.status = 'done' GROUP BY 1"
            )
        ).all()
        lost_runs = conn.execute(
            text(
                "SELECT m.name, r.meta FROM run r JOIN machine m ON m.id = r.machine_id "
                "WHERE r.status = 'lost'"
            )  # fmt: skip
        ).all()
    assert total == distinct and ok == len(COMMITS) * RUNS  # nothing missing, nothing twice
    # a round cut short (its worker lost, or the coordinating rounds build with it, which
    # cancels the rounds it was waiting for) ran again elsewhere
    cut = {int(b["properties"]["round"][0]) for b in rounds if b["results"] != 0}
    assert int(lost["properties"]["round"][0]) in cut
    for rnd, n_workers, machine in per_round:
        assert machine == "lab"  # a pool's runs are stored under the pool
        # a round runs whole on one worker; a cut one's rest ran on another
        assert n_workers == 1 or (rnd in cut and n_workers == 2), (rnd, n_workers, cut)
    assert [(name, meta["buildbot_build"]) for name, meta in lost_runs] == [
        (victim, str(victim_build["buildid"]))
    ]

    with urllib.request.urlopen(f"{web_url}/series/{sid}", timeout=30) as resp:
        page = resp.read().decode()
    assert re.search(r'title="run \d+: lost"', page)  # the lost attempt is on the series page
    key = x.meta["comparison"]["key"]
    with urllib.request.urlopen(f"{web_url}/compare/{key}", timeout=30) as resp:
        compared = resp.read().decode()
    assert re.search(r"3 boxes contributed: w1, w2, w3", compared), compared[:2000]


def test_one_process_boots_a_round_and_a_retry_skips_stored_boots(eng, tmp_path, monkeypatch,
                                                                  capsys):  # fmt: skip
    from stackbench.cli import main

    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    for i, commit in enumerate(COMMITS[:2]):
        argv = ["worker", "build", "--commit", commit, "--out", f"k{i}", "--dry-kernel"]
        assert main(argv) == 0
    argv = ["worker", "bench", "--job", JOB, "--submission", "s1", "--machine", "lab",
            "--worker", "w2", "--runs", "2", "--round", "3", "--boot-index", "0",
            "--buildbot-build", "7", "--series", "5", "--dry-kernel", "--upload",
            "--kernel", "k0/kernel.tar", "--first", "4", "--kernel", "k1/kernel.tar",
            "--first", "4"]  # fmt: skip
    assert main(argv) == 0
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.boot_id, r.boot_round, r.iteration, r.meta->>'worker', m.name "
                "FROM run r JOIN machine m ON m.id = r.machine_id ORDER BY r.id"
            )  # fmt: skip
        ).all()
    assert [tuple(r) for r in rows] == [
        ("series-5-bb-7-0", 3, 4, "w2", "lab"),
        ("series-5-bb-7-0", 3, 5, "w2", "lab"),
        ("series-5-bb-7-1", 3, 4, "w2", "lab"),
        ("series-5-bb-7-1", 3, 5, "w2", "lab"),
    ]
    capsys.readouterr()
    assert main([*argv, "--skip-stored"]) == 0
    out = capsys.readouterr().out
    assert out.count("already stored, not booted again") == 2, out
    # a worker lost mid-upload stored a boot's first run only: that boot runs again
    with eng.begin() as conn:
        conn.execute(text("DELETE FROM run WHERE boot_id = 'series-5-bb-7-1' AND iteration = 5"))
    assert main([*argv, "--skip-stored"]) == 0
    out = capsys.readouterr().out
    assert out.count("already stored, not booted again") == 1, out
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 4


def test_a_failed_boot_does_not_stop_the_round(eng, tmp_path, monkeypatch, capsys):
    from stackbench.cli import main

    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["worker", "build", "--commit", COMMITS[0], "--out", "k0", "--dry-kernel"]) == 0
    argv = ["worker", "bench", "--job", JOB, "--submission", "s2", "--runs", "1",
            "--dry-kernel", "--upload", "--boot-index", "0",
            "--kernel", "gone.tar", "--kernel", "k0/kernel.tar"]  # fmt: skip
    assert main(argv) == 1
    assert "1 of 2 boots failed: gone.tar: kernel artifact not found" in capsys.readouterr().err
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 1


def _rounds_of(master, submission: str) -> list[dict]:
    """The finished benchmark builds of a batch handed over as ``submission``."""
    _workers, builders = _names(master)
    out = []
    for b in master.get("builds?complete=true&property=submission")["builds"]:
        mine = (b["properties"].get("submission") or [None])[0] == submission
        if mine and builders[b["builderid"]] == "bench-qemu":
            out.append(b)
    return out


def test_a_kernel_that_cannot_be_fetched_fails_its_round_and_says_which(eng, lab):
    master, base, _web_url = lab
    boot = {"commit": COMMITS[1], "kernel_name": "1/3", "position": 1, "tree": "linux-6.1",
            "kernel_config": "tiny-guest", "job": JOB, "machine_kind": "qemu", "runs": 1,
            "round": 1, "first": 0}  # fmt: skip

    # not on the master: its build's artifact is gone
    client.submit_rounds(master, series=0, submission="gone", rounds_key="gone",
                         boots=[{**boot, "artifact": "artifacts/gone/1/kernel.tar"}])  # fmt: skip
    (gone,) = wait_for("the round to end", lambda: _rounds_of(master, "gone"), timeout=120)
    assert gone["results"] == 2, gone  # FAILURE
    assert "fetching 1/3 failed" in gone["state_string"], gone["state_string"]
    log = _step_log(master, gone["buildid"], "plan the round", log="fetch")
    assert "1/3: artifacts/gone/1/kernel.tar is not on the master" in log, log

    # on the master, but the download fails: the worker cannot write where it keeps kernels
    kept = base / "master" / "artifacts" / "kept" / "1"
    kept.mkdir(parents=True)
    (kept / "kernel.tar").write_bytes(b"\0" * 4096)
    builddir = base / "w2" / "bench-qemu"
    builddir.mkdir(parents=True, exist_ok=True)
    (builddir / kept_kernels.KEPT).write_text("not a directory\n")
    client.submit_rounds(master, series=0, submission="blocked", rounds_key="blocked",
                         boots=[{**boot, "artifact": "artifacts/kept/1/kernel.tar"}],
                         avoid=["w1", "w3"])  # fmt: skip
    (blocked,) = wait_for("the round to end", lambda: _rounds_of(master, "blocked"), timeout=120)
    workers, _builders = _names(master)
    assert workers[blocked["workerid"]] == "w2"
    assert blocked["results"] == 2, blocked
    assert "fetching 1/3 failed" in blocked["state_string"], blocked["state_string"]
    log = _step_log(master, blocked["buildid"], "plan the round", log="fetch")
    kept_at = re.escape(str(builddir / kept_kernels.KEPT))
    assert re.search(rf"^e1/3: the download to {kept_at}/\S+\.tar failed$", log, re.M), log
    assert "fetched 1/3" not in log
