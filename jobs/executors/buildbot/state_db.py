"""The master's own state database: how Buildbot's engine for a SQLite file is set up.

Buildbot opens its SQLite state with SQLAlchemy's NullPool, a pool choice of SQLAlchemy 0.7
days: every query of its one database thread opened the file, ran its pragmas and closed it
again. With four workers changing rounds at once that was the master's busiest work (a
third of its database thread's samples under py-spy) and its builds queued behind it
(bench/README.md, 2026-11-29). ``url`` names a SQLAlchemy engine plugin in the database URL
(SQLAlchemy's documented ``plugin`` query parameter) that leaves the pool to SQLAlchemy's
default for a file database (a QueuePool since 2.0) and commits without an fsync each.
Other databases are left as Buildbot sets them up.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import CreateEnginePlugin
from sqlalchemy.engine.url import URL, make_url
from sqlalchemy.pool import NullPool

PLUGIN = "stackbench_master_state"


def url(db_url: str) -> str:
    """The master's database URL as Buildbot should open it: a SQLite file through the plugin."""
    from sqlalchemy.dialects import plugins

    u = make_url(db_url)
    if not u.drivername.startswith("sqlite") or not u.database or u.database == ":memory:":
        return db_url
    plugins.register(PLUGIN, __name__, "MasterState")  # a reconfig registers it again: harmless
    return u.update_query_dict({"plugin": PLUGIN}).render_as_string(hide_password=False)


class MasterState(CreateEnginePlugin):
    """SQLAlchemy's default pool for a file database, and WAL commits without an fsync each.

    Buildbot commits every step's start, log chunk and end on its own: at 4 ms an fsync on
    the build host, about 0.4 s of every round's build. synchronous=NORMAL in WAL mode (which
    Buildbot sets) survives the master's crash; a power cut may lose its last commits, which
    the dispatcher's reconciliation and the runs' idempotency keys already survive (a lost
    build runs again).
    """

    def __init__(self, url: URL, kwargs: dict[str, Any]) -> None:
        super().__init__(url, kwargs)
        if kwargs.get("poolclass") is NullPool:
            del kwargs["poolclass"]

    def update_url(self, url: URL) -> URL:
        return url.difference_update_query(["plugin"])

    def engine_created(self, engine: Any) -> None:
        from sqlalchemy import event

        event.listen(engine, "connect", _relaxed)


def _relaxed(conn: Any, _record: Any) -> None:
    conn.execute("pragma synchronous = normal")
