"""The embedded cluster's owner connects over its Unix socket by peer authentication (no
password exchange: 2-3 ms a connection instead of 9), through pgwire (no library to load);
TCP still needs the password, through libpq."""

from __future__ import annotations

import pytest

from stackbench.resultsdb import libpq, pgwire
from stackbench.resultsdb.tables import textcache


def test_the_owner_connects_over_the_socket_without_a_password(pg_cluster):
    path = pg_cluster.socket_path()
    assert path is not None and path.endswith(f".s.PGSQL.{pg_cluster._secret()[0]}")
    with pgwire.connect(path, "stackbench", "stackbench") as conn:
        assert conn.execute("SELECT current_user, inet_server_addr() IS NULL") == [
            ("stackbench", "t")
        ]
    port, _ = pg_cluster._secret()
    with pytest.raises(libpq.Error, match="password"):
        libpq.connect(f"postgresql://stackbench@127.0.0.1:{port}/stackbench?sslmode=disable")


# another OS user on the socket: test_pgwire.test_another_os_user_is_refused_on_the_socket


def test_quick_commands_take_the_socket(pg_cluster, monkeypatch):
    monkeypatch.delenv("STACKBENCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("STACKBENCH_HOME", str(pg_cluster.home))
    conn = textcache.quick_connect()
    assert isinstance(conn, pgwire.Connection)
    with conn:
        assert conn.execute("SELECT inet_server_addr() IS NULL") == [("t",)]


def test_a_socket_that_refuses_falls_back_to_the_password(pg_cluster, monkeypatch, tmp_path):
    # a home whose secret names a socket this user cannot use (here: none at all)
    home = tmp_path / "home"
    home.mkdir()
    (home / "pg").symlink_to(pg_cluster.link.resolve())
    port, password = pg_cluster._secret()
    (home / "pg.secret").write_text(f"{port}\n{password}\n{tmp_path / 'nowhere'}\n")
    monkeypatch.delenv("STACKBENCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("STACKBENCH_HOME", str(home))
    conn = textcache.quick_connect()
    assert isinstance(conn, libpq.Connection)
    with conn:
        assert conn.execute("SELECT inet_server_addr() IS NOT NULL") == [("t",)]
