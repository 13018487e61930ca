"""Edges that answered 500 (issue 27): NUL characters and lone surrogates that reached
PostgreSQL or the UTF-8 encoder, numbers beyond an integer column, JSON nested past Python's
recursion limit. Each is a 400 at the door, naming what is wrong, and nothing is stored; the
CLI says the same in one line."""

from __future__ import annotations

import json

import pytest
from helpers.web import (
    add_token,
    add_tree,
    add_user,
    bearer,
    csrf_of,
    db,
    login,
    make_series,
)
from sqlalchemy import func, select

pytest_plugins = ["helpers.web"]


def refused(r, *words: str) -> str:
    """A short 400 that says what is wrong, and no trace of a crash."""
    text = r.get_data(as_text=True)
    assert r.status_code == 400, (r.status_code, text[:300])
    assert "Traceback" not in text and "internal error" not in text.lower()
    assert len(r.get_data()) < 20_000
    for w in words:
        assert w in text, (w, text[:500])
    return text


NUL = "contains a NUL character"
RANGE = "is out of range"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/?tree=%00", ("tree", NUL)),
        ("/?submitter=a%00b", ("submitter", NUL)),
        ("/regressions?state=%00", ("state", NUL)),
        ("/compare/%00", (NUL,)),
        ("/compare/x%00/lkp.txt", (NUL,)),
        ("/runs/1/logs/%00", (NUL,)),
        ("/api/kernels?commit=%00", ("commit", NUL)),
        ("/api/comparisons/%00", ("key", NUL)),
        ("/login?next=%00", ("next", NUL)),
        ("/series/2147483648", ("2147483648", RANGE)),
        ("/series/99999999999999999999", (RANGE,)),
        ("/builds/2147483648/log", (RANGE,)),
        ("/api/series/2147483648", (RANGE,)),
        ("/api/patches/2147483648", (RANGE,)),
        ("/?page=99999999999999999999", ("page", RANGE)),
        ("/api/series?offset=99999999999999999999", ("offset", RANGE)),
        ("/api/runs?kernel=-99999999999", ("kernel", RANGE)),
    ],
)
def test_hostile_paths_and_queries_are_a_400(eng, client, url, words):
    add_tree(eng)
    make_series(eng)
    refused(client.get(url), *words)


def test_in_range_numbers_and_plain_text_still_work(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    assert client.get(f"/series/{sid}").status_code == 200
    assert client.get("/series/2147483647").status_code == 404
    assert client.get("/api/series?offset=2147483647&limit=5").get_json()["series"] == []
    assert client.get("/?page=abc").status_code == 200  # not a number: the default, as before


def json_post(client, url: str, body: bytes, tok: str):
    return client.post(url, data=body, headers={**bearer(tok), "Content-Type": "application/json"})


def test_hostile_json_bodies_are_a_400_and_store_nothing(eng, client):
    from stackbench.resultsdb.models import Comparison, Run, Series

    add_tree(eng)
    add_user(eng, "alice")
    add_user(eng, "w1", worker=True)
    tok, wtok = add_token(eng, "alice"), add_token(eng, "w1")
    deep = b"[" * 100_000
    for url, who in (("/api/series", tok), ("/api/runs", wtok), ("/api/comparisons", tok)):
        refused(json_post(client, url, deep, who), "nested too deeply")
    refused(
        json_post(client, "/api/series", b'{"tree": "mm", "mbox": "caf\\ud800"}', tok),
        "body.mbox",
        "lone surrogate",
    )
    refused(
        json_post(client, "/api/series", b'{"tree": "mm\\u0000", "mbox": "x"}', tok),
        "body.tree",
        NUL,
    )
    refused(
        json_post(client, "/api/comparisons", b'{"kernels": ["#1", "\\u0000"]}', tok),
        "body.kernels[1]",
        NUL,
    )
    run = {
        "job": {"suite": "vm-scalability", "params": {"size": "1G\u0000"}},
        "kernel": {"commit": "a" * 40, "meta": {}},
        "machine": {"name": "m1"},
        "iteration": 0,
        "samples": {"vm-scalability.throughput": 1.0},
    }
    refused(json_post(client, "/api/runs", json.dumps(run).encode(), wtok), "params.size", NUL)
    run["job"]["params"] = {}
    run["kernel"]["meta"] = {"note\u0000": 1}
    refused(json_post(client, "/api/runs", json.dumps(run).encode(), wtok), "meta", NUL)
    run["kernel"]["meta"] = {}
    run["iteration"] = 2**31
    refused(json_post(client, "/api/runs", json.dumps(run).encode(), wtok), "iteration", "at most")
    r = json_post(client, "/api/comparisons", b'{"kernels": ["#2147483648", "#1"]}', tok)
    assert r.status_code == 404 and "unknown kernel build #2147483648" in r.get_json()["error"]
    with db(eng) as s:
        for table in (Series, Run, Comparison):
            assert s.scalar(select(func.count()).select_from(table)) == 0, table
    run["iteration"] = 0  # the same run, cleaned: stored
    assert json_post(client, "/api/runs", json.dumps(run).encode(), wtok).status_code == 201


def test_a_job_name_longer_than_a_file_name_is_a_400(eng, client):
    add_tree(eng)
    add_user(eng, "alice")
    mbox = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@example.org>\nSubject: [PATCH] mm: x\n\nx\n---\n"
        "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
    )
    body = {"mbox": mbox, "tree": "mm", "jobs": ["vm-scalability" * 100], "runs": 1}
    r = client.post("/api/series", json=body, headers=bearer(add_token(eng, "alice")))
    assert "no job definition" in refused(r)


