"""Local workers post their runs to the web API as a lab's boxes do: ``stackbench up`` gives
them its web UI's address and a worker token, and a round's process then sends its runs
without loading the database layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_buildbot_fanout import start_web

from stackbench import services as up_services
from stackbench.jobs.executors import services
from stackbench.mail import accounts
from stackbench.resultsdb import db, runs_q


def test_the_local_workers_token_is_made_once_and_again_when_unknown(eng, tmp_path, monkeypatch):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    env = services.local_upload_env("http://127.0.0.1:8080")
    path = Path(env["STACKBENCH_WORKER_TOKEN_FILE"])
    assert env["STACKBENCH_URL"] == "http://127.0.0.1:8080"
    assert path.stat().st_mode & 0o777 == 0o600
    token = path.read_text().strip()
    with db.session(eng) as s:
        user = accounts.user_for_token(s, token)
        assert user is not None and user.is_worker and user.name == services.LOCAL_UPLOADER
    services.local_upload_env("http://127.0.0.1:8080")
    assert path.read_text().strip() == token  # kept: the running workers hold it
    path.write_text("a token of another database\n")
    services.local_upload_env("http://127.0.0.1:8080")
    renewed = path.read_text().strip()
    with db.session(eng) as s:
        assert accounts.user_for_token(s, renewed).name == services.LOCAL_UPLOADER


def test_up_gives_the_local_workers_its_web_ui(monkeypatch):
    seen = {}

    def buildbot(workers=1, results_url=None):
        seen.update(workers=workers, results_url=results_url)
        return "buildbot: started"

    monkeypatch.setattr(up_services, "_db_up", lambda: "database: started")
    monkeypatch.setenv("STACKBENCH_WEB_HOST", "0.0.0.0")
    monkeypatch.setenv("STACKBENCH_WEB_PORT", "8181")
    with_web = [("buildbot", buildbot, None), ("web", lambda: "web: started", None)]
    assert list(up_services.up(with_web, workers=3))[-1] == "web: started"
    assert seen == {"workers": 3, "results_url": "http://127.0.0.1:8181"}
    list(up_services.up(with_web[:1]))
    assert seen == {"workers": 1, "results_url": None}  # no web here: into the database


def test_a_round_posts_its_runs_without_loading_the_database_layer(eng, db_url, tmp_path):
    server, web_url = start_web(tmp_path)
    try:
        with db.session(eng) as s:
            user = accounts.create_user(s, "w-local", worker=True)
            token = accounts.create_token(s, user, "test")
        env = {**os.environ, "STACKBENCH_URL": web_url, "STACKBENCH_WORKER_TOKEN": token,
               "STACKBENCH_HOME": str(tmp_path / "home")}  # fmt: skip
        env.pop("STACKBENCH_DATABASE_URL", None)  # a box of a lab knows no database
        out = tmp_path / "k"
        cli = [sys.executable, "-m", "stackbench", "worker"]
        build = [*cli, "build", "--commit", "c" * 40, "--out", str(out), "--dry-kernel"]
        subprocess.run(build, env=env, check=True, capture_output=True, cwd=tmp_path)
        bench = [*cli, "bench", "--kernel", str(out / "kernel.tar"), "--job", "dry-vm",
                 "--submission", "local-upload", "--runs", "2", "--out", str(tmp_path / "r"),
                 "--upload", "--dry-kernel"]  # fmt: skip
        probe = ("import runpy, sys; sys.argv = ['stackbench', *sys.argv[1:]]\n"
                 "try:\n    runpy.run_module('stackbench', run_name='__main__')\n"
                 "finally:\n    print('LOADED ' + ' '.join(m for m in ('sqlalchemy', 'psycopg')"
                 " if m in sys.modules), file=sys.stderr)")  # fmt: skip
        res = subprocess.run(
            [sys.executable, "-c", probe, *bench[3:]], env=env, capture_output=True, text=True,
            cwd=tmp_path,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "uploaded 2 run(s), 0 already present, to " + web_url in res.stdout
        assert res.stderr.strip().splitlines()[-1] == "LOADED", res.stderr
        keys = [json.loads(p.read_text())["idempotency_key"] for p in (tmp_path / "r").glob("*")]
        with db.session(eng) as s:
            assert all(runs_q.id_for_key(s, k) for k in keys) and len(keys) == 2
    finally:
        server.shutdown()
