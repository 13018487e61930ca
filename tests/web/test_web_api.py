"""The JSON API against a real PostgreSQL: every route, token auth, idempotent uploads, the
OpenAPI document, and the CLI's API client against a running server."""

from __future__ import annotations

import pytest
from helpers.web import (
    DATA,
    add_token,
    add_tree,
    add_user,
    bearer,
    db,
    make_series,
    populate_results,
    run_data,
    upload_body,
)
from sqlalchemy import func, select

pytest_plugins = ["helpers.web"]


def test_series_submit_with_token_and_read_back(eng, client):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    mbox = (DATA / "series.mbox").read_text()
    body = {"mbox": mbox, "tree": "mm", "jobs": ["vm-scalability"], "runs": 3}
    assert client.post("/api/series", json=body).status_code == 401  # no token
    r = client.post("/api/series", json=body, headers=bearer(tok))
    assert r.status_code == 201, r.get_json()
    d = r.get_json()
    assert d["state"] == "new" and d["base_commit"] == "1" * 40
    assert [p["subject"] for p in d["patches"]] == [
        "mm/compaction: skip pageblocks early",
        "mm/compaction: count skipped blocks",
    ]
    sid = d["id"]
    got = client.get(f"/api/series/{sid}").get_json()
    assert got["title"] == "mm/compaction: two small tweaks" and len(got["commits"]) == 3
    listing = client.get("/api/series?tree=mm").get_json()["series"]
    assert [x["id"] for x in listing] == [sid]
    patches = client.get(f"/api/series/{sid}/patches").get_json()["patches"]
    one = client.get(f"/api/patches/{patches[0]['id']}").get_json()
    assert "int b = 1;" in one["diff"]


def test_series_resubmitted_with_another_cover_letter_is_the_same_series(eng, client):
    """Same Message-ID and patches, another cover letter: 200 (nothing created) with the
    stored series and a note saying so, not 201."""
    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    mbox = (DATA / "series.mbox").read_text()
    body = {"mbox": mbox, "tree": "mm", "jobs": ["vm-scalability"], "runs": 3}
    first = client.post("/api/series", json=body, headers=bearer(tok))
    assert first.status_code == 201 and "note" not in first.get_json()
    again = {**body, "mbox": mbox.replace("Two tweaks to compaction.", "Two tweaks, reworded.")}
    r = client.post("/api/series", json=again, headers=bearer(tok))
    assert r.status_code == 200, r.get_json()
    sid = first.get_json()["id"]
    assert r.get_json()["id"] == sid
    assert r.get_json()["note"] == (
        f"series {sid} is already stored: same Message-ID and patches [new]; this mbox's "
        "cover letter differs: the stored one is kept"
    )


def test_series_submit_field_errors(eng, client):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    tok = add_token(eng, "alice")
    r = client.post(
        "/api/series",
        json={"mbox": "not an mbox at all", "tree": "nope", "jobs": [], "runs": 3},
        headers=bearer(tok),
    )
    assert r.status_code == 400
    fields = r.get_json()["fields"]
    assert set(fields) >= {"tree", "jobs", "mbox"}
    r = client.post(
        "/api/series",
        json={"mbox": "x", "tree": "mm", "jobs": ["a"], "runs": 99},
        headers=bearer(tok),
    )
    assert r.status_code == 400 and "runs" in r.get_json()["fields"]


def test_run_upload_is_idempotent_and_needs_worker_token(eng, client):
    add_user(eng, "alice")
    add_user(eng, "w1", worker=True)
    user_tok = add_token(eng, "alice")
    worker_tok = add_token(eng, "w1")
    assert client.post("/api/runs", json=upload_body()).status_code == 401
    assert client.post("/api/runs", json=upload_body(), headers=bearer(user_tok)).status_code == 403
    assert (
        client.post("/api/runs", json=upload_body(), headers=bearer("sbt_forged")).status_code
        == 401
    )
    r1 = client.post("/api/runs", json=upload_body(), headers=bearer(worker_tok))
    assert r1.status_code == 201 and r1.get_json()["created"] is True
    r2 = client.post("/api/runs", json=upload_body(), headers=bearer(worker_tok))
    assert r2.status_code == 200 and r2.get_json() == {**r1.get_json(), "created": False}
    from stackbench.resultsdb.models import Run

    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1
    rid = r1.get_json()["id"]
    run = client.get(f"/api/runs/{rid}").get_json()
    assert run["status"] == "done" and "console" in run["logs"]
    samples = client.get(f"/api/runs/{rid}/samples").get_json()["samples"]
    assert samples == {
        "thpscale.fault-huge-1": [1.0, 2.0, 3.0],
        "vm-scalability.throughput": [1234.5],
    }
    assert client.get(f"/runs/{rid}/logs/console").get_data() == b"booted\n"
    kernels = client.get("/api/kernels?commit=cccc").get_json()["kernels"]
    assert [k["name"] for k in kernels] == ["v6.1-test"]
    assert client.get(f"/api/kernels/{kernels[0]['id']}").get_json()["commit"] == "c" * 40
    assert client.get(f"/api/runs?kernel={kernels[0]['id']}").get_json()["runs"][0]["id"] == rid
    assert [m["name"] for m in client.get("/api/machines").get_json()["machines"]] == ["qemu-7"]
    assert client.get("/api/jobs").get_json()["jobs"][0]["runs"] == 1


