"""The dispatcher that ``stackbench up`` starts stays up (issue 27): a real PostgreSQL
restart (``pg_ctl restart -m fast`` and ``-m immediate``) does not end it, a dispatcher that
dies is started again by the supervisor, and the series page says "dispatcher not running" when none is."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from helpers.lifecycle import git, wait_for
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.models import Series

pytest_plugins = ["helpers.lifecycle"]


@pytest.fixture
def home_cluster(tmp_path, monkeypatch):
    """The embedded cluster of a home of its own (restarting it disturbs no other test),
    the way ``stackbench up`` makes it."""
    from stackbench.resultsdb import db
    from stackbench.resultsdb.embedded import Cluster, destroy

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("STACKBENCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("STACKBENCH_BUILDBOT_URL", raising=False)
    db.reset()
    cluster = Cluster()
    try:
        yield cluster
    finally:
        db.reset()
        destroy(cluster)


def _restart(cluster, mode: str) -> None:
    from stackbench import proc
    from stackbench.resultsdb.embedded import pg_bindir

    log = cluster.link.resolve() / "postgres.log"
    proc.run(
        [pg_bindir() / "pg_ctl", "restart", "-D", cluster.datadir, "-m", mode, "-w", "-l", log],
        user=cluster._run_user(),
        timeout=120,
    )


def _working(eng) -> bool:
    from stackbench.resultsdb import signals

    try:
        with Session(eng) as s:
            return signals.lock_held(s, signals.DISPATCHER_LOCK)
    except Exception:  # the server is still coming back
        return False


def _submit(tmp_path: Path, work: Path, base: str, eng, n: int) -> int:
    from stackbench.cli import main

    mbox = tmp_path / f"series-{n}.mbox"
    # another series each time: one more patch on top
    (work / "mm" / f"step{n}.c").write_text(f"int extra{n};\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"mm: extra step {n}")
    mbox.write_text(git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n")
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--runs", "1", "--no-wait"]) == 0
    with Session(eng) as s:
        return s.scalars(select(Series.id).order_by(Series.id.desc())).first()


def _moved(eng, sid: int) -> bool:
    with Session(eng) as s:
        return s.get(Series, sid).state not in ("new", "applying")


def _warnings(eng, sid: int) -> list[str]:
    from stackbench.web import create_app

    app = create_app({"ENGINE": eng, "SECRET_KEY": "test", "TESTING": True})
    r = app.test_client().get(f"/series/{sid}/state.json")
    assert r.status_code == 200
    return r.get_json()["warnings"]


def test_the_dispatcher_of_up_survives_postgresql_restarts(home_cluster, tree, tmp_path):
    from stackbench import supervision
    from stackbench.jobs.driver import dispatcher_service
    from stackbench.resultsdb import db

    _repo, work, base = tree
    try:
        assert "started" in dispatcher_service.start()
        child = dispatcher_service.running_pid()
        eng = db.engine()
        wait_for("the dispatcher to take its lock", lambda: _working(eng), timeout=60)
        for n, mode in enumerate(("fast", "immediate")):
            _restart(home_cluster, mode)
            wait_for(f"the dispatcher back after -m {mode}", lambda: _working(eng), timeout=90)
            # the same process: it connected again instead of exiting
            assert dispatcher_service.running_pid() == child
            sid = _submit(tmp_path, work, base, eng, n)
            wait_for(f"series {sid} to move after -m {mode}", lambda s=sid: _moved(eng, s), 120)
        # a dispatcher that dies is started again by the supervisor 'up' left behind
        os.kill(child, signal.SIGKILL)
        wait_for(
            "a new dispatcher",
            lambda: dispatcher_service.running_pid() not in (None, child),
            timeout=30,
        )
        child = dispatcher_service.running_pid()
        wait_for("the new dispatcher's lock", lambda: _working(eng), timeout=60)
        sid = _submit(tmp_path, work, base, eng, 2)
        assert not _warnings(eng, sid) or "dispatcher not running" not in _warnings(eng, sid)[0]
        wait_for(f"series {sid} to move after a kill", lambda: _moved(eng, sid), 120)
        supervised = (supervision.supervisor_dir() / "supervisord.log").read_text()
    finally:
        stopped = dispatcher_service.stop()
    assert stopped.startswith("dispatcher: stopped")
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    log = dispatcher_service.logfile().read_text()
    assert "database connection lost" in log and "trying again" in log
    assert "exited: dispatcher (terminated by SIGKILL; not expected)" in supervised
    # the supervisor ran the dispatcher alone: with it stopped, the supervisor is gone too
    assert not supervision.supervisor_running()
    # no dispatcher now: the page of a series waiting for one says so
    sid = _submit(tmp_path, work, base, eng, 3)
    assert any(w.startswith("dispatcher not running") for w in _warnings(eng, sid))


def test_the_deployed_dispatcher_is_started_again_when_it_dies():
    """systemd (Ansible) and compose restart the plain ``stackbench dispatcher`` themselves."""
    import yaml

    root = Path(__file__).resolve().parents[3]
    unit = (root / "ansible/roles/web/templates/stackbench-dispatcher.service.j2").read_text()
    assert "dispatcher\n" in unit and "\nRestart=always\n" in unit
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    assert compose["services"]["dispatcher"]["restart"] in ("always", "unless-stopped")


@pytest.fixture
def read_only(tree):
    """The tree's directory mounted read-only (a real EROFS), until the test ends."""
    import subprocess

    repo = tree[0]
    ok = subprocess.run(["mount", "--bind", repo, repo], capture_output=True).returncode == 0
    if not ok:
        pytest.skip("needs a mount namespace that allows bind mounts (root)")
    mounted = [repo]
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", repo], check=True)
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", repo], check=True)


