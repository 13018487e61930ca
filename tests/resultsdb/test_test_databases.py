"""The suite's own database hygiene: a test's database is dropped only after every
connection to it is back, so no connection dies later inside another test."""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid

from conftest import _admin, drop_database
from sqlalchemy import text


def _database(pg_cluster, monkeypatch) -> str:
    from stackbench.resultsdb import db

    name = "t_" + uuid.uuid4().hex[:12]
    with _admin(pg_cluster) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE stackbench')
    monkeypatch.setenv("STACKBENCH_DATABASE_URL", pg_cluster.url().rsplit("/", 1)[0] + "/" + name)
    db.reset()
    return name


def _gone(pg_cluster, name: str) -> bool:
    with _admin(pg_cluster) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        return left.fetchone()[0] == 0


def _pool_errors(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("sqlalchemy.pool")]


def test_a_connection_left_in_a_cycle_is_ended_before_its_database_is_dropped(
    pg_cluster, monkeypatch, caplog
):
    from stackbench.resultsdb import db

    name = _database(pg_cluster, monkeypatch)
    gc.disable()
    try:
        # a checked-out connection only a reference cycle holds, as a kept traceback does
        holder = {"connection": db.engine().connect()}
        holder["connection"].execute(text("SELECT 1"))
        holder["self"] = holder
        del holder
        caplog.set_level(logging.ERROR, logger="sqlalchemy.pool")
        drop_database(pg_cluster, name)
        gc.collect()
    finally:
        gc.enable()
    # left to a later collection, the connection would be rolled back on a dropped
    # database, and the pool would log that failure with a traceback
    assert not _pool_errors(caplog)
    assert _gone(pg_cluster, name)


def test_a_request_thread_still_in_a_session_is_waited_for(pg_cluster, monkeypatch, caplog):
    """A web server's request thread that outlives its test (a worker's upload still being
    stored) gives its connection back before the drop, not after it."""
    from stackbench.resultsdb import db

    name = _database(pg_cluster, monkeypatch)
    started, returned = threading.Event(), []

    def request() -> None:
        with db.session() as s:
            s.execute(text("SELECT 1"))
            started.set()
            time.sleep(1.0)
        returned.append(time.monotonic())

    thread = threading.Thread(target=request)
    thread.start()
    assert started.wait(10)
    caplog.set_level(logging.ERROR, logger="sqlalchemy.pool")
    drop_database(pg_cluster, name)
    dropped = time.monotonic()
    thread.join(10)
    assert returned and returned[0] <= dropped
    assert not _pool_errors(caplog)
    assert _gone(pg_cluster, name)
