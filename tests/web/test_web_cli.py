"""stackbench user/token/web commands and the web service that 'stackbench up' starts."""

from __future__ import annotations

import io
import json
import socket
import time
import urllib.request

import pytest
from helpers.web import db
from sqlalchemy import select

pytest_plugins = ["helpers.web"]


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


def test_two_web_instances_keep_their_own_control_socket(eng, monkeypatch, tmp_path):
    """gunicorn's default control socket is ~/.gunicorn/gunicorn.ctl for every instance:
    stopping one deleted the other's. Each home now holds its own."""
    import os

    from stackbench.web import services

    homes = []
    for name in ("a", "b"):
        # short paths: a unix socket path has a length limit
        home = tmp_path / name
        home.mkdir()
        homes.append(home)
    ports = [_free_port(), _free_port()]

    def use(i: int) -> None:
        monkeypatch.setenv("STACKBENCH_HOME", str(homes[i]))
        monkeypatch.setenv("STACKBENCH_WEB_PORT", str(ports[i]))

    started = []
    try:
        for i in (0, 1):
            use(i)
            status = services.start()
            started.append(i)
            assert status.startswith("web: started on"), status
        for i in (0, 1):
            sock = homes[i] / "gunicorn.ctl"
            for _ in range(50):
                if sock.exists():
                    break
                time.sleep(0.1)
            assert sock.exists() and (os.stat(sock).st_mode & 0o077) == 0, sock
        use(0)
        assert services.stop().startswith("web: stopped")
        started.remove(0)
        assert (homes[1] / "gunicorn.ctl").exists()
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/api/series", timeout=30) as r:
            assert r.status == 200
    finally:
        for i in started:
            use(i)
            services.stop()


def test_intake_hooks_and_marker_are_private(eng, tmp_path, monkeypatch):
    """The hooks and stackbench-hooks.json carry the database URL with its password."""
    import stat

    from stackbench.web import gitrepo

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    url = "postgresql://stackbench:s3cret@127.0.0.1:5432/stackbench"
    repo = gitrepo.ensure_intake_repo(url)
    marker = repo / "stackbench-hooks.json"
    assert "s3cret" in marker.read_text()
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    for hook in ("pre-receive", "post-receive"):
        assert stat.S_IMODE((repo / "hooks" / hook).stat().st_mode) == 0o700
    # left readable by an older version: rewritten private on the next start
    marker.chmod(0o644)
    (repo / "hooks" / "pre-receive").chmod(0o755)
    gitrepo.ensure_intake_repo(url)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert stat.S_IMODE((repo / "hooks" / "pre-receive").stat().st_mode) == 0o700
