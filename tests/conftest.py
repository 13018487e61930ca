"""Shared fixtures: one real PostgreSQL cluster per test session (Debian's initdb/pg_ctl in a
temporary home) and a fresh database per test, cloned from a migrated template."""

from __future__ import annotations

import gc
import os
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
# the test files live in folders named for the rooms of the tree (tests/README.md) and some
# import another file's fixtures by bare module name (``from test_buildbot_fanout import
# start_web``): pytest puts only a test file's own folder on sys.path, so every room's folder
# goes there up front, whatever file or folder a run starts from
sys.path[:0] = sorted(
    {str(p.parent) for p in Path(__file__).parent.rglob("test_*.py")} - set(sys.path)
)
# the shared helpers (tests/helpers/) assert as test files do, and say what differed
pytest.register_assert_rewrite("helpers")
# the fault makers the suite shares with bench/chaos.py (testkit/faultkit.py says why)
sys.path.insert(0, str(ROOT / "testkit"))
# a git worktree elsewhere names the shared folder with STACKBENCH_SHARED
SHARED = Path(os.environ.get("STACKBENCH_SHARED") or ROOT.parent / "shared")
# an evidence boot adds a boot per kernel to every series run here; the coverage tests
# (test_coverage_*.py) ask for it, the others measure without it
os.environ.setdefault("STACKBENCH_EVIDENCE_BOOT", "0")
FIXTURES = SHARED / "fixtures"


def shared_fixtures(*parts: str) -> Path:
    """A path under ../shared/fixtures, skipping the test (with the reason) when absent."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"conformance data not present: {path} (../shared is not beside the project)")
    return path


LONG_ENV = "STACKBENCH_LONG_TESTS"


def pytest_collection_modifyitems(config, items):
    # scripts/test hands each file whole to one of several pytest-xdist workers, in this
    # order: the files with slow tests go first, so the run does not end on one worker
    # finishing a long file alone while the others idle (the sort is stable)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
    # CI runs on a fresh machine with no kernel cache: each extra kernel config there is a
    # cold build of about 10 minutes, so these tests run where the time was asked for
    if os.environ.get(LONG_ENV):
        return
    skip = pytest.mark.skip(
        reason=f"long: a kernel config of its own or over ten minutes (set {LONG_ENV}=1)"
    )
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory):
    from stackbench.resultsdb import db
    from stackbench.resultsdb.embedded import Cluster, destroy

    home = tmp_path_factory.mktemp("stackbench-home")
    cluster = Cluster(home)
    cluster.start()
    cluster.ensure_database()
    # migrate the template database once; each test clones it
    old = os.environ.get("STACKBENCH_DATABASE_URL")
    os.environ["STACKBENCH_DATABASE_URL"] = cluster.url()
    try:
        db.reset()
        db.engine()
    finally:
        db.reset()
        if old is None:
            os.environ.pop("STACKBENCH_DATABASE_URL", None)
        else:
            os.environ["STACKBENCH_DATABASE_URL"] = old
    yield cluster
    destroy(cluster)


def _admin(cluster):
    port, password = cluster._secret()
    return psycopg.connect(
        host="127.0.0.1",
        port=port,
        user="stackbench",
        password=password,
        dbname="postgres",
        autocommit=True,
    )


@pytest.fixture
def db_url(pg_cluster, monkeypatch, tmp_path):
    """A freshly migrated, empty database; STACKBENCH_DATABASE_URL points at it."""
    from stackbench.resultsdb import db

    name = "t_" + uuid.uuid4().hex[:12]
    with _admin(pg_cluster) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE stackbench')
    url = pg_cluster.url().rsplit("/", 1)[0] + "/" + name
    monkeypatch.setenv("STACKBENCH_DATABASE_URL", url)
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    db.reset()
    yield url
    drop_database(pg_cluster, name)


def drop_database(cluster, name: str, wait: float = 10.0) -> None:
    """Drop a test's database once every connection to it is back (or ``wait`` s passed).

    A connection still out when its database is dropped is rolled back later, and fails:
    one a test left in a reference cycle (a kept traceback) when the garbage collector finds
    it, one a web server's request thread holds when the request ends. SQLAlchemy's pool
    logs that failure with a traceback, and Python 3.11 draws the traceback's carets with
    ``ast.parse``. Inside another ``ast.parse`` (Werkzeug compiling a URL rule in the next
    test, pytest rewriting a module) CPython 3.11 then fails the outer one with "AST
    constructor recursion depth mismatch" (python/cpython#106905). So the cycles are
    collected and the threads waited for here, while the database is still there."""
    from stackbench.resultsdb import db

    deadline = time.monotonic() + wait
    gc.collect()
    while db.in_use() and time.monotonic() < deadline:
        time.sleep(0.05)
        gc.collect()
    db.reset()
    with _admin(cluster) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def eng(db_url):
    from stackbench.resultsdb import db

    return db.engine()


@pytest.fixture
def refuse_writes(eng):
    """``refuse_writes(message, *tables)``: every INSERT and UPDATE on ``tables`` fails with
    ``message``, as in a database that is read-only to stackbench."""
    from sqlalchemy import text

    def refuse(message: str, *tables: str) -> None:
        with eng.begin() as c:
            c.execute(
                text(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                    f"$$BEGIN RAISE EXCEPTION '{message}'; END$$"
                )
            )
            for table in tables:
                c.execute(
                    text(
                        f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table} "
                        "FOR EACH ROW EXECUTE FUNCTION refuse()"
                    )
                )

    return refuse
