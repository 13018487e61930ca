"""PostgreSQL's signals between the processes of one database: NOTIFY / LISTEN (a
submission wakes the dispatcher at once) and the session-level advisory lock that lets one
dispatcher work on a database at a time."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

DISPATCHER_LOCK = 0x5B_D15_9A7  # pg_advisory_lock key: one dispatcher per database


def notify(s: Session, channel: str) -> None:
    """NOTIFY the channel; PostgreSQL delivers it when the transaction commits."""
    s.execute(text(f"NOTIFY {channel}"))


def listen(url: str, channel: str) -> Any:
    """A psycopg connection of its own (autocommit, outside any pool) LISTENing on the
    channel: its ``notifies()`` wait for the next NOTIFY."""
    import psycopg

    raw = url.replace("postgresql+psycopg://", "postgresql://", 1)
    conn = psycopg.connect(raw, autocommit=True)
    conn.execute(f"LISTEN {channel}")
    return conn


def try_lock(conn: Connection, key: int) -> bool:
    """Take the session-level advisory lock KEY on the connection when free (it is held
    until released or the connection closes); whether it was taken."""
    got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
    conn.commit()
    return bool(got)


def lock_held(s: Session, key: int) -> bool:
    """Whether some session of this database holds the advisory lock KEY (a dispatcher at
    work holds its lock on a connection it keeps open, so the lock lives and dies with it)."""
    # pg_advisory_lock(bigint) shows as classid = high 32 bits, objid = low, objsubid = 1
    held = s.execute(
        text(
            "SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid = :hi AND l.objid = :lo AND d.datname = current_database()"
        ),
        {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
    ).first()
    return held is not None
