"""The series lifecycle without Buildbot: one validation for every front door, and the
dispatcher service running a handed-over series in its own process when no master is
configured, to ``failed`` with the reason when a kernel does not build."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session
from test_lifecycle_support import finished, git, wait_for

from stackbench.resultsdb.models import Series

pytest_plugins = ["test_lifecycle_support"]


def _count(eng) -> int:
    with Session(eng) as s:
        return s.scalar(select(func.count()).select_from(Series))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--runs", "31"], "runs: must be between 1 and 30, not 31"),
        (["--runs", "0"], "runs: must be between 1 and 30, not 0"),
        (["--jobs", "thpscale[nope=1]"], "jobs: job 'thpscale[nope=1]'"),
        (["--jobs", "no-such-job"], "no job definition 'no-such-job'"),
        (["--tree", "no-such-tree"], "tree: 'no-such-tree': unknown tree"),
        (["--base", "bad ref"], "base: not a commit or ref name"),
    ],
)
def test_cli_submit_validates_like_every_front_door(eng, tree, tmp_path, capsys, args, message):
    from stackbench.cli import main

    _repo, work, base = tree
    mbox = tmp_path / "series.mbox"
    mbox.write_text(git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n")
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--no-wait", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stackbench: error: ") and message in err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback
    assert _count(eng) == 0


def test_dispatcher_without_buildbot_runs_the_series_itself(
    eng, tree, tmp_path, monkeypatch, capsys
):
    """No master configured: the dispatcher runs the in-process pipeline. The tiny tree is
    no kernel, so every build fails: the series ends failed, each kernel saying why, and
    the report mail is queued."""
    from stackbench.cli import main
    from stackbench.jobs import dispatcher_service

    monkeypatch.delenv("STACKBENCH_BUILDBOT_URL", raising=False)
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "mm-list@example.org")
    _repo, work, base = tree
    mbox = tmp_path / "series.mbox"
    mbox.write_text(git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n")
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--runs", "1", "--no-wait"]) == 0
    out = capsys.readouterr().out
    assert "handed to the dispatcher" in out
    with Session(eng) as s:
        (sid,) = s.scalars(select(Series.id)).all()
    try:
        assert "started" in dispatcher_service.start()
        x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=240, every=1)
        pid = dispatcher_service.running_pid()
    finally:
        stopped = dispatcher_service.stop()
    assert stopped == f"dispatcher: stopped (pid {pid})"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert x.state == "failed", x.error
    assert x.meta["dispatch"] == {"executor": "in-process"}
    # every kernel is named with its failure
    assert x.error.count("build-failed") == 3 and "1/2-" in x.error and "2/2-" in x.error
    with eng.connect() as conn:
        states = (
            conn.execute(
                text("SELECT state FROM event WHERE series_id = :s ORDER BY id"), {"s": sid}
            )
            .scalars()
            .all()
        )
        mail = conn.execute(text("SELECT to_addrs FROM mail_outbox")).scalar_one()
    # new -> applying -> applied -> building -> running -> failed, all recorded
    order = [st for st in states if st in ("new", "applying", "applied", "building", "failed")]
    assert order[0] == "new" and "applying" in order and order[-1] == "failed"
    assert order.index("applied") < order.index("building")
    assert mail == ["alice.dev@example.org", "mm-list@example.org"]


def test_down_with_nothing_running_says_so(eng):
    from stackbench.jobs import dispatcher_service

    assert dispatcher_service.stop() == "dispatcher: not running"
