"""Engine and sessions: the embedded cluster by default, ``STACKBENCH_DATABASE_URL`` if set.

The first use in a process starts the embedded cluster (if needed) and checks the schema
with one read of ``alembic_version`` against the head revision named in the migration files
(Alembic itself is only imported to migrate). An empty database is migrated there and then,
so every command works on a fresh home without a separate setup step; a database at another
revision is migrated by ``stackbench migrate`` or ``stackbench up``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from stackbench import config
from stackbench.errors import StackbenchError
from stackbench.resultsdb.embedded import Cluster

# every command imports this module, `stackbench --help` included, and the CLI's
# comparisons go through psycopg alone: SQLAlchemy (140 ms measured), Alembic (360 ms) and
# psycopg (100-200 ms) are imported in the functions that use them

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

_lock = threading.Lock()
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
        psycopg.connect(_plain_url(url), connect_timeout=3).close()
    except psycopg.Error:
        return False
    return True


def connect() -> psycopg.Connection:
    """A psycopg connection in autocommit mode to the configured database; the embedded
    cluster is started when it does not answer (the schema is not checked)."""
    import psycopg

    try:
        url = resolve_url(start=False)
        return psycopg.connect(_plain_url(url), connect_timeout=3, autocommit=True)
    except (psycopg.OperationalError, OSError):  # down, or no embedded cluster yet
        url = resolve_url()
        return psycopg.connect(_plain_url(url), connect_timeout=3, autocommit=True)


def _plain_url(url: str) -> str:
    """``url`` without SQLAlchemy's driver name, as psycopg takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def engine(migrate: bool = True) -> Engine:
    """The process-wide engine for the configured database, checked to be at the head
    revision (``migrate``: an empty database is migrated first)."""
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
    for path in (MIGRATIONS / "versions").glob("*.py"):
        for key, raw in _REVISION.findall(path.read_text()):
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


def in_use() -> int:
    """Connections of this process's engines checked out now: held by a session still open,
    in this thread or another."""
    with _lock:
        return sum(eng.pool.checkedout() for eng in _engines.values())


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
    from sqlalchemy.orm import sessionmaker

    maker = sessionmaker(bind=eng if eng is not None else engine(), expire_on_commit=False)
    with maker() as s, s.begin():
        yield s


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the database went away or cannot be reached (a restart, a
    network cut, a refused connection) rather than that a statement was wrong."""
    import psycopg
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.DBAPIError) and not isinstance(
        exc, (sa_exc.OperationalError, sa_exc.InterfaceError)
    ):
        return False
    return isinstance(
        exc,
        (
            sa_exc.OperationalError,
            sa_exc.InterfaceError,
            psycopg.OperationalError,
            psycopg.InterfaceError,
        ),
    )


def disk_full(exc: BaseException) -> str | None:
    """The line saying the database (or this host) ran out of disk space when ``exc`` says
    so (PostgreSQL's disk_full, or an ENOSPC on the way), else None: a full disk is not a
    lost connection, and whoever fixes it needs to know which it is."""
    import errno

    import psycopg

    cause = getattr(exc, "orig", None) or exc
    text = str(cause)
    full = isinstance(cause, psycopg.errors.DiskFull) or (
        isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT)
    )
    if not full and "No space left on device" not in text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "space" in ln), lines[0] if lines else "disk full")[:200]
