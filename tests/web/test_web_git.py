"""git push over HTTP to a running app creates a series; other refs and anonymous pushes are
refused. Real git, real git http-backend, real PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import urllib.request

import pytest
from helpers.web import add_token, add_tree, add_user, db
from sqlalchemy import select

pytest_plugins = ["helpers.web"]


def git(cwd, *args, check=True):
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Alice <b>Dev</b>",
        "GIT_AUTHOR_EMAIL": "alice@example.org",
        "GIT_COMMITTER_NAME": "Alice Dev",
        "GIT_COMMITTER_EMAIL": "alice@example.org",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd),
    }
    p = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"git {args} failed: {p.stdout}{p.stderr}")
    return p


@pytest.fixture
def work(tmp_path):
    w = tmp_path / "work"
    w.mkdir()
    git(w, "init", "-q", "-b", "main")
    (w / "mm.c").write_text("int compaction;\n")
    git(w, "add", "mm.c")
    git(w, "commit", "-q", "-m", "base")
    base = git(w, "rev-parse", "HEAD").stdout.strip()
    for i in (1, 2):
        (w / "mm.c").write_text(f"int compaction = {i};\n")
        git(w, "commit", "-q", "-am", f"mm: step {i} <script>alert({i})</script>")
    return w, base


def test_push_creates_series_and_prints_url(eng, server, work):
    from stackbench.resultsdb.models import Patch, Series

    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    w, base = work
    url = server.replace("http://", f"http://alice:{tok}@") + "/git/intake.git"
    p = git(w, "push", url, f"HEAD:refs/for/mm/{base}")
    out = p.stdout + p.stderr
    assert "remote: stackbench: series" in out, out
    assert f"{server}/series/" in out, out
    with db(eng) as s:
        series = s.scalars(select(Series)).one()
        patches = list(s.scalars(select(Patch).where(Patch.series_id == series.id)))
        assert series.source == "push" and series.base_commit == base
        assert [p.subject for p in sorted(patches, key=lambda p: p.idx)] == [
            "mm: step 1 <script>alert(1)</script>",
            "mm: step 2 <script>alert(2)</script>",
        ]
        assert series.owner_id is not None
    # the page escapes what came from the commits
    with urllib.request.urlopen(f"{server}/series/{series.id}") as resp:
        html = resp.read().decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_push_to_other_ref_is_refused(eng, server, work):
    from stackbench.resultsdb.models import Series

    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    w, _base = work
    url = server.replace("http://", f"http://alice:{tok}@") + "/git/intake.git"
    p = git(w, "push", url, "HEAD:refs/heads/main", check=False)
    assert p.returncode != 0
    assert "only pushes to refs/for/<tree>/<base> are accepted" in p.stderr, p.stderr
    with db(eng) as s:
        assert s.scalars(select(Series)).first() is None


def test_anonymous_and_bad_token_push_refused(eng, server, work):
    from stackbench.resultsdb.models import Series

    add_user(eng, "alice")
    add_tree(eng, "mm")
    w, base = work
    # git asks for credentials after the server's 401 challenge; with prompts off it gives up
    p = git(w, "push", server + "/git/intake.git", f"HEAD:refs/for/mm/{base}", check=False)
    assert p.returncode != 0 and "could not read Username" in p.stderr, p.stderr
    bad = server.replace("http://", "http://alice:sbt_wrong@") + "/git/intake.git"
    p = git(w, "push", bad, f"HEAD:refs/for/mm/{base}", check=False)
    assert p.returncode != 0 and "Authentication failed" in p.stderr, p.stderr
    with db(eng) as s:
        assert s.scalars(select(Series)).first() is None


def test_receive_pack_advertisement_needs_credentials(client):
    r = client.get("/git/intake.git/info/refs?service=git-receive-pack")
    assert r.status_code == 401 and "Basic" in r.headers["WWW-Authenticate"]


def test_unknown_repository_path_is_404(client):
    assert client.get("/git/other.git/info/refs?service=git-upload-pack").status_code == 404
    assert client.get("/git/intake.git/config").status_code == 404


def test_guessed_tokens_never_stop_a_push_with_a_valid_one(eng, app, server, work):
    """Issue 27: ten wrong tokens for a name blocked that user's pushes with a valid token
    for 15 minutes, and git said "wrong user name or token". A valid token always pushes;
    a wrong one, while the name is held up, is told to wait."""
    from stackbench.resultsdb.models import Series

    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    w, base = work
    bad = server.replace("http://", "http://alice:sbt_wrong@") + "/git/intake.git"
    for _ in range(app.config["LOGIN_FAIL_COUNT"]):
        p = git(w, "push", bad, f"HEAD:refs/for/mm/{base}", check=False)
        assert p.returncode != 0 and "Authentication failed" in p.stderr, p.stderr
    p = git(w, "push", bad, f"HEAD:refs/for/mm/{base}", check=False)
    assert p.returncode != 0 and "too many failed sign-ins" in p.stderr, p.stderr
    assert "wait" in p.stderr and "wrong user name" not in p.stderr
    good = server.replace("http://", f"http://alice:{tok}@") + "/git/intake.git"
    p = git(w, "push", good, f"HEAD:refs/for/mm/{base}")
    assert "remote: stackbench: series" in p.stdout + p.stderr
    with db(eng) as s:
        assert s.scalars(select(Series)).one().source == "push"
