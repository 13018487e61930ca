"""Engine and sessions: the embedded cluster by default, ``STACKBENCH_DATABASE_URL`` if set.

The first use in a process starts the embedded cluster (if needed) and checks the schema
with one read of ``alembic_version`` against the head revision named in the migration files
(Alembic itself is only imported to migrate). An empty database is migrated there and then,
so every command works on a fresh home without a separate setup step; a database at another
revision is migrated by ``stackbench migrate`` or ``stackbench up``.
"""

from __future__ import annotations

import _thread
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stackbench import config
from stackbench.errors import StackbenchError

TYPE_CHECKING = False  # typing's, without importing typing (2 ms of a cached compare)
if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

# _thread's lock: threading itself is 0.8 ms of a command that only reads the schema's head
_lock = _thread.allocate_lock()
_engines: dict[str, Engine] = {}
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# an arbitrary constant: the advisory lock that serialises migrations across processes
_MIGRATE_LOCK = 0x5B5B0001


def resolve_url(start: bool = True) -> str:
    url = config.database_url()
    if url:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        return url
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    if start and not (cluster.exists and _accepts(cluster.url())):
        cluster.start()
        cluster.ensure_database()
    return cluster.url()


def _accepts(url: str) -> bool:
    """Whether the database answers: then there is nothing to start or create (one
    connection, instead of pg_ctl as the cluster's user and a visit to 'postgres')."""
    import psycopg

    try:
        psycopg.connect(url.replace("+psycopg", "", 1), connect_timeout=3).close()
    except psycopg.Error:
        return False
    return True


def engine(migrate: bool = True) -> Engine:
    """The process-wide engine for the configured database, checked to be at the head
    revision (``migrate``: an empty database is migrated first)."""
    # SQLAlchemy is imported by the commands that reach the database, not by the module:
    # head_revision() is also read by the cached-comparison path, which does without it
    from sqlalchemy import create_engine

    url = resolve_url()
    with _lock:
        eng = _engines.get(url)
        if eng is None:
            eng = create_engine(url, pool_pre_ping=True, future=True)
            if migrate:
                ensure_schema(eng)
            _engines[url] = eng
        return eng


_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(.+)$", re.M)
_QUOTED = re.compile(r"[\"']([^\"']+)[\"']")
_head: list[str] = []


def head_revision() -> str:
    """The newest migration's revision, read from the migration files (the one no other
    file names as its ``down_revision``), so checking a database needs no Alembic."""
    if _head:
        return _head[0]
    revisions: set[str] = set()
    parents: set[str] = set()
    with os.scandir(MIGRATIONS / "versions") as entries:  # pathlib's glob: 0.2 ms more
        paths = [e.path for e in entries if e.name.endswith(".py")]
    for path in paths:
        with open(path) as fh:
            for key, raw in _REVISION.findall(fh.read()):
                (revisions if key == "revision" else parents).update(_QUOTED.findall(raw))
    heads = sorted(revisions - parents)
    if len(heads) != 1:
        raise StackbenchError(f"the migrations in {MIGRATIONS} have {len(heads)} heads: {heads}")
    _head.append(heads[0])
    return heads[0]


def ensure_schema(eng: Engine) -> None:
    """Check that the database is at the head revision: migrate an empty (never migrated)
    database, and ask for ``stackbench migrate`` when it is at another revision."""
    rev = current_revision(eng)
    head = head_revision()
    if rev == head:
        return
    if rev is None:
        upgrade(eng)
        return
    raise StackbenchError(
        f"the database schema is at revision {rev}, this stackbench needs {head}: "
        "run 'stackbench migrate' (or 'stackbench up')"
    )


def reset() -> None:
    """Forget cached engines (tests switch homes and databases)."""
    with _lock:
        for eng in _engines.values():
            eng.dispose()
        _engines.clear()


def alembic_config(eng: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = eng
    return cfg


def upgrade(eng: Engine, revision: str = "head") -> None:
    from alembic import command
    from sqlalchemy import text

    with eng.begin() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATE_LOCK})
        try:
            cfg = alembic_config(eng)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATE_LOCK})


def current_revision(eng: Engine) -> str | None:
    """The database's revision; None when it was never migrated (no ``alembic_version``)."""
    from sqlalchemy import text

    with eng.connect() as conn:
        # to_regclass: no error (and no aborted transaction) when the table is missing
        if conn.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


@contextmanager
def session(eng: Engine | None = None) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on error. On ``eng``
    when given (a caller that was handed an engine: the web app's, a test's), else on the
    configured database. Rows stay readable after it ends (no expiry on commit), so the
    functions that read them can return them."""
    from sqlalchemy.orm import sessionmaker  # the ORM costs start-up: only where it is used

    maker = sessionmaker(bind=eng if eng is not None else engine(), expire_on_commit=False)
    with maker() as s, s.begin():
        yield s
