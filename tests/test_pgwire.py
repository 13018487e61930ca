"""pgwire, the plain-Python client of the embedded cluster's socket, gives what libpq gives:
the same type oids and values, text or binary, the same first line of an error, and a
clear error for a server that asks for a password or goes away."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from stackbench.resultsdb import libpq, pgwire

QUERIES = [
    ("SELECT 1, NULL::int, 'été ±5%'::text, true, 1.5e-300::float8, 'NaN'::float8", []),
    ("SELECT '-Infinity'::float8, ARRAY[1, 2, NULL]::int[], '{\"a\": [1]}'::jsonb", []),
    ("SELECT $1::text, $2::int, $3::text IS NULL", ["x\ty\nz", "42", None]),
    ("SELECT repeat('ab', 1500000), 'tail'", []),  # one value of 3 MB, read in many parts
    ("SELECT g, g * 0.5 FROM generate_series(1, 5000) g", []),
    ("SELECT 1 WHERE false", []),
    ("CREATE TEMP TABLE t (a int)", []),
    ("INSERT INTO t VALUES (1), (2)", []),
    ("SELECT '\\x00ff'::bytea, ''::text", []),
]


@pytest.mark.parametrize("binary", [False, True])
def test_what_libpq_gives(wire, db_url, binary):
    with libpq.connect(db_url.replace("+psycopg", "")) as lp:
        for sql, params in QUERIES:
            assert wire.query(sql, params, binary) == lp.query(sql, params, binary), sql
    assert wire.execute("SELECT current_user, inet_server_addr() IS NULL") == [("stackbench", "t")]


def test_errors_are_libpqs_first_line_and_the_connection_goes_on(wire, db_url):
    with libpq.connect(db_url.replace("+psycopg", "")) as lp:
        for sql in ("SELEC 1", "SELECT 1; SELECT 2", "SELECT 1/0", "SELECT * FROM nowhere"):
            with pytest.raises(pgwire.Error) as got:
                wire.execute(sql)
            with pytest.raises(libpq.Error) as want:
                lp.execute(sql)
            assert str(got.value) == str(want.value).splitlines()[0]
            assert "\n" not in str(got.value)
    assert wire.execute("SELECT 2") == [("2",)]


def test_a_server_that_goes_away_is_one_line(wire, db_url):
    pid = wire.execute("SELECT pg_backend_pid()")[0][0]
    with libpq.connect(db_url.replace("+psycopg", "")) as lp:
        lp.execute(f"SELECT pg_terminate_backend({pid})")
    with pytest.raises(pgwire.Error, match="terminat|closed the connection|lost the connection"):
        wire.execute("SELECT 1")
    wire.close()
    with pytest.raises(pgwire.Error, match="closed"):
        wire.execute("SELECT 1")


def test_no_server_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        pgwire.connect(str(tmp_path / ".s.PGSQL.1"), "stackbench", "stackbench")


def test_a_server_asking_for_a_password_is_refused_at_once():
    # the startup exchange of a server configured for scram-sha-256 (protocol 55.7:
    # AuthenticationSASL, code 10, with its mechanism list)
    ours, server = socket.socketpair()
    with ours, server:
        body = (10).to_bytes(4, "big") + b"SCRAM-SHA-256\x00\x00"
        server.sendall(b"R" + (len(body) + 4).to_bytes(4, "big") + body)
        with pytest.raises(pgwire.Error, match="asks for a password"):
            pgwire.Connection(ours)._startup()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another OS user")
def test_another_os_user_is_refused_on_the_socket(pg_cluster):
    # pgwire.py is plain standard-library Python: the other user runs it from stdin
    probe = (
        "import sys, types; m = types.ModuleType('pgwire'); "
        "exec(compile(sys.stdin.read(), 'pgwire.py', 'exec'), m.__dict__)\n"
        "try:\n m.connect(sys.argv[1], 'stackbench', 'stackbench')\n"
        "except m.Error as e:\n print('refused:', e)"
    )
    out = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c", probe,
         pg_cluster.socket_path()],
        input=Path(pgwire.__file__).read_text(), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.stdout.startswith("refused: FATAL:"), out
    assert "authentication failed" in out.stdout
