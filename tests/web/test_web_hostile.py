"""Holes found by probing the web with hostile requests (issue 12): redirects after login,
sessions that outlive logout, password guessing, anonymous comparisons, series lists that
read every diff, and submissions that lost their bytes or landed in another user's series."""

from __future__ import annotations

import base64
import io
import re
import subprocess

import pytest
from helpers.intake import submit_series
from helpers.web import (
    add_token,
    add_tree,
    add_user,
    basic,
    bearer,
    csrf_of,
    db,
    login,
    make_series,
)
from helpers.web import populate_results as populate
from sqlalchemy import event, func, select, text

pytest_plugins = ["helpers.web"]


def post_login(client, password="pw-alice-1", next_url=""):
    tok = csrf_of(client, "/login")
    return client.post(
        "/login",
        data={"name": "alice", "password": password, "csrf_token": tok, "next": next_url},
    )


# ---------------------------------------------------------------- redirects and sessions


@pytest.mark.parametrize(
    "target",
    ["/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/\\evil.example",
     "//evil.example", "https://evil.example/", "/ /evil.example", "/\x00x", "/\u2028/x"],
)  # fmt: skip
def test_login_redirects_only_to_local_paths(eng, client, target):
    add_user(eng, "alice")
    r = post_login(client, next_url=target)
    if "\x00" in target:  # refused at the door like every NUL (test_web_edges.py)
        assert r.status_code == 400 and "Location" not in r.headers
        return
    assert r.status_code == 303 and r.headers["Location"] == "/"


def test_login_keeps_a_plain_local_next(eng, client):
    add_user(eng, "alice")
    r = post_login(client, next_url="/series/7?tab=runs")
    assert r.status_code == 303 and r.headers["Location"] == "/series/7?tab=runs"


def _cookie(client) -> str:
    return client.get_cookie("session").value


def test_logout_ends_the_session_everywhere(eng, app, client):
    add_user(eng, "alice")
    post_login(client)
    stolen = _cookie(client)
    assert client.get("/account").status_code == 200
    client.post("/logout", data={"csrf_token": csrf_of(client, "/account")})
    other = app.test_client()
    other.set_cookie("session", stolen)
    r = other.get("/account")
    assert r.status_code == 302 and "/login" in r.headers["Location"]


def test_password_change_ends_sessions(eng, app, client):
    from stackbench.mail import accounts

    add_user(eng, "alice")
    post_login(client)
    assert client.get("/account").status_code == 200
    with db(eng) as s:
        accounts.set_password(accounts.find_user(s, "alice"), "a-new-password")
        s.commit()
    r = client.get("/account")
    assert r.status_code == 302 and "/login" in r.headers["Location"]
    assert post_login(client, password="a-new-password").status_code == 303


# ---------------------------------------------------------------- password guessing


def test_login_is_throttled_after_wrong_passwords(eng, app, client):
    add_user(eng, "alice")
    limit = app.config["LOGIN_FAIL_COUNT"]
    for _ in range(limit):
        assert post_login(client, password="guess").status_code == 401
    r = post_login(client)  # a browser that never signed in as alice waits now, briefly
    text_ = r.get_data(as_text=True)
    assert r.status_code == 429 and "too many failed sign-ins" in text_
    assert f"{limit} for &#39;alice&#39;" in text_, text_
    # 2 s after the last failure, rounded up: 1 when that failure took over a second to
    # answer (a loaded host)
    waits = re.search(r"wait (\d+) seconds", text_)
    assert waits and 1 <= int(waits.group(1)) <= 2, text_
    assert "Traceback" not in text_
    age_failures(eng, 3)
    assert post_login(client).status_code == 303
    # old failures are dropped when the next one is recorded
    age_failures(eng, 86400)
    post_login(client, password="guess")
    with db(eng) as s:
        assert s.scalar(text("SELECT count(*) FROM login_failure")) == 1


def age_failures(eng, seconds: int) -> None:
    """As if ``seconds`` had passed since every recorded wrong sign-in (no test sleeps)."""
    with db(eng) as s:
        s.execute(
            text("UPDATE login_failure SET created_at = created_at - make_interval(secs => :s)"),
            {"s": seconds},
        )
        s.commit()


def login_from(client, addr: str, name: str, password: str):
    tok = csrf_of(client, "/login")
    return client.post(
        "/login",
        data={"name": name, "password": password, "csrf_token": tok},
        environ_base={"REMOTE_ADDR": addr},
    )


