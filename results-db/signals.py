"""PostgreSQL's signals between the processes of one database: NOTIFY / LISTEN (a
submission wakes the dispatcher at once) and the session-level advisory lock that lets one
dispatcher work on a database at a time."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session


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
