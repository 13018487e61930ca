"""The embedded cluster asks every connection for the password, the socket's as TCP's."""

from __future__ import annotations

import psycopg
import pytest


def test_a_connection_without_the_password_is_refused(pg_cluster):
    port, password = pg_cluster._secret()
    url = f"postgresql://stackbench@127.0.0.1:{port}/stackbench?sslmode=disable"
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(url, connect_timeout=3)
    socket = pg_cluster.link.resolve() / "run"
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host=str(socket), port=port, user="stackbench", dbname="stackbench")
    with psycopg.connect(host=str(socket), port=port, user="stackbench", password=password,
                         dbname="stackbench") as conn:  # fmt: skip
        assert conn.execute("SELECT current_user").fetchone() == ("stackbench",)