def test_guessing_a_name_delays_and_never_locks_its_owner_out(eng, app):
    """Issue 27: ten wrong passwords for a name (no account needed) locked its owner out of
    the web for 15 minutes. Now the owner's own browser is not held up at all, a new browser
    waits seconds (and is told how many), and no wait exceeds LOGIN_MAX_DELAY."""
    add_user(eng, "alice")
    owner, other, attacker = app.test_client(), app.test_client(), app.test_client()
    assert login_from(owner, "10.0.0.1", "alice", "pw-alice-1").status_code == 303
    owner.post("/logout", data={"csrf_token": csrf_of(owner, "/account")})
    for i in range(25):  # from many addresses, each try after its wait: all of them count
        age_failures(eng, 61)
        assert login_from(attacker, f"10.9.{i}.7", "alice", "guess").status_code == 401
    assert login_from(owner, "10.0.0.1", "alice", "pw-alice-1").status_code == 303
    r = login_from(other, "10.0.0.2", "alice", "pw-alice-1")
    msg = r.get_data(as_text=True)
    assert r.status_code == 429 and "too many failed sign-ins" in msg
    m = re.search(r"wait (\d+) seconds", msg)
    assert m and int(m.group(1)) <= app.config["LOGIN_MAX_DELAY"], msg
    age_failures(eng, app.config["LOGIN_MAX_DELAY"])
    assert login_from(other, "10.0.0.2", "alice", "pw-alice-1").status_code == 303


def test_one_address_guessing_many_names_holds_up_only_itself(eng, app):
    add_user(eng, "alice")
    add_user(eng, "bob", password="pw-bob-1")
    guesser, alice = app.test_client(), app.test_client()
    for i in range(3 * app.config["LOGIN_FAIL_COUNT"]):
        assert login_from(guesser, "10.9.0.7", f"user{i}", "guess").status_code == 401
    assert login_from(alice, "10.0.0.1", "alice", "pw-alice-1").status_code == 303
    r = login_from(guesser, "10.9.0.7", "bob", "pw-bob-1")
    assert r.status_code == 429 and "from your address" in r.get_data(as_text=True)
    age_failures(eng, 3)
    assert login_from(guesser, "10.9.0.7", "bob", "pw-bob-1").status_code == 303


def test_behind_a_proxy_each_client_counts_for_itself(eng):
    """Behind the shipped nginx every request came from 127.0.0.1: thirty wrong sign-ins
    anywhere held up everyone. With STACKBENCH_TRUSTED_PROXIES=1 the client is the one
    nginx names in X-Forwarded-For."""
    from stackbench.web import create_app

    add_user(eng, "alice")
    app = create_app({"ENGINE": eng, "SECRET_KEY": "t", "TESTING": True, "TRUSTED_PROXIES": 1})
    guesser, alice = app.test_client(), app.test_client()

    def via_proxy(c, client_addr, name, password):
        tok = csrf_of(c, "/login")
        return c.post(
            "/login",
            data={"name": name, "password": password, "csrf_token": tok},
            headers={"X-Forwarded-For": client_addr},
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        )

    for i in range(3 * app.config["LOGIN_FAIL_COUNT"]):
        via_proxy(guesser, "203.0.113.9", f"user{i}", "guess")
    assert via_proxy(guesser, "203.0.113.9", "user0", "guess").status_code == 429
    assert via_proxy(alice, "198.51.100.4", "alice", "pw-alice-1").status_code == 303


def test_git_basic_auth_takes_tokens_not_passwords_and_is_throttled(eng, app, client):
    add_user(eng, "alice")
    tok = add_token(eng, "alice")
    url = "/git/intake.git/info/refs?service=git-receive-pack"
    assert client.get(url, headers=basic("alice", "pw-alice-1")).status_code == 401
    assert client.get(url, headers=basic("alice", tok)).status_code == 200
    for _ in range(app.config["LOGIN_FAIL_COUNT"] - 1):  # the password above was the first
        r = client.get(url, headers=basic("alice", "sbt_guess"))
        assert r.status_code == 401 and "wrong user name or token" in r.get_data(as_text=True)
    # the next wrong one waits, and is told so
    r = client.get(url, headers=basic("alice", "sbt_guess"))
    assert r.status_code == 429 and r.mimetype == "text/plain"
    assert "too many failed sign-ins" in r.get_data(as_text=True)
    # a valid token is never held up
    assert client.get(url, headers=basic("alice", tok)).status_code == 200


