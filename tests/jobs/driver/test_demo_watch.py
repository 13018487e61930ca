"""The demo's side of the lifecycle: a watching client hands a series to the dispatcher once
(``lifecycle.hand_over``), attaches to it when run again, and follows the stored state to its
end (``jobs.driver.watch``); a database that stays away ends it with one line."""

from __future__ import annotations

import threading

import pytest
from helpers.intake import submit_series
from helpers.lifecycle import git
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
from stackbench.jobs.driver import intake, lifecycle, watch
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.models import Event, Series

pytest_plugins = ["helpers.lifecycle"]


def _store_foreground(eng, work, base) -> int:
    """A series as `stackbench demo` stores it: created by the one front-door code, marked
    as run by its client until the client hands it over."""
    data = (git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n").encode()
    return submit_series(eng, data, tree="tiny", source="demo", runner=intake.WATCHER, runs=1)


def _measured(eng, sid: int) -> None:
    """The series run to ``done`` through the moves a run makes (lifecycle.MOVES)."""
    path = ["applying", "applied", "building", "done"]
    with Session(eng) as s:
        now = s.get(Series, sid).state
    for state in path[path.index(now) + 1 if now in path else 0 :]:
        lifecycle.set_state(eng, sid, state, "measured" if state == "done" else state)


def _attempts(s, sid: int) -> list[tuple[int, str, str, str]]:
    return [(a.number, a.source, a.executor, a.outcome) for a in series_runs_store.attempts(s, sid)]


def _handovers(eng, sid: int) -> int:
    with Session(eng) as s:
        return s.scalar(
            select(func.count())
            .select_from(Event)
            .where(Event.series_id == sid, Event.message.like("handed to the dispatcher%"))
        )


def test_hand_over_once_attach_then_retry_a_failed_series(eng, tree, tmp_path, monkeypatch):
    from stackbench.jobs.driver.dispatch import Dispatcher

    monkeypatch.delenv("STACKBENCH_BUILDBOT_URL", raising=False)
    _repo, work, base = tree
    sid = _store_foreground(eng, work, base)
    with Session(eng) as s:
        # its plan's attempt waits for the client: the dispatcher leaves it alone
        assert [a.executor for a in series_runs_store.attempts(s, sid)] == ["waiting"]
        assert series_runs_store.active(s, lifecycle.PENDING) == []

    assert lifecycle.hand_over(eng, sid, source="demo") == "handed-over"
    # a second client (the demo run again) attaches: nothing is handed over twice
    assert lifecycle.hand_over(eng, sid, source="demo") == "attached"
    assert lifecycle.hand_over(eng, sid, source="demo", fresh=True) == "attached"
    assert _handovers(eng, sid) == 1
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "new" and "attempts" not in x.meta
        assert _attempts(s, sid) == [(1, "demo", "", "")]

    # the dispatcher (no master: its in-process executor) runs it; the client only watches.
    # The tiny tree is no kernel, so every build fails and the series ends failed.
    d = Dispatcher(eng, master=lambda: None)
    t = threading.Thread(target=d.run, kwargs={"poll": 0.3}, daemon=True)
    t.start()
    lines: list[str] = []
    try:
        state = watch.follow(eng, sid, say=lines.append, poll=0.2, since_event=0)
    finally:
        d.stop.set()
        t.join(20)
    assert state == "failed"
    text = "\n".join(lines)
    assert "handed to the dispatcher via demo (attempt 1)" in text
    # the state's event, not a progress line: the builds fail faster than one look
    assert "building 3 kernels" in text and "build-failed" in text

    # a failed series is handed over again, under a new attempt (a new submission key)
    with Session(eng) as s:
        # the dispatcher took the one attempt and it ended with the series
        assert _attempts(s, sid) == [(1, "demo", "in-process", "failed")]
    assert lifecycle.hand_over(eng, sid, source="demo") == "handed-over"
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "applied" and x.error == ""
        assert _attempts(s, sid)[1:] == [(2, "demo", "", "")]
    _measured(eng, sid)
    assert lifecycle.hand_over(eng, sid, source="demo") == "finished"
    assert lifecycle.hand_over(eng, sid, source="demo", fresh=True) == "handed-over"
    assert _handovers(eng, sid) == 3
    with Session(eng) as s:  # an attempt row per hand-over, each ended with its outcome
        assert _attempts(s, sid) == [
            (1, "demo", "in-process", "failed"),
            (2, "demo", "", "done"),
            (3, "demo", "", ""),
        ]


def test_buildbot_submit_hands_the_series_over_like_every_other_door(eng, tree, capsys):
    """``stackbench buildbot submit`` no longer talks to the master itself: it hands the
    series to the dispatcher (``lifecycle.hand_over``), which submits, plans rounds and
    reports; its jobs and runs replace the series' own; bad input is one line."""
    from stackbench.cli import main

    _repo, work, base = tree
    sid = _store_foreground(eng, work, base)
    _measured(eng, sid)
    assert main(["buildbot", "submit", str(sid), "--runs", "4", "--job", "thpscale"]) == 0
    out = capsys.readouterr().out
    assert f"series {sid} handed to the dispatcher" in out
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "new" and "dispatch" not in x.meta  # the dispatcher's to take
        attempts = series_runs_store.attempts(s, sid)
        assert (attempts[-1].runs, attempts[-1].jobs) == (4, ["thpscale"])
        assert [(a.source, a.ended) for a in attempts][-1] == ("buildbot submit", None)
    assert _handovers(eng, sid) == 1
    # still pending: the second submit attaches, nothing is handed over twice
    assert main(["buildbot", "submit", str(sid)]) == 0
    assert "still running" in capsys.readouterr().out
    assert _handovers(eng, sid) == 1
    for argv, what in ((["buildbot", "submit", str(sid + 99)], f"no series {sid + 99}"),
                       (["buildbot", "submit", str(sid), "--runs", "0"], "runs")):  # fmt: skip
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert what in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_watch_gives_up_on_a_database_that_stays_away_with_one_line():
    # port 1 on loopback: nothing listens, every look fails like a database restart does
    gone = create_engine("postgresql+psycopg://x@127.0.0.1:1/x", pool_pre_ping=False)
    lines: list[str] = []
    with pytest.raises(StackbenchError) as err:
        watch.follow(gone, 1, say=lines.append, since_event=0, budget_s=0.5)
    assert "\n" not in str(err.value) and "run the same command again to attach" in str(err.value)
    assert lines and lines[0].startswith("database not reachable; retrying in 1 s")


def test_eta_paces_a_phase_by_its_finished_units():
    eta = watch.PhaseEta()
    assert eta.update("building", "0/4", 0.0) == ""
    assert eta.update("building", "1/4", 300.0) == "ETA 15m00s"
    # later kernels are incremental builds: the pace after the first decides
    assert eta.update("building", "2/4", 310.0) == "ETA 20s"
    assert eta.update("running", "0/4", 320.0) == ""
    # a round of 4 boots is stored at once: its pace is its time, not the 0 s between them
    assert eta.update("running", "0/12", 320.0) == ""
    assert eta.update("running", "4/12", 440.0) == "ETA 4m00s"
    assert eta.update("running", "4/12", 500.0) == "ETA 4m00s"
    assert eta.update("running", "8/12", 560.0) == "ETA 2m00s"
