"""How the dispatcher takes the master's news (its reporter's NOTIFYs, on a real
PostgreSQL LISTEN connection): news of builds starting waits for the rest of its wave
before the dispatcher looks; a build's end, or any other news, is looked at at once."""

from __future__ import annotations

import threading
import time

from sqlalchemy import text

from stackbench.jobs.driver import dispatch, lifecycle
from stackbench.resultsdb import signals


def _send(eng, *payloads: str, after: float = 0.0, then: tuple[str, ...] = ()) -> threading.Thread:
    """NOTIFY ``payloads`` ``after`` seconds from now, then (0.5 s later) ``then``: one
    thread, so the order holds however slow the host is."""

    def go() -> None:
        time.sleep(after)
        for batch in (payloads, then):
            with eng.begin() as c:
                for p in batch:
                    c.execute(text("SELECT pg_notify(:c, :p)"), {"c": lifecycle.CHANNEL, "p": p})
            time.sleep(0.5)

    t = threading.Thread(target=go)
    t.start()
    return t


def _dispatcher_listening(eng, db_url):
    return dispatch.Dispatcher(eng, master=lambda: None), signals.listen(db_url, lifecycle.CHANNEL)


def test_a_start_waits_for_its_wave_until_an_end_comes(eng, db_url, monkeypatch):
    # far longer than the test: only the end can stop the wait in time
    monkeypatch.setattr(dispatch, "STARTS_GATHER_S", 60.0)
    d, conn = _dispatcher_listening(eng, db_url)
    senders: list[threading.Thread] = []
    try:
        _send(eng, "build 5 started").join()
        d._wait_for_news(conn, 10.0)
        assert d._news == {5}
        senders.append(_send(eng, "build 6 started", "build 7 started", after=0.2,
                             then=("build 6 finished",)))  # fmt: skip
        began = time.monotonic()
        d._let_starts_gather(conn)
        assert time.monotonic() - began < 30
        assert d._news == {5, 6, 7}
        assert d._urgent is False  # the next wait starts afresh
    finally:
        for t in senders:
            t.join()
        conn.close()


def test_starts_alone_are_looked_at_after_the_gathering_time(eng, db_url, monkeypatch):
    monkeypatch.setattr(dispatch, "STARTS_GATHER_S", 0.5)
    d, conn = _dispatcher_listening(eng, db_url)
    try:
        d._note_news("build 1 started")
        _send(eng, "build 2 started", after=0.1).join()
        d._let_starts_gather(conn)  # returns: nothing urgent came, the time is up
        assert d._news == {1, 2}
    finally:
        conn.close()


def test_anything_but_a_start_is_looked_at_at_once(eng, db_url, monkeypatch):
    monkeypatch.setattr(dispatch, "STARTS_GATHER_S", 60.0)
    d, conn = _dispatcher_listening(eng, db_url)
    try:
        for payload in ("build 3 finished", "series 4", ""):
            d._news, d._urgent = set(), False
            d._note_news("build 2 started")
            d._note_news(payload)
            began = time.monotonic()
            d._let_starts_gather(conn)
            assert time.monotonic() - began < 30, payload
            assert d._urgent is False
        # no news at all (the poll's timeout): no wait either
        d._news = set()
        began = time.monotonic()
        d._let_starts_gather(conn)
        assert time.monotonic() - began < 30
    finally:
        conn.close()
