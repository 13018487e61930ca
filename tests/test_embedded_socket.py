"""The embedded cluster's owner connects over its Unix socket by peer authentication (no
password exchange: 2-3 ms a connection instead of 9); TCP and other OS users still need
the password."""

from __future__ import annotations

import os
import subprocess

import pytest

from stackbench.resultsdb import libpq
from stackbench.resultsdb.tables import textcache


def test_the_owner_connects_over_the_socket_without_a_password(pg_cluster):
    url = pg_cluster.socket_url()
    assert url is not None and "@/" in url  # a user, no password, no host name
    with libpq.connect(url) as conn:
        assert conn.execute("SELECT current_user, inet_server_addr() IS NULL") == [
            ("stackbench", "t")
        ]
    port, _ = pg_cluster._secret()
    with pytest.raises(libpq.Error, match="password"):
        libpq.connect(f"postgresql://stackbench@127.0.0.1:{port}/stackbench?sslmode=disable")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another OS user")
def test_another_os_user_is_refused_on_the_socket(pg_cluster):
    probe = (
        "import ctypes, sys; lib = ctypes.CDLL('libpq.so.5'); "
        "lib.PQconnectdb.restype = ctypes.c_void_p; "
        "c = lib.PQconnectdb(sys.argv[1].encode()); "
        "lib.PQerrorMessage.restype = ctypes.c_char_p; "
        "print(lib.PQstatus(ctypes.c_void_p(c)), lib.PQerrorMessage(ctypes.c_void_p(c)))"
    )
    out = subprocess.run(
        [
            "runuser",
            "-u",
            "nobody",
            "--",
            "/usr/bin/python3",
            "-I",
            "-c",
            probe,
            pg_cluster.socket_url(),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.startswith("1 "), out  # CONNECTION_BAD
    assert "authentication failed" in out.stdout


def test_quick_commands_take_the_socket(pg_cluster, monkeypatch):
    monkeypatch.delenv("STACKBENCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("STACKBENCH_HOME", str(pg_cluster.home))
    conn = textcache.quick_connect()
    assert conn is not None
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
    assert conn is not None
    with conn:
        assert conn.execute("SELECT inet_server_addr() IS NOT NULL") == [("t",)]