# ---------------------------------------------------------------- comparisons


def test_comparisons_need_an_account_and_keep_to_a_quota(eng, app, client):
    from stackbench.resultsdb.models import Comparison

    add_tree(eng)
    build_ids = populate(eng, make_series(eng), runs=2)
    refs = [f"#{b}" for b in build_ids]
    assert client.post("/api/comparisons", json={"kernels": refs}).status_code == 401
    r = client.get("/compare/new", query_string={"k": " ".join(refs)})
    assert r.status_code == 302 and "/login" in r.headers["Location"]
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Comparison)) == 0

    add_user(eng, "alice")
    auth = bearer(add_token(eng, "alice"))
    app.config.update(COMPARE_RATE_COUNT=1, COMPARE_MAX_KERNELS=2)
    first = client.post("/api/comparisons", json={"kernels": refs[:2]}, headers=auth)
    assert first.status_code == 201
    # the same comparison again costs nothing; a new one is over the quota
    again = client.post("/api/comparisons", json={"kernels": refs[:2]}, headers=auth)
    assert again.status_code == 201 and again.get_json()["key"] == first.get_json()["key"]
    new = client.post("/api/comparisons", json={"kernels": refs[1:3]}, headers=auth)
    assert new.status_code == 429 and "at most 1 new comparisons" in new.get_json()["error"]
    big = client.post("/api/comparisons", json={"kernels": refs}, headers=auth)
    assert big.status_code == 400 and "at most 2 per comparison" in big.get_json()["error"]
    login(client)
    page = client.get("/compare/new", query_string={"k": " ".join(refs[1:3])})
    assert page.status_code == 429 and "at most 1 new comparisons" in page.get_data(as_text=True)
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Comparison)) == 1


# ---------------------------------------------------------------- series list


def test_series_list_reads_no_patch_bodies_or_diffs(eng, client):
    add_tree(eng)
    make_series(eng, n=3)
    seen: list[str] = []

    def log(conn, cursor, statement, params, context, executemany):
        seen.append(statement)

    event.listen(eng, "before_cursor_execute", log)
    try:
        assert client.get("/").status_code == 200
        assert client.get("/api/series").status_code == 200
    finally:
        event.remove(eng, "before_cursor_execute", log)
    reads = [q for q in seen if "FROM patch" in q or "FROM series" in q]
    assert reads
    for q in reads:
        assert "patch.diff" not in q and "patch.body" not in q, q
        assert "series.mbox" not in q and "series.cover_letter" not in q, q


# ---------------------------------------------------------------- series identity and bytes


MBOX_HEAD = (
    "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
    "From: {who} <{who}@example.org>\n"
    "Subject: [PATCH {n}/2] mm: change {what} {n}\n"
    "Message-ID: <{msgid}>\n\n"
    "Change {what}.\n---\n"
    "diff --git a/{what}.c b/{what}.c\n--- a/{what}.c\n+++ b/{what}.c\n"
    "@@ -1 +1 @@\n-int a;\n+int {what}{n};\n\n"
)


def two_patch_mbox(who: str, what: str, ids=("s-1@x", "s-2@x")) -> bytes:
    return "".join(
        MBOX_HEAD.format(who=who, what=what, n=n, msgid=ids[n - 1]) for n in (1, 2)
    ).encode()


def api_submit(client, tok: str, mbox: bytes, **extra):
    body = {"tree": "mm", "jobs": ["vm-scalability"], "runs": 1, **extra}
    body["mbox_base64"] = base64.b64encode(mbox).decode()
    return client.post("/api/series", json=body, headers=bearer(tok))


def test_other_users_series_with_the_same_message_id_is_its_own(eng, client):
    from stackbench.resultsdb.models import Patch, Series

    add_tree(eng)
    add_user(eng, "alice")
    add_user(eng, "eve", password="pw-eve-12")
    a = api_submit(client, add_token(eng, "alice"), two_patch_mbox("alice", "alpha"))
    e = api_submit(client, add_token(eng, "eve"), two_patch_mbox("eve", "omega"))
    assert a.status_code == e.status_code == 201, (a.get_json(), e.get_json())
    assert a.get_json()["id"] != e.get_json()["id"]
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Series)) == 2
        eve = s.get(Series, e.get_json()["id"])
        assert eve.owner_id != s.get(Series, a.get_json()["id"]).owner_id
        assert [p.subject for p in eve.patches] == ["mm: change omega 1", "mm: change omega 2"]
        assert s.scalar(select(func.count()).select_from(Patch)) == 4