def test_a_read_only_tree_waits_on_the_host_and_goes_on_once_fixed(eng, tree, read_only, tmp_path):
    import subprocess
    import threading

    from stackbench.jobs.driver.dispatch import Dispatcher

    _repo, work, base = tree
    sid = _submit(tmp_path, work, base, eng, 0)
    d = Dispatcher(eng, master=lambda: None)
    t = threading.Thread(target=d.run, kwargs={"poll": 0.3}, daemon=True)
    t.start()
    try:

        def waiting():
            with Session(eng) as s:
                x = s.get(Series, sid)
                return x if series_runs_store.current(s, sid).host_fault else None

        x = wait_for("the series to wait on the host", waiting, timeout=60)
        assert x.state in ("new", "applying"), (x.state, x.error)
        with Session(eng) as s:
            said = series_runs_store.current(s, sid).host_fault
        assert "Read-only file system" in said["error"]
        warnings = _warnings(eng, sid)
        assert any("waiting on a host fault" in w and "Read-only" in w for w in warnings)
        subprocess.run(["umount", read_only.pop()], check=True)  # the host is fixed
        wait_for("the series to go on", lambda: _moved(eng, sid), timeout=60)
    finally:
        d.stop.set()
        t.join(10)
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state not in ("apply-failed",), x.error
        assert not series_runs_store.current(s, sid).host_fault


def test_the_series_page_says_what_the_service_lacks(eng, tmp_path):
    """The lines the dispatcher leaves (a worker lost mid-build) and the missing dispatcher
    are on the page of a series handed over; none once it ended."""
    from stackbench.jobs.driver import lifecycle
    from stackbench.resultsdb import series_runs_store
    from stackbench.web import create_app

    with Session(eng) as s:
        x = Series(title="t", state="building", source="web", submitter="a")
        s.add(x)
        s.flush()
        sid = x.id
        series_runs_store.take(s, sid, "buildbot")
        s.commit()
    lost = (
        "worker w1 lost during bench-qemu (build 7): Buildbot runs it again when a worker is back"
    )
    lifecycle.set_state(eng, sid, "building", "1 of 4", progress="1/4",
                        meta={"lost_workers": [lost]})  # fmt: skip
    client = create_app({"ENGINE": eng, "SECRET_KEY": "t", "TESTING": True}).test_client()
    page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert lost in page and "dispatcher not running" in page
    lifecycle.set_state(eng, sid, "done", "finished")
    page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert lost not in page and "dispatcher not running" not in page
