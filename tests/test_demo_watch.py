"""The demo's side of the lifecycle: a watching client hands a series to the dispatcher once
(``lifecycle.hand_over``), attaches to it when run again, and follows the stored state to its
end (``jobs.watch``); a database that stays away ends it with one line."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session
from test_lifecycle_support import git

from stackbench.errors import StackbenchError
from stackbench.jobs import lifecycle, watch
from stackbench.resultsdb.models import Event, Series

pytest_plugins = ["test_lifecycle_support"]


def _store_foreground(eng, work, base) -> int:
    """A series as `stackbench demo` stores it: created by the one front-door code, marked
    as run by its client until the client hands it over."""
    from stackbench.patches.parser import parse_mbox

    data = (git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n").encode()
    with Session(eng) as s, s.begin():
        checked = lifecycle.check(s, tree="tiny", runs=1)
        meta = {"dispatch": {"executor": "foreground"}}
        series = lifecycle.create(s, parse_mbox(data), checked, source="demo", mbox=data, meta=meta)
        return series.id


def _handovers(eng, sid: int) -> int:
    with Session(eng) as s:
        return s.scalar(
            select(func.count())
            .select_from(Event)
            .where(Event.series_id == sid, Event.message.like("handed to the dispatcher%"))
        )


def test_hand_over_once_attach_then_retry_a_failed_series(eng, tree, tmp_path, monkeypatch):
    from stackbench.jobs.dispatch import Dispatcher

    monkeypatch.delenv("STACKBENCH_BUILDBOT_URL", raising=False)
    _repo, work, base = tree
    sid = _store_foreground(eng, work, base)
    with Session(eng) as s:
        assert s.get(Series, sid).meta["dispatch"] == {"executor": "foreground"}

    assert lifecycle.hand_over(eng, sid, source="demo") == "handed-over"
    # a second client (the demo run again) attaches: nothing is handed over twice
    assert lifecycle.hand_over(eng, sid, source="demo") == "attached"
    assert lifecycle.hand_over(eng, sid, source="demo", fresh=True) == "attached"
    assert _handovers(eng, sid) == 1
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "new" and "dispatch" not in x.meta and x.meta["attempts"] == 1

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
        tried = s.get(Series, sid).meta["attempts"]
    assert lifecycle.hand_over(eng, sid, source="demo") == "handed-over"
    with Session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "applied" and x.meta["attempts"] == tried + 1 and x.error == ""
    lifecycle.set_state(eng, sid, "done", "measured")
    assert lifecycle.hand_over(eng, sid, source="demo") == "finished"
    assert lifecycle.hand_over(eng, sid, source="demo", fresh=True) == "handed-over"
    assert _handovers(eng, sid) == 3


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
