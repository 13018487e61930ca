"""The database goes away in the middle of a command (a PostgreSQL restart): the server
really closes the connection, and the CLI answers with one line, not a psycopg traceback."""

from __future__ import annotations

from pathlib import Path

import psycopg
from sqlalchemy import event, func, select

from stackbench import cli

GOOD = Path(__file__).resolve().parents[1] / "data" / "lkp" / "good"


def test_import_with_the_connection_killed_mid_import_ends_in_one_line(eng, db_url, capsys):
    from stackbench.resultsdb.models import Run

    admin_url = db_url.replace("postgresql+psycopg://", "postgresql://")
    seen = {"n": 0}

    def kill_after_some(conn, cursor, statement, params, context, executemany):
        seen["n"] += 1
        if seen["n"] == 6:
            # what a server restart does to every client: the backend is terminated
            pid = conn.connection.dbapi_connection.info.backend_pid
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    event.listen(eng, "before_cursor_execute", kill_after_some)
    try:
        rc = cli.main(["import", "lkp", str(GOOD)])
    finally:
        event.remove(eng, "before_cursor_execute", kill_after_some)
    err = capsys.readouterr().err
    assert seen["n"] >= 6, "the import finished before the connection was killed"
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("stackbench: error: database connection lost or refused (")
    assert "run the command again" in lines[0] and "Traceback" not in err
    # the runs stored before the cut are whole, and running again completes the import
    with eng.connect() as c:
        before = c.scalar(select(func.count()).select_from(Run))
    assert before < 15
    assert cli.main(["import", "lkp", str(GOOD)]) == 0
    assert capsys.readouterr().out.startswith("imported ")
    with eng.connect() as c:
        assert c.scalar(select(func.count()).select_from(Run)) == 15


def test_unreachable_database_is_one_line(monkeypatch, tmp_path, capsys):
    from stackbench.resultsdb import db

    # a port nobody listens on: connection refused
    monkeypatch.setenv("STACKBENCH_DATABASE_URL", "postgresql://u:p@127.0.0.1:9/none")
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path))
    db.reset()
    try:
        rc = cli.main(["import", "lkp", str(GOOD)])
    finally:
        db.reset()
    err = capsys.readouterr().err
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("stackbench: error: database connection lost or refused")
