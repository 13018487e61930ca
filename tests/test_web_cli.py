"""stackbench user/token/web commands and the web service that 'stackbench up' starts."""

from __future__ import annotations

import io
import json
import socket
import urllib.request

import pytest
from sqlalchemy import select
from test_web_support import db

pytest_plugins = ["test_web_support"]


def cli(*argv: str) -> int:
    from stackbench.cli import main

    return main(list(argv))


def test_user_add_token_create_and_use(eng, client, monkeypatch, capsys):
    from stackbench.resultsdb.models import ApiToken, AppUser

    monkeypatch.setattr("sys.stdin", io.StringIO("a-long-password\n"))
    assert cli("user", "add", "carol", "--admin", "--password-stdin") == 0
    assert cli("user", "add", "w1", "--worker") == 0
    assert cli("user", "add", "carol") == 1
    assert "user 'carol' already exists" in capsys.readouterr().err
    assert cli("user", "add", "bad name!") == 1
    assert "invalid user name" in capsys.readouterr().err
    assert cli("token", "create", "carol", "--label", "laptop") == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("sbt_")
    assert cli("token", "create", "nobody") == 1
    assert "unknown user 'nobody'" in capsys.readouterr().err
    with db(eng) as s:
        u = s.scalar(select(AppUser).where(AppUser.name == "carol"))
        assert u.is_admin and u.password_hash.startswith("scrypt:")
        stored = s.scalar(select(ApiToken.token_hash).where(ApiToken.user_id == u.id))
        assert stored != token and token not in stored  # only a hash is kept
    r = client.get("/api/series", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    assert cli("user", "list") == 0
    out = capsys.readouterr().out
    assert "carol" in out and "admin" in out and "worker" in out


def test_jobs_page_lists_shipped_definitions(client):
    html = client.get("/jobs").get_data(as_text=True)
    assert 'id="def-thpscale"' in html and "builtin-" in html and "mapsize_fraction" in html


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_web_service_start_and_stop(eng, monkeypatch):
    from stackbench.web import services

    port = _free_port()
    monkeypatch.setenv("STACKBENCH_WEB_PORT", str(port))
    status = services.start()
    try:
        assert status.startswith("web: started on"), status
        assert services.start().startswith("web: already running")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/series", timeout=30) as r:
            assert json.loads(r.read()) == {"series": [], "more": False}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
            assert b"Series" in r.read()
    finally:
        stopped = services.stop()
    assert stopped.startswith("web: stopped")
    assert services.stop() == "web: not running"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
