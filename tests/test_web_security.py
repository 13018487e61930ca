"""Hostile input: HTML/JS and header injection in an mbox, oversized uploads, forged CSRF,
unauthenticated writes, open redirects and the submission rate limit."""

from __future__ import annotations

import io
import re

import pytest
from sqlalchemy import func, select
from test_web_support import DATA, add_token, add_tree, add_user, csrf_of, db, login, run_data

pytest_plugins = ["test_web_support"]

ACTIVE = re.compile(r"<(script|img|svg|iframe)\b[^>]*(alert|onerror|onload|javascript:)", re.I)


def count_series(eng) -> int:
    from stackbench.resultsdb.models import Series

    with db(eng) as s:
        return s.scalar(select(func.count()).select_from(Series))


def submit_form(client, mbox: bytes, **fields):
    data = {
        "csrf_token": csrf_of(client, "/submit"),
        "tree": "mm",
        "base": "",
        "jobs": ["vm-scalability"],
        "runs": "3",
        "mbox": (io.BytesIO(mbox), "series.mbox"),
    }
    data.update(fields)
    return client.post("/submit", data=data, content_type="multipart/form-data")


@pytest.fixture
def signed_in(eng, client):
    from stackbench.resultsdb.models import Job

    add_user(eng, "alice")
    add_tree(eng, "mm")
    with db(eng) as s:  # a suite with results makes "vm-scalability" a valid job choice
        s.add(Job(suite="vm-scalability", test="t", params={}, params_key="t"))
        s.commit()
    login(client)
    return client


def test_submit_form_creates_series_at_once(eng, signed_in):
    r = submit_form(signed_in, (DATA / "series.mbox").read_bytes())
    assert r.status_code == 303
    page = signed_in.get(r.headers["Location"]).get_data(as_text=True)
    assert "mm/compaction: two small tweaks" in page and "mm/compaction: count skipped" in page
    assert "st-new" in page
    assert "mm/compaction: two small tweaks" in signed_in.get("/").get_data(as_text=True)


def test_submit_form_errors_next_to_fields(eng, signed_in):
    r = submit_form(signed_in, b"this is not a patch", tree="nope", runs="0", jobs=[])
    html = r.get_data(as_text=True)
    assert r.status_code == 400
    for field in ("mbox", "tree", "runs", "jobs"):
        assert f'id="error-{field}"' in html, field
    assert count_series(eng) == 0


def test_hostile_mbox_is_escaped_everywhere(eng, signed_in):
    r = submit_form(signed_in, (DATA / "hostile.mbox").read_bytes(), base="1" * 40)
    assert r.status_code == 303, r.get_data(as_text=True)
    sid = int(r.headers["Location"].rsplit("/", 1)[1])
    for path in (f"/series/{sid}", "/", "/?submitter=%3Cimg"):
        html = signed_in.get(path).get_data(as_text=True)
        assert not ACTIVE.search(html), (path, ACTIVE.search(html).group(0))
    html = signed_in.get(f"/series/{sid}").get_data(as_text=True)
    assert "&lt;script&gt;alert(" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;/textarea&gt;&lt;script&gt;" in html
    # the CR/LF of the encoded subject never turns into a header line anywhere
    from stackbench.resultsdb.models import Patch, Series

    with db(eng) as s:
        x = s.get(Series, sid)
        p = s.scalars(select(Patch).where(Patch.series_id == sid)).one()
        for value in (x.title, x.submitter, p.subject, p.author):
            assert "\r" not in value and "\n" not in value
    api = signed_in.get(f"/api/series/{sid}")
    assert api.mimetype == "application/json"
    assert signed_in.get("/").headers["Content-Security-Policy"].startswith("default-src 'self'")


def test_forged_or_missing_csrf_is_refused(eng, signed_in):
    mbox = (DATA / "series.mbox").read_bytes()
    r = submit_form(signed_in, mbox, csrf_token="forged-token")
    assert r.status_code == 400 and "CSRF" in r.get_data(as_text=True)
    data = {
        "tree": "mm",
        "jobs": "vm-scalability",
        "runs": "3",
        "mbox": (io.BytesIO(mbox), "s.mbox"),
    }
    assert signed_in.post("/submit", data=data).status_code == 400
    assert signed_in.post("/logout").status_code == 400  # sign-out too
    # cookie-authenticated API writes need the token as a header
    assert signed_in.post("/api/series", json={"mbox": "x"}).status_code == 400
    assert count_series(eng) == 0


def test_login_csrf_and_open_redirect(eng, client):
    add_user(eng, "alice")
    r = client.post("/login", data={"name": "alice", "password": "pw-alice-1"})
    assert r.status_code == 400  # no CSRF token
    tok = csrf_of(client, "/login")
    r = client.post("/login", data={"name": "alice", "password": "wrong", "csrf_token": tok})
    assert r.status_code == 401 and "wrong user name or password" in r.get_data(as_text=True)
    r = client.post(
        "/login",
        data={
            "name": "alice",
            "password": "pw-alice-1",
            "csrf_token": tok,
            "next": "//evil.example/x",
        },
    )
    assert r.status_code == 303 and r.headers["Location"] == "/"


