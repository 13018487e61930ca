"""Engine and sessions: the embedded cluster by default, ``STACKBENCH_DATABASE_URL`` if set.

The first use in a process starts the embedded cluster (if needed) and applies migrations, so
every command works on a fresh home without a separate setup step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from stackbench import config

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
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    if start:
        cluster.start()
        cluster.ensure_database()
    return cluster.url()


def engine(migrate: bool = True) -> Engine:
    """The process-wide engine for the configured database, migrated to head."""
    url = resolve_url()
    with _lock:
        eng = _engines.get(url)
        if eng is None:
            eng = create_engine(url, pool_pre_ping=True, future=True)
            if migrate:
                upgrade(eng)
            _engines[url] = eng
        return eng


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

    with eng.begin() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATE_LOCK})
        try:
            cfg = alembic_config(eng)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATE_LOCK})


def current_revision(eng: Engine) -> str | None:
    with eng.connect() as conn:
        try:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except Exception:
            return None


@contextmanager
def session() -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on error."""
    maker = sessionmaker(bind=engine(), expire_on_commit=False)
    with maker() as s, s.begin():
        yield s
