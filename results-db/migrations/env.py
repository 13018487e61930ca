"""Alembic environment: stackbench passes the connection in ``config.attributes``."""

from alembic import context
from sqlalchemy import create_engine

from stackbench.resultsdb.models import Base

cfg = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = cfg.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = cfg.attributes.get("engine") or create_engine(cfg.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    context.configure(url=cfg.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