def test_two_different_mails_with_one_message_id_are_refused(eng, client):
    add_tree(eng)
    add_user(eng, "alice")
    first = two_patch_mbox("alice", "alpha")
    other = two_patch_mbox("alice", "beta").split(b"\nFrom 0000")[0] + b"\n"
    r = api_submit(client, add_token(eng, "alice"), first + other)
    assert r.status_code == 400
    assert (
        "patch 1/2 appears twice with Message-ID <s-1@x> but different content"
        in (r.get_json()["fields"]["mbox"])
    )


def test_same_mbox_by_cli_and_api_is_one_series(eng, client):
    from stackbench.patches import stacks

    mbox = stacks.stack_mbox("compaction-demo")
    sid = submit_series(eng, mbox, jobs=["stress-highalloc"], runs=2)
    add_user(eng, "alice")
    body = {"tree": "linux-6.1", "jobs": ["stress-highalloc"], "runs": 2}
    body["mbox_base64"] = base64.b64encode(mbox).decode()
    r = client.post("/api/series", json=body, headers=bearer(add_token(eng, "alice")))
    # the same series, answered as such: nothing new was stored
    assert r.status_code == 200 and r.get_json()["id"] == sid
    assert "already stored" in r.get_json()["note"]


GIT_ENV = {
    "GIT_AUTHOR_NAME": "A U Thor",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_COMMITTER_NAME": "C O Mitter",
    "GIT_COMMITTER_EMAIL": "committer@example.org",
    "HOME": "/nonexistent",
    "PATH": "/usr/bin:/bin",
}


def git(repo, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=input, env=GIT_ENV, check=True, capture_output=True
    ).stdout


def test_latin1_patch_submitted_by_upload_applies_from_its_bytes(eng, client, tmp_path):
    """An mbox whose patch touches a latin-1 file: the bytes must reach git am unchanged,
    not decoded and rebuilt as UTF-8."""
    from stackbench.jobs.driver.apply_stage import _apply
    from stackbench.jobs.executors.series_state import SeriesRun
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.models import Series

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "mm").mkdir()
    (repo / "mm" / "compaction.c").write_bytes(b"/* caf\xe9 */\nint a;\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").decode().strip()
    (repo / "mm" / "compaction.c").write_bytes(b"/* caf\xe9 na\xefve */\nint a;\n")
    git(repo, "commit", "-q", "-am", "mm/compaction: a latin-1 comment")
    want = git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    mbox = git(repo, "format-patch", "--stdout", f"{base}..HEAD")
    assert b"caf\xe9 na\xefve" in mbox
    git(repo, "checkout", "-q", "--detach", base)

    add_tree(eng)
    add_user(eng, "alice")
    data = {"tree": "mm", "base": base, "jobs": "vm-scalability", "runs": "1"}
    data["mbox"] = (io.BytesIO(mbox), "latin1.mbox")
    r = client.post(
        "/api/series",
        data=data,
        content_type="multipart/form-data",
        headers=bearer(add_token(eng, "alice")),
    )
    assert r.status_code == 201, r.get_json()
    sid = r.get_json()["id"]
    with db(eng) as s:
        assert s.get(Series, sid).mbox == mbox
    tasks = _apply(eng, SeriesRun(sid, Settings(), None), repo, base, None)
    assert tasks is not None, "the latin-1 patch did not apply"
    head = tasks[-1].commit
    assert git(repo, "rev-parse", f"{head}^{{tree}}").decode().strip() == want
    with db(eng) as s:
        assert s.get(Series, sid).state == "applied"


HOSTILE_SUBJECTS = [
    "[PATCH 1/5000000] mm: x",
    "[PATCH 1/10000000] mm: x",
    "[PATCH 1/" + "9" * 5000 + "] mm: x",
    "[PATCH v" + "9" * 5000 + "] mm: x",
]


