"""The suite's own database hygiene: a test's database is dropped only after every
connection to it is back, so no connection dies later inside another test."""

from __future__ import annotations

import gc
import logging
import uuid

from conftest import _admin, drop_database
from sqlalchemy import text


def test_a_connection_left_in_a_cycle_is_ended_before_its_database_is_dropped(
    pg_cluster, monkeypatch, caplog
):
    from stackbench.resultsdb import db

    name = "t_" + uuid.uuid4().hex[:12]
    with _admin(pg_cluster) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE stackbench')
    monkeypatch.setenv("STACKBENCH_DATABASE_URL", pg_cluster.url().rsplit("/", 1)[0] + "/" + name)
    db.reset()
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
    assert not [r for r in caplog.records if r.name.startswith("sqlalchemy.pool")]
    with _admin(pg_cluster) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        assert left.fetchone()[0] == 0
