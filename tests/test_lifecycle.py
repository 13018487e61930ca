"""The series lifecycle without Buildbot: one validation for every front door, and the
dispatcher service running a handed-over series in its own process when no master is
configured, to ``failed`` with the reason when a kernel does not build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session
from test_lifecycle_support import finished, git, wait_for

from stackbench.resultsdb import series_runs_store
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


def test_resubmission_with_another_cover_letter_says_it_is_the_same_series(
    eng, tree, tmp_path, capsys
):
    """Same Message-ID and patches, another cover letter: the stored series answers, and the
    CLI says so instead of "stored / handed to the dispatcher"."""
    from stackbench.cli import main

    _repo, work, base = tree
    mbox = git(work, "format-patch", "--stdout", "--cover-letter", "--thread", f"{base}..HEAD")
    first, second = tmp_path / "v1.mbox", tmp_path / "v1-again.mbox"
    first.write_text(mbox.replace("*** BLURB HERE ***", "Why this helps.") + "\n")
    second.write_text(mbox.replace("*** BLURB HERE ***", "Why this helps, reworded.") + "\n")
    assert main(["submit", "--mbox", str(first), "--tree", "tiny", "--no-wait"]) == 0
    out = capsys.readouterr().out
    assert "stored" in out and "handed to the dispatcher" in out
    with Session(eng) as s:
        (sid,) = s.scalars(select(Series.id)).all()
    assert main(["submit", "--mbox", str(second), "--tree", "tiny", "--no-wait"]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"series {sid} is already stored: same Message-ID and patches [new]; this mbox's "
        "cover letter differs: the stored one is kept\n"
    )
    with Session(eng) as s:
        assert _count(eng) == 1
        assert "Why this helps." in s.get(Series, sid).cover_letter
    # the very same mbox again says the same, without a difference to report
    assert main(["submit", "--mbox", str(first), "--tree", "tiny", "--no-wait"]) == 0
    assert capsys.readouterr().out == (
        f"series {sid} is already stored: same Message-ID and patches [new]\n"
    )


def test_dispatcher_without_buildbot_runs_the_series_itself(
    eng, tree, tmp_path, monkeypatch, capsys
):
    """No master configured: the dispatcher runs the in-process pipeline. The tiny tree is
    no kernel, so every build fails: the series ends failed, each kernel saying why, and
    the report mail is queued."""
    from stackbench.cli import main
    from stackbench.jobs.driver import dispatcher_service

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
    # one hand-over (the submission), taken by the in-process executor, ended with the series
    with Session(eng) as s:
        (attempt,) = series_runs_store.attempts(s, sid)
    assert (attempt.number, attempt.source, attempt.executor) == (1, "mbox", "in-process")
    assert attempt.outcome == "failed" and attempt.ended is not None
    assert "dispatch" not in x.meta and "attempts" not in x.meta
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
    # an anonymous submission: the list alone, never the From: of the mails (alice.dev@)
    assert mail == ["mm-list@example.org"]


def test_down_with_nothing_running_says_so(eng):
    from stackbench.jobs.driver import dispatcher_service

    assert dispatcher_service.stop() == "dispatcher: not running"


def _dispatch_until(eng, check, master=None, timeout: float = 120.0):
    """Run a real Dispatcher (its loop and its local worker) until ``check()`` holds."""
    import threading

    from stackbench.jobs.driver.dispatch import Dispatcher

    d = Dispatcher(eng, master=master)
    t = threading.Thread(target=d.run, kwargs={"poll": 0.3}, daemon=True)
    t.start()
    try:
        return wait_for("the dispatcher", check, timeout=timeout, every=0.3)
    finally:
        d.stop.set()
        t.join(10)


def _submit(tmp_path, work, base, *extra) -> int:
    from stackbench.cli import main

    mbox = tmp_path / "series.mbox"
    mbox.write_text(git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n")
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--no-wait", *extra]) == 0
    with Session(db_engine()) as s:
        return s.scalars(select(Series.id).order_by(Series.id.desc())).first()


def db_engine():
    from stackbench.resultsdb import db

    return db.engine()


def test_series_that_does_not_apply_ends_apply_failed_with_the_patch(eng, tree, tmp_path):
    repo, work, base = tree
    # the tree moved on: the file the patches touch was rewritten
    (repo / "mm" / "compaction.c").write_text("long rewritten;\n")
    git(repo, "commit", "-q", "-am", "rewrite compaction")
    git(repo, "tag", "v1")
    sid = _submit(tmp_path, work, base, "--base", "v1")
    _dispatch_until(eng, lambda: _state(eng, sid) == "apply-failed", master=lambda: None)
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.error.startswith("patch 1/2 'mm/compaction: step 1' does not apply")
        assert [p.state for p in x.patches] == ["apply-failed", "skipped"]
        (attempt,) = series_runs_store.attempts(s, sid)
        # nothing was handed to an executor; the attempt ended with the apply
        assert (attempt.executor, attempt.outcome) == ("", "apply-failed")


def test_unreachable_buildbot_keeps_the_series_waiting_and_says_why(eng, tree, tmp_path):
    from stackbench.jobs.executors.buildbot.client import Master

    _repo, work, base = tree
    sid = _submit(tmp_path, work, base)

    def waiting():
        with eng.connect() as conn:
            return conn.execute(
                text(
                    "SELECT message FROM event WHERE series_id = :s"
                    " AND message LIKE 'Buildbot unreachable since%'"
                ),
                {"s": sid},
            ).scalar()

    # port 1 on loopback: nothing listens there
    msg = _dispatch_until(eng, waiting, master=lambda: Master("http://127.0.0.1:1/"))
    assert msg.endswith(", retrying")
    with Session(eng) as s:
        x = s.get(Series, sid)
        # the page says it (the series' host fault), not only the dispatcher's log
        fault = series_runs_store.current(s, sid).host_fault
        assert (fault or {}).get("error") == msg
        # applied and left for the master: not run elsewhere, not failed
        assert x.state == "applied"
        assert series_runs_store.executor(s, sid) == ""


def _state(eng, sid: int) -> str:
    with Session(eng) as s:
        return s.get(Series, sid).state


def test_pushed_commits_that_are_gone_fail_the_series_with_the_reason(eng, tree, tmp_path):
    from stackbench.jobs.driver import intake

    _repo, work, base = tree
    head = git(work, "rev-parse", "HEAD")
    gone = tmp_path / "intake-that-was-removed.git"
    pushed = intake.Pushed(repo=Path(work), ref=f"refs/for/tiny/{base}", new=head)
    with Session(eng) as s, s.begin():
        sub = intake.Submission(
            source="push", pushed=pushed, options={"jobs": ["thpscale"], "runs": 1}
        )
        x = intake.take(s, sub).series
        # the intake repository is removed after the push
        x.push_repo = str(gone)
        sid = x.id
    _dispatch_until(eng, lambda: _state(eng, sid) == "failed", master=lambda: None)
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.error == f"fetch failed: pushed commits of series {sid} are gone: {gone}"