@pytest.mark.parametrize("subject", HOSTILE_SUBJECTS)
def test_hostile_numbers_are_a_short_400_on_api_and_form(eng, client, subject):
    add_tree(eng)
    add_user(eng, "alice")
    mbox = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: A <a@example.org>\nSubject: {subject}\n\nx\n---\n"
        "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
    ).encode()
    r = api_submit(client, add_token(eng, "alice"), mbox)
    assert r.status_code == 400 and len(r.get_data()) < 2000, r.get_data()[:300]
    login(client)
    form = {
        "csrf_token": csrf_of(client, "/submit"),
        "tree": "mm",
        "jobs": ["vm-scalability"],
        "runs": "1",
        "mbox": (io.BytesIO(mbox), "x.mbox"),
    }
    page = client.post("/submit", data=form, content_type="multipart/form-data")
    assert page.status_code == 400 and 'id="error-mbox"' in page.get_data(as_text=True)
    assert len(page.get_data()) < 50_000


def test_idna_charset_part_is_accepted_not_a_500(eng, client):
    add_tree(eng)
    add_user(eng, "alice")
    mbox = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: A <a@example.org>\nSubject: [PATCH] mm: x\nMessage-ID: <idna@x>\n"
        b"MIME-Version: 1.0\nContent-Type: text/plain; charset=idna\n\nx\n---\n"
        b"diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
    )
    r = api_submit(client, add_token(eng, "alice"), mbox, base="a" * 40)
    assert r.status_code == 201, r.get_json()


def test_api_client_sends_the_mbox_bytes_unchanged(eng, server):
    from stackbench.apiclient import ApiClient
    from stackbench.resultsdb.models import Series

    add_tree(eng)
    add_user(eng, "alice")
    mbox = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: J\xf6rg <j@example.org>\nSubject: [PATCH] mm: caf\xe9\n"
        b"Content-Type: text/plain; charset=ISO-8859-1\n\nx\n---\n"
        b"diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-/* caf\xe9 */\n+/* na\xefve */\n"
    )
    c = ApiClient(server, add_token(eng, "alice"))
    sid = c.submit(mbox, tree="mm", base="a" * 40, jobs=["vm-scalability"], runs=1)["id"]
    with db(eng) as s:
        assert s.get(Series, sid).mbox == mbox


def test_database_cut_mid_request_is_a_503_then_recovers(eng, db_url, client):
    """What a PostgreSQL restart does to a request in flight: its backend is terminated."""
    import psycopg

    add_tree(eng)
    make_series(eng)
    admin_url = db_url.replace("postgresql+psycopg://", "postgresql://")
    fired = []

    def kill_once(conn, cursor, statement, params, context, executemany):
        if not fired and "FROM series" in statement:
            fired.append(True)
            pid = conn.connection.dbapi_connection.info.backend_pid
            # wait for the backend to be gone: else the query may slip through before it
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

    event.listen(eng, "before_cursor_execute", kill_once)
    try:
        page = client.get("/")
        api = client.get("/api/series")
    finally:
        event.remove(eng, "before_cursor_execute", kill_once)
    assert fired
    assert page.status_code == 503 and "database is unavailable" in page.get_data(as_text=True)
    assert "Traceback" not in page.get_data(as_text=True)
    assert api.status_code == 200  # the next request gets a fresh connection
    assert client.get("/").status_code == 200


def test_database_cut_before_the_requests_rollback_is_not_raised(eng, db_url, app, client):
    """The flake of issue 27: the server cut the connection after the request's last query,
    so the session's ROLLBACK in the teardown failed and raised out of the request."""
    import psycopg
    from flask import g

    add_tree(eng)
    make_series(eng)
    admin_url = db_url.replace("postgresql+psycopg://", "postgresql://")

    @app.teardown_appcontext  # runs before the session's own teardown
    def cut(exc):
        pid = g._db.connection().connection.dbapi_connection.info.backend_pid
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

    page = client.get("/")
    assert page.status_code == 200 and "Traceback" not in page.get_data(as_text=True)
    app.teardown_appcontext_funcs.remove(cut)
    assert client.get("/api/series").status_code == 200


def test_login_page_with_a_hostile_next_renders(eng, client):
    r = client.get("/login", query_string={"next": "/\n/evil.example"})
    assert r.status_code == 200 and "evil.example" not in r.get_data(as_text=True)


def test_cli_passwd_signs_the_user_out_of_the_web(eng, client, monkeypatch):
    from stackbench.cli import main

    add_user(eng, "alice")
    post_login(client)
    assert client.get("/account").status_code == 200
    monkeypatch.setattr("sys.stdin", io.StringIO("another-password\n"))
    assert main(["user", "passwd", "alice", "--password-stdin"]) == 0
    assert client.get("/account").status_code == 302
