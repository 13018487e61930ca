"""Hostile input: HTML/JS and header injection in an mbox, oversized uploads, forged CSRF,
unauthenticated writes, what each role's token may write, open redirects and the submission
rate limit."""

from __future__ import annotations

import io
import re

import pytest
from helpers.web import (
    DATA,
    add_token,
    add_tree,
    add_user,
    basic,
    bearer,
    csrf_of,
    db,
    login,
    make_series,
    rule_path,
    run_data,
    upload_body,
)
from sqlalchemy import func, select

pytest_plugins = ["helpers.web"]

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


# ---------------------------------------------------------------- what each role may write

# the GET routes that store something: GET /compare/new computes and keeps a comparison
GET_WRITES = {"compare.create"}
WORKER_ONLY = "a worker's token uploads runs (POST /api/runs) and nothing else"


def write_requests(app) -> list[tuple[str, str, str]]:
    """(endpoint, method, path) of every write of the URL map but git's (its own test)."""
    out = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("git_http."):
            continue
        path = rule_path(rule)
        for method in sorted(rule.methods & {"POST", "PUT", "PATCH", "DELETE"}):
            out.append((rule.endpoint, method, path))
        if rule.endpoint in GET_WRITES:
            out.append((rule.endpoint, "GET", path))
    return out


def stored_counts(eng) -> dict[str, int]:
    from stackbench.resultsdb import models

    with db(eng) as s:
        return {
            m.__tablename__: s.scalar(select(func.count()).select_from(m))
            for m in (models.Series, models.Run, models.Comparison, models.ApiToken, models.Tree)
        }


def test_a_workers_token_uploads_runs_and_nothing_else(eng, app, client):
    add_tree(eng, "mm")
    make_series(eng)
    add_user(eng, "w1", worker=True)
    tok = add_token(eng, "w1")
    before = stored_counts(eng)
    writes = write_requests(app)
    endpoints = {ep for ep, _, _ in writes}
    # the submissions (API and form), comparisons, tokens and the admin's writes are all there
    for ep in ("api.series_create", "submit.post", "api.comparison_create", "compare.create",
               "auth.create_token", "admin.add_tree", "api.runs_upload"):  # fmt: skip
        assert ep in endpoints, ep
    body = {"mbox": "x", "tree": "mm", "kernels": ["#1", "#2"], "name": "t"}
    for ep, method, path in writes:
        if ep in ("api.runs_upload", "auth.login", "auth.logout"):
            continue
        r = client.open(path, method=method, headers=bearer(tok), json=body)
        assert r.status_code == 403, (ep, method, path, r.status_code, r.get_data()[:200])
        assert r.get_json() == {"error": WORKER_ONLY, "status": 403}, (ep, r.get_data()[:200])
    # a push, from its ref advertisement on; fetching stays open
    push = "/git/intake.git/info/refs?service=git-receive-pack"
    for r in (
        client.get(push, headers=basic("w1", tok)),
        client.post("/git/intake.git/git-receive-pack", headers=basic("w1", tok), data=b"0000"),
    ):
        assert r.status_code == 403 and r.mimetype == "text/plain"
        assert r.get_data(as_text=True) == f"stackbench: {WORKER_ONLY}\n"
    fetch = client.get(
        "/git/intake.git/info/refs?service=git-upload-pack", headers=basic("w1", tok)
    )
    assert fetch.status_code == 200
    assert stored_counts(eng) == before
    # and what it is for
    r = client.post("/api/runs", json=upload_body(), headers=bearer(tok))
    assert r.status_code == 201, r.get_json()


def test_people_submit_and_only_workers_upload_runs(eng, client):
    add_tree(eng, "mm")
    add_user(eng, "alice")
    add_user(eng, "root", password="pw-root-1", admin=True)
    user, admin = add_token(eng, "alice"), add_token(eng, "root")
    for tok, whose in ((user, "a person's"), (admin, "an administrator's")):
        r = client.post("/api/runs", json=upload_body(), headers=bearer(tok))
        assert r.status_code == 403, r.get_json()
        assert r.get_json()["error"] == f"only a worker's token may upload runs, not {whose}"
        # the same token's submission reaches the submission's own checks
        r = client.post("/api/series", json={"mbox": "", "tree": "mm"}, headers=bearer(tok))
        assert r.status_code == 400 and "mbox" in r.get_json()["fields"], r.get_json()
    assert stored_counts(eng)["run"] == 0
    # an account is one or the other
    from stackbench.errors import InputError

    with pytest.raises(InputError, match="administrator or a worker, not both"):
        add_user(eng, "both", admin=True, worker=True)


# ---------------------------------------------------------------- the former 500s


@pytest.mark.parametrize("name", ["t" * 256, "x" * 5000, "../../etc/passwd", ".hidden"])
def test_a_tree_name_no_file_can_have_is_a_400(eng, client, name):
    """A tree name of 256 bytes reached the file system (OSError: File name too long)."""
    add_user(eng, "alice")
    tok = add_token(eng, "alice")
    body = {"mbox": (DATA / "series.mbox").read_text(), "tree": name, "runs": 1}
    r = client.post("/api/series", json=body, headers=bearer(tok))
    assert r.status_code == 400, r.get_data()[:300]
    why = r.get_json()["fields"]["tree"]
    assert why.startswith("tree name") and len(why) < 200, why
    assert ("longer than 100" in why) == (len(name) > 100), why
    login(client)
    r = submit_form(client, (DATA / "series.mbox").read_bytes(), tree=name)
    assert r.status_code == 400 and 'id="error-tree"' in r.get_data(as_text=True)
    assert count_series(eng) == 0


def test_kernels_refuse_a_tree_name_before_the_file_system():
    from stackbench.errors import InputError
    from stackbench.kernels import trees

    with pytest.raises(InputError, match="longer than 100"):
        trees.load_tree("t" * 300)
    with pytest.raises(InputError, match="letters, digits"):
        trees.load_tree("../trees/linux-6.1")
    assert trees.load_tree("linux-6.1").name == "linux-6.1"


@pytest.mark.parametrize(
    ("raw", "where", "why"),
    [
        ('"duration_s": ' + str(10**400), "run.duration_s", "number of about 401 digits"),
        ('"duration_s": -1', "run.duration_s", "at least 0"),
        ('"samples": {"m": [1, ' + str(10**400) + "]}", "run.samples.m", "out of range"),
        ('"samples": {"m": NaN}', "body.samples.m", "not a finite number"),
        ('"duration_s": 1e999', "body.duration_s", "not a finite number: inf"),
        ('"iteration": ' + str(-(10**30)), "run.iteration", "at least 0"),
    ],
)
def test_numbers_no_column_holds_are_a_400(eng, client, raw, where, why):
    """``"duration_s": 10**400`` was an OverflowError in the wire format's float()."""
    import json

    add_user(eng, "w1", worker=True)
    tok = add_token(eng, "w1")
    key = raw.split(":")[0].strip('"')
    text = json.dumps({k: v for k, v in upload_body().items() if k != key})
    r = client.post(
        "/api/runs",
        data=text[:-1] + ", " + raw + "}",
        content_type="application/json",
        headers=bearer(tok),
    )
    assert r.status_code == 400, r.get_data()[:300]
    err = r.get_json()["error"]
    assert err.startswith(where) and why in err and len(err) < 200, err
    assert stored_counts(eng)["run"] == 0