def mbox_form(client, mbox: bytes) -> dict:
    import io

    return {
        "csrf_token": csrf_of(client, "/submit"),
        "tree": "mm",
        "jobs": ["vm-scalability"],
        "runs": "1",
        "mbox": (io.BytesIO(mbox), "s.mbox"),
    }


@pytest.mark.parametrize("case", ["deep-mime", "nul"])
def test_an_mbox_the_parser_or_database_refuses_is_a_400_on_the_form(eng, client, case):
    from stackbench.resultsdb.models import Series

    add_tree(eng)
    add_user(eng, "alice")
    login(client)
    mbox = hostile_mbox(case).encode()
    r = client.post("/submit", data=mbox_form(client, mbox), content_type="multipart/form-data")
    refused(r)
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Series)) == 0


def hostile_mbox(case: str) -> str:
    """MIME nested 1,000 deep (RecursionError in the email package), or NUL characters in
    the subject and body (which PostgreSQL refuses)."""
    head = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: A <a@example.org>\nMessage-ID: <{case}@x>\n"
    )
    if case == "deep-mime":
        parts = "".join(
            f'Content-Type: multipart/mixed; boundary="b{i}"\n\n--b{i}\n' for i in range(1000)
        )
        return head + "Subject: [PATCH] mm: x\nMIME-Version: 1.0\n" + parts + "\nx\n"
    return head + (
        "Subject: [PATCH] mm: x\x00y\n\nbody \x00 here\n---\n"
        "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
    )


def test_nul_in_forms_and_credentials_is_a_400(eng, client):
    import base64

    add_user(eng, "alice")
    r = client.post(
        "/login",
        data={"name": "ali\x00ce", "password": "x", "csrf_token": csrf_of(client, "/login")},
    )
    refused(r, "name", NUL)
    basic = base64.b64encode(b"ali\x00ce:sbt_x").decode()
    r = client.get(
        "/git/intake.git/info/refs?service=git-receive-pack",
        headers={"Authorization": f"Basic {basic}"},
    )
    refused(r, "user name", NUL)


def test_a_value_longer_than_its_column_is_a_400_not_a_500(eng, client):
    """What no door check knows: the database's own refusal still reads as a 400."""
    from stackbench.resultsdb.models import Tree

    add_user(eng, "root", admin=True)
    login(client, "root")
    r = client.post(
        "/admin/trees",
        data={"csrf_token": csrf_of(client, "/admin/"), "name": "t1", "default_base": "v" * 300},
    )
    refused(r, "cannot be stored", "too long")
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Tree).where(Tree.name == "t1")) == 0


@pytest.mark.parametrize("case", ["deep-mime", "nul"])
def test_cli_says_one_line_for_input_the_database_or_parser_refuses(eng, tmp_path, capsys, case):
    from stackbench import cli

    add_tree(eng, "linux-6.1")
    mbox = hostile_mbox(case)
    path = tmp_path / "s.mbox"
    path.write_text(mbox)
    rc = cli.main(["submit", "--mbox", str(path), "--base", "a" * 40, "--no-wait"])
    err = capsys.readouterr().err
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stackbench: error:"), err
    assert "unexpected" not in err and "Traceback" not in err
