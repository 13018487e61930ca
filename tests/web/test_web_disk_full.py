"""A database whose disk is full (issue 27): the web answered 503 "the database is
unavailable right now" while PostgreSQL said "No space left on device". The table a sign-in
writes is moved to a tablespace on a small tmpfs that is then filled, for real."""

from __future__ import annotations

import subprocess

import psycopg
import pytest
from helpers.web import add_user, csrf_of

pytest_plugins = ["helpers.web"]


@pytest.fixture
def full_disk(eng, db_url):
    import tempfile
    from pathlib import Path

    from stackbench.resultsdb.embedded import SERVICE_USER, Cluster

    # not under tmp_path: the server's account must reach it
    where = Path(tempfile.mkdtemp(prefix="sb-tiny-disk-"))
    where.chmod(0o755)
    mount = ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        where.rmdir()
        pytest.skip("needs a mount namespace that allows tmpfs mounts (root)")
    admin_url = db_url.replace("postgresql+psycopg://", "postgresql://")
    space = "t_full_" + db_url.rsplit("/", 1)[1]
    try:
        if Cluster.as_root.fget(None):  # the server runs as its own account
            subprocess.run(["chown", f"{SERVICE_USER}:", str(where)], check=True)
        with psycopg.connect(admin_url, autocommit=True) as c:
            c.execute(f"CREATE TABLESPACE {space} LOCATION '{where}'")
            c.execute(f"ALTER TABLE login_failure SET TABLESPACE {space}")
            c.execute(f"CREATE TABLE filler (b text) TABLESPACE {space}")
            with pytest.raises(psycopg.errors.DiskFull):
                for _ in range(1000):  # incompressible rows until the disk is full
                    c.execute("INSERT INTO filler SELECT string_agg(md5(random()::text), '') "
                              "FROM generate_series(1, 200)")  # fmt: skip
        yield
    finally:
        with psycopg.connect(admin_url, autocommit=True) as c:
            c.execute("DROP TABLE IF EXISTS filler")
            c.execute("ALTER TABLE login_failure SET TABLESPACE pg_default")
            c.execute(f"DROP TABLESPACE IF EXISTS {space}")
        subprocess.run(["umount", str(where)], check=True)
        where.rmdir()


def test_a_full_disk_is_named_not_called_an_outage(eng, client, full_disk):
    add_user(eng, "alice")
    tok = csrf_of(client, "/login")
    # a wrong password is recorded (the sign-in throttle): a write the full disk refuses
    r = client.post("/login", data={"name": "alice", "password": "wrong", "csrf_token": tok})
    page = r.get_data(as_text=True)
    assert r.status_code == 503
    assert "No space left on device" in page and "unavailable right now" not in page
    assert "Traceback" not in page