@pytest.mark.parametrize(
    "change, where",
    [
        ({"iteration": -1}, "run.iteration"),
        ({"samples": {"x": ["NaN-ish"]}}, "run.samples.x"),
        # the door refuses NaN and Infinity in any JSON body (jsonb cannot hold them either)
        ({"samples": {"x": [float("inf")]}}, "body.samples.x[0]"),
        ({"logs": {"console": "***not base64***"}}, "run.logs.console"),
        ({"kernel": {"name": "no commit"}}, "run.kernel.commit"),
        ({"status": "exploded"}, "run.status"),
    ],
)
def test_bad_uploads_name_the_field_and_store_nothing(eng, client, change, where):
    from stackbench.resultsdb.models import Run

    add_user(eng, "w1", worker=True)
    tok = add_token(eng, "w1")
    body = upload_body(**change)
    if change.get("samples", {}).get("x") == [float("inf")]:
        import json

        r = client.post(
            "/api/runs",
            data=json.dumps(body).replace("Infinity", "1e999"),
            content_type="application/json",
            headers=bearer(tok),
        )
    else:
        r = client.post("/api/runs", json=body, headers=bearer(tok))
    assert r.status_code == 400, r.get_json()
    assert r.get_json()["error"].startswith(where), r.get_json()
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 0


def test_batch_upload_all_or_nothing_validation(eng, client):
    from stackbench.resultsdb.models import Run

    add_user(eng, "w1", worker=True)
    tok = add_token(eng, "w1")
    bad = upload_body(key="k2", iteration="one")
    r = client.post("/api/runs", json={"runs": [upload_body(key="k1"), bad]}, headers=bearer(tok))
    assert r.status_code == 400 and "runs[1].iteration" in r.get_json()["error"]
    with db(eng) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 0