def test_unauthenticated_submit_and_upload(eng, client):
    add_tree(eng, "mm")
    tok = csrf_of(client, "/submit")
    r = client.post("/submit", data={"csrf_token": tok, "tree": "mm", "mbox_text": "x"})
    assert r.status_code == 302 and "/login" in r.headers["Location"]
    assert client.post("/api/series", json={"mbox": "x"}).status_code == 401
    assert client.post("/api/runs", json={}).status_code == 401
    assert client.get("/admin/").status_code == 302
    assert count_series(eng) == 0


def test_non_admin_cannot_administer(eng, signed_in):
    tok = csrf_of(signed_in, "/account")
    r = signed_in.post("/admin/trees", data={"csrf_token": tok, "name": "evil"})
    assert r.status_code == 403


def test_admin_manages_trees_machines_branches(eng, client):
    from stackbench.resultsdb.models import Machine, TrackedBranch, Tree

    add_user(eng, "root", admin=True)
    login(client, "root")
    tok = csrf_of(client, "/admin/")
    assert (
        client.post(
            "/admin/trees",
            data={"csrf_token": tok, "name": "linux-next", "url": "https://git.kernel.org/next"},
        ).status_code
        == 303
    )
    assert client.post("/admin/trees", data={"csrf_token": tok, "name": "<b>"}).status_code == 400
    assert (
        client.post(
            "/admin/machines",
            data={"csrf_token": tok, "name": "box1", "kind": "baremetal", "cpus": "64"},
        ).status_code
        == 303
    )
    with db(eng) as s:
        tree = s.scalar(select(Tree).where(Tree.name == "linux-next"))
        assert s.scalar(select(Machine.cpus).where(Machine.name == "box1")) == 64
    r = client.post(
        "/admin/branches",
        data={
            "csrf_token": tok,
            "tree_id": str(tree.id),
            "branch": "master",
            "jobs": "thpscale, vm-scalability",
        },
    )
    assert r.status_code == 303
    with db(eng) as s:
        b = s.scalars(select(TrackedBranch)).one()
        assert b.jobs == ["thpscale", "vm-scalability"] and b.enabled
    client.post(f"/admin/branches/{b.id}/toggle", data={"csrf_token": tok})
    with db(eng) as s:
        assert s.get(TrackedBranch, b.id).enabled is False
    # checked like a tracked-branch file: no jobs, or a job that does not exist, is refused
    for jobs in ("", "no-such-benchmark"):
        r = client.post(
            "/admin/branches",
            data={"csrf_token": tok, "tree_id": str(tree.id), "branch": "next", "jobs": jobs},
        )
        assert r.status_code == 400
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(TrackedBranch)) == 1
    # one spec per line or comma; the overrides of one spec stay together
    r = client.post(
        "/admin/branches",
        data={"csrf_token": tok, "tree_id": str(tree.id), "branch": "mm-stable",
              "jobs": "thpscale[max_threads=2, madvise=false]\nvm-scalability"},
    )  # fmt: skip
    assert r.status_code == 303
    with db(eng) as s:
        b = s.scalars(select(TrackedBranch).where(TrackedBranch.branch == "mm-stable")).one()
        assert b.jobs == ["thpscale[max_threads=2, madvise=false]", "vm-scalability"]
    page = client.get("/machines").get_data(as_text=True)
    assert "box1" in page and "baremetal" in page


def test_oversized_uploads_are_refused(eng, app, signed_in):
    app.config["MAX_CONTENT_LENGTH"] = 64 * 1024
    big = b"From x\n" + b"a" * (128 * 1024)
    r = submit_form(signed_in, big)
    assert r.status_code == 413
    add_user(eng, "w1", worker=True)
    tok = add_token(eng, "w1")
    r = signed_in.post(
        "/api/runs",
        data=b"{" + b" " * (128 * 1024) + b"}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {tok}"},
    )
    assert r.status_code == 413 and r.get_json()["status"] == 413
    assert count_series(eng) == 0


def test_submission_rate_limit(eng, app, signed_in):
    app.config["SUBMIT_RATE_COUNT"] = 1
    assert submit_form(signed_in, (DATA / "series.mbox").read_bytes()).status_code == 303
    r = submit_form(signed_in, (DATA / "hostile.mbox").read_bytes(), base="1" * 40)
    assert r.status_code == 429 and "rate limit" in r.get_data(as_text=True)
    assert count_series(eng) == 1


def test_logs_are_served_as_plain_text(eng, client):
    from stackbench.resultsdb import ingest

    d = run_data("f" * 40, 0, {"vm-scalability.throughput": 1.0})
    d.logs = {"console": b"<script>alert(1)</script>"}
    rid = ingest.ingest(eng, [d]).inserted[0]
    r = client.get(f"/runs/{rid}/logs/console")
    assert r.mimetype == "text/plain" and r.headers["X-Content-Type-Options"] == "nosniff"
