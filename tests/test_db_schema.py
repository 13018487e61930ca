"""The schema check every command makes: a version read against the migrations' head, a
migration only for a database never migrated, and a clear error (nothing changed) otherwise."""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy import create_engine, text

from stackbench.resultsdb import db


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stackbench", *args], capture_output=True, text=True, timeout=120
    )


def test_head_revision_is_alembics_head():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config(None))
    assert db.head_revision() == script.get_current_head()


def test_empty_database_is_migrated_on_first_use(db_url):
    with create_engine(db_url.replace("postgresql://", "postgresql+psycopg://")).begin() as c:
        c.execute(text("DROP SCHEMA public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    db.reset()
    eng = db.engine()
    assert db.current_revision(eng) == db.head_revision()
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_other_revision_is_refused_until_migrate(eng, db_url):
    from alembic import command

    # a database left at the first revision by an older stackbench: every later migration
    # undone for real, so that `migrate` has them all to apply
    command.downgrade(db.alembic_config(eng), "0001")
    db.reset()
    res = _cli("compare", "nothing")
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f"stackbench: error: the database schema is at revision 0001, this stackbench needs "
        f"{db.head_revision()}: run 'stackbench migrate' (or 'stackbench up')"
    )
    assert "Traceback" not in res.stderr
    with eng.connect() as c:  # nothing was changed behind the user's back
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0001"
    res = _cli("migrate")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"database at revision {db.head_revision()}"
    with eng.connect() as c:
        assert c.execute(text("SELECT to_regclass('ix_run_build')")).scalar() == "ix_run_build"
    res = _cli("compare", "nothing")
    assert res.returncode == 1
    assert "unknown kernel 'nothing'" in res.stderr