def test_comparisons_in_each_style(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    build_ids = populate_results(eng, sid, runs=3)
    add_user(eng, "alice")
    auth = bearer(add_token(eng, "alice"))
    body = {"kernels": [f"#{b}" for b in build_ids]}
    r = client.post("/api/comparisons", json=body, headers=auth)
    assert r.status_code == 201
    key = r.get_json()["key"]
    again = client.post("/api/comparisons", json=body, headers=auth)
    assert again.get_json()["key"] == key  # the same comparison, the same permanent URL
    d = client.get(f"/api/comparisons/{key}").get_json()
    assert [k["id"] for k in d["kernels"]] == build_ids
    thr = next(m for m in d["metrics"] if m["metric"] == "vm-scalability.throughput")
    assert thr["values"][0] == [1000.0, 1003.0, 1006.0]
    lkp = client.get(f"/api/comparisons/{key}/tables/lkp")
    assert lkp.status_code == 200 and "vm-scalability.throughput" in lkp.get_json()["text"]
    text = client.get(f"/api/comparisons/{key}/tables/lkp?format=text")
    assert text.mimetype == "text/plain" and "%change" in text.get_data(as_text=True)
    st = client.get(f"/api/comparisons/{key}/tables/stackbench")
    assert st.status_code in (200, 404)
    assert client.get(f"/api/comparisons/{key}/tables/html").status_code == 404
    missing = client.post("/api/comparisons", json={"kernels": ["deadbeefdead"]}, headers=auth)
    assert missing.status_code == 404 and "unknown kernel" in missing.get_json()["error"]


def test_regressions_api(eng, client):
    from stackbench.resultsdb.models import Bisect, Job, KernelBuild, Metric, Regression

    with db(eng) as s:
        j = Job(suite="vm-scalability", test="t", params={}, params_key="t")
        m = Metric(name="vm-scalability.throughput", unit="KB/s", higher_is_better=True)
        g, b = KernelBuild(commit="a" * 40, name="good"), KernelBuild(commit="b" * 40, name="bad")
        s.add_all([j, m, g, b])
        s.flush()
        r = Regression(
            job_id=j.id,
            metric_id=m.id,
            good_build_id=g.id,
            bad_build_id=b.id,
            change_pct=-12.5,
            state="bisected",
            culprit="e" * 40,
            meta={"table": "   1000   -12.5%   875  vm-scalability.throughput"},
        )
        s.add(r)
        s.flush()
        s.add(
            Bisect(
                regression_id=r.id,
                good="a" * 40,
                bad="b" * 40,
                state="found",
                culprit="e" * 40,
                steps=[{"commit": "d" * 40, "result": "good"}],
            )
        )
        s.commit()
        rid = r.id
    lst = client.get("/api/regressions").get_json()["regressions"]
    assert [x["id"] for x in lst] == [rid]
    one = client.get(f"/api/regressions/{rid}").get_json()
    assert one["bisects"][0]["culprit"] == "e" * 40 and "875" in one["table"]
    html = client.get(f"/regressions/{rid}").get_data(as_text=True)
    assert "e" * 40 in html and "-12.5%" in html and "d" * 12 in html
    assert "-12.5%" in client.get("/regressions").get_data(as_text=True)


def test_openapi_documents_every_api_route(app, client):
    doc = client.get("/api/openapi.json").get_json()
    assert doc["openapi"].startswith("3.")
    documented = {(p, m.upper()) for p, ops in doc["paths"].items() for m in ops}
    served = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/") and rule.rule != "/api/":
            path = rule.rule
            for conv in (
                "<int:series_id>",
                "<int:patch_id>",
                "<int:build_id>",
                "<int:run_id>",
                "<int:reg_id>",
            ):
                path = path.replace(conv, "{id}")
            path = path.replace("<key>", "{key}").replace("<style>", "{style}")
            for m in rule.methods - {"HEAD", "OPTIONS"}:
                served.add((path, m))
    assert served == documented


def test_cli_api_client_against_running_server(eng, server, monkeypatch):
    from stackbench import apiclient
    from stackbench.errors import StackbenchError

    add_user(eng, "alice")
    add_user(eng, "w1", worker=True)
    add_tree(eng, "mm")
    monkeypatch.setenv("STACKBENCH_URL", server)
    monkeypatch.setenv("STACKBENCH_TOKEN", add_token(eng, "alice"))
    c = apiclient.client()
    assert c is not None
    series = c.submit(DATA / "series.mbox", tree="mm", jobs=["vm-scalability"], runs=2)
    assert series["state"] == "new" and series["url"].startswith(server)
    with pytest.raises(apiclient.ApiError) as err:
        c.submit(b"garbage", tree="mm", jobs=["vm-scalability"])
    assert "mbox" in err.value.fields
    worker = apiclient.ApiClient(server, add_token(eng, "w1"))
    runs = [
        run_data(k, it, {"vm-scalability.throughput": 900.0 + 50 * i + it}, key=f"{k}{it}")
        for i, k in enumerate(["1" * 40, "2" * 40])
        for it in range(3)
    ]
    out = worker.upload_runs(runs)
    assert all(r["created"] for r in out) and len(out) == 6
    assert not any(r["created"] for r in worker.upload_runs(runs))
    table = c.compare(["1" * 40, "2" * 40], style="lkp", all_rows=True)
    assert "vm-scalability.throughput" in table and "%change" in table
    with pytest.raises(StackbenchError, match="unknown kernel"):
        c.compare(["feedfacefeed"])
    monkeypatch.delenv("STACKBENCH_URL")
    assert apiclient.client() is None


def test_base_falls_back_to_tree_default_else_field_error(eng, client):
    from stackbench.resultsdb.models import Tree

    add_user(eng, "alice")
    add_tree(eng, "mm")  # default base v6.1
    with db(eng) as s:
        s.add(Tree(name="bare", url="", default_base=""))
        s.commit()
    tok = add_token(eng, "alice")
    mbox = (DATA / "hostile.mbox").read_text()  # no base-commit: line
    body = {"mbox": mbox, "jobs": ["vm-scalability"], "runs": 2}
    r = client.post("/api/series", json={**body, "tree": "bare"}, headers=bearer(tok))
    assert r.status_code == 400 and "base" in r.get_json()["fields"]
    r = client.post("/api/series", json={**body, "tree": "mm"}, headers=bearer(tok))
    assert r.status_code == 201 and r.get_json()["base_ref"] == "v6.1"
