"""Every page of the web UI against a real PostgreSQL, through Flask's test client."""

from __future__ import annotations

import re

from helpers.web import (
    add_tree,
    add_user,
    finish,
    login,
    make_series,
    populate_results,
)

pytest_plugins = ["helpers.web"]


def test_series_list_newest_first_with_filters_and_strip(eng, client):
    add_tree(eng, "mm")
    add_tree(eng, "next")
    a = make_series(eng, title="older series", tree="mm")
    b = make_series(eng, title="newer series", tree="next", submitter="Bob", state="done")
    html = client.get("/").get_data(as_text=True)
    assert html.index("newer series") < html.index("older series")
    assert f'href="/series/{a}"' in html and f'href="/series/{b}"' in html
    assert html.count('class="strip"') >= 2
    only_mm = client.get("/?tree=mm").get_data(as_text=True)
    assert "older series" in only_mm and "newer series" not in only_mm
    by_bob = client.get("/?submitter=bob").get_data(as_text=True)
    assert "newer series" in by_bob and "older series" not in by_bob
    done = client.get("/?state=done").get_data(as_text=True)
    assert "newer series" in done and "older series" not in done


def test_series_page_matrix_and_compare_link(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    r = client.get(f"/series/{sid}")
    html = r.get_data(as_text=True)
    assert r.status_code == 200
    assert "Cover text" in html and "mm: patch number 2" in html
    assert 'http-equiv="refresh"' in html  # pending series refresh without JS
    populate_results(eng, sid)
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert "vm-scalability/anon-w-seq" in html
    # boots done and planned, never "done 10/3"
    assert 'done</span> <span class="boots">3 of 3 boots</span>' in html
    assert client.get(f"/series/{sid}/state.json").get_json()["commits"][0]["state"] == "done"
    r = client.get(f"/series/{sid}/compare")
    assert r.status_code == 302 and "/compare/new?" in r.headers["Location"]


def test_missing_things_are_404(eng, client):
    for path in (
        "/series/999",
        "/runs/5",
        "/builds/5/log",
        "/regressions/3",
        "/jobs/4",
        "/compare/nope",
    ):
        assert client.get(path).status_code == 404, path


def test_comparison_page_tables_verdicts_plots(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    populate_results(eng, sid, runs=4)
    add_user(eng, "alice")
    login(client)
    r = client.get(f"/series/{sid}/compare", follow_redirects=True)
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert "Permanent URL" in html
    # the last commit lowered throughput (higher is better): flagged as worse
    assert '<tr class="worse">' in html
    assert "vm-scalability.throughput" in html
    assert "<svg" in html and "THP and compaction counters" in html
    key = r.request.path.rsplit("/", 1)[1]
    # the permanent URL answers again, from the stored result
    again = client.get(f"/compare/{key}")
    assert again.status_code == 200


def test_static_pages_render(eng, client):
    add_user(eng, "root", admin=True)
    for path in ("/machines", "/jobs", "/regressions", "/compare", "/submit", "/login"):
        assert client.get(path).status_code == 200, path
    assert client.get("/admin/").status_code == 302  # sign in first
    login(client, "root", "pw-alice-1")
    assert client.get("/admin/").status_code == 200
    assert client.get("/account").status_code == 200


def test_compare_pick_form_every_metric_text_and_plots(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    build_ids = populate_results(eng, sid, runs=3)
    from helpers.web import db

    from stackbench.resultsdb.models import KernelBuild

    with db(eng) as s:
        commits = [s.get(KernelBuild, b).commit for b in build_ids]
    add_user(eng, "alice")
    login(client)  # starting a comparison needs an account
    picked = client.get("/compare/new", query_string={"k": f"{commits[0][:10]} {commits[2]}"})
    assert picked.status_code == 303
    key = picked.headers["Location"].rsplit("/", 1)[1]
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    assert "patch2" in page and "patch1" not in page.split("LKP table")[0]
    bad = client.get("/compare/new", query_string={"k": "0123456789abcdef"})
    assert bad.status_code == 400 and 'id="error-k"' in bad.get_data(as_text=True)
    assert client.get("/compare/new", query_string={"k": ""}).status_code == 400
    every = client.get(f"/compare/{key}/metrics").get_data(as_text=True)
    assert every.count("<tr class=") == 3 and 'id="table-stackbench"' in every
    text = client.get(f"/compare/{key}/lkp.txt")
    assert text.mimetype == "text/plain" and "vm-scalability.throughput" in text.get_data(True)
    assert client.get(f"/compare/{key}/nope.txt").status_code == 404
    import re

    src = re.search(r'src="(/compare/[^"]+\.svg)"', every).group(1)
    svg = client.get(src)
    assert svg.mimetype == "image/svg+xml" and svg.get_data(as_text=True).startswith("<svg")
    assert client.get(f"/compare/{key}/plot/999/999.svg").status_code == 404


def test_run_links_to_buildbot_and_logs(eng, app, client):
    from helpers.web import run_data

    from stackbench.resultsdb import ingest

    app.config["BUILDBOT_URL"] = "http://buildbot.example:8010/"
    d = run_data("9" * 40, 0, {"vm-scalability.throughput": 1.0})
    d.meta = {"buildbot_build": "42"}
    d.logs = {"console": b"Linux version 6.1\n"}
    rid = ingest.ingest(eng, [d]).inserted[0]
    html = client.get(f"/runs/{rid}").get_data(as_text=True)
    assert 'href="http://buildbot.example:8010/#/builds/42"' in html
    assert f'href="/runs/{rid}/logs/console"' in html
    d2 = run_data("8" * 40, 0, {"vm-scalability.throughput": 1.0})
    d2.meta = {"buildbot_url": "javascript:alert(1)"}
    rid2 = ingest.ingest(eng, [d2]).inserted[0]
    assert "javascript:" not in client.get(f"/runs/{rid2}").get_data(as_text=True)


def test_seed_experiments_page_lists_each_seed_with_its_definitions(eng, client):
    html = client.get("/jobs/seeds").get_data(as_text=True)
    assert "Experiments from the seeds" in html
    for seed, name in (
        ("000", "seed-000-thp-folio-compaction"),
        ("001", "seed-001-proactive-compaction"),
        ("002", "seed-002-steady-state"),
        ("003", "seed-003-compaction-hogger"),
        ("003", "seed-003-compaction-build"),
        ("004", "seed-004-thpscale-compaction"),
    ):
        assert f'id="seed-{seed}-{name}"' in html
    assert "mm: proactive compaction" in html and "compare --style alloc-latency" in html
    assert "vm.compaction_proactiveness: [0, 20]" in html
    jobs = client.get("/jobs").get_data(as_text=True)
    assert 'href="/jobs/seeds"' in jobs


def test_a_finished_series_leads_with_verdicts_and_its_public_comparison(eng, client):
    from stackbench.jobs.driver import lifecycle

    add_tree(eng)
    sid = make_series(eng, n=2)
    finish(eng, sid, populate_results(eng, sid, runs=4))
    # what the service does when a series ends (dispatcher and in-process pipeline)
    key = lifecycle.publish_comparison(eng, sid)
    assert key and lifecycle.publish_comparison(eng, sid) == key  # made once
    html = client.get(f"/series/{sid}").get_data(as_text=True)  # nobody signed in
    lead = html.index('id="series-verdicts"')
    assert lead < html.index("<h2>Patches</h2>") and lead < html.index('id="series-state"')
    rows = html[lead : html.index("</section>", lead)]
    # 2/2 lowered throughput by about 20%: worse, with its interval; 1/2 changed nothing
    worse = rows[rows.index("2/2") :]
    assert "<strong>worse</strong>" in worse and "vm-scalability.throughput" in worse
    first = worse.split("</tr>")[0]
    assert re.search(r"-(19|20)\.\d% <span class=\"muted\">\[-\d+\.\d+%, -\d+\.\d+%\]", first), (
        first
    )
    assert "<strong>" not in rows[rows.index("1/2") : rows.index("2/2")]
    assert f'href="/compare/{key}"' in rows
    # the link of the page and the series' compare route lead there, with no sign-in
    r = client.get(f"/series/{sid}/compare")
    assert r.status_code == 302 and r.headers["Location"].endswith(f"/compare/{key}")
    page = client.get(f"/compare/{key}")
    assert page.status_code == 200 and '<tr class="worse">' in page.get_data(as_text=True)


def test_a_series_that_ended_before_publishing_gets_its_comparison_on_first_ask(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    finish(eng, sid, populate_results(eng, sid))
    r = client.get(f"/series/{sid}/compare")
    assert r.status_code == 302 and "/compare/new" not in r.headers["Location"]
    assert client.get(r.headers["Location"]).status_code == 200
    assert 'id="series-verdicts"' in client.get(f"/series/{sid}").get_data(as_text=True)


def test_the_demos_last_lines_link_the_public_comparison(eng, client):
    from stackbench.cli import demo

    add_tree(eng)
    sid = make_series(eng)
    builds = populate_results(eng, sid)
    assert demo.comparison_line(eng, sid, 8080) == ""  # still running: nothing to link yet
    finish(eng, sid, builds)
    line = demo.comparison_line(eng, sid, 8080)
    url = re.search(r"http://127\.0\.0\.1:8080(/compare/\w+)$", line)
    assert url and "no account needed" in line
    assert client.get(url.group(1)).status_code == 200  # nobody signed in


def test_boots_past_the_plan_read_as_boots_done_and_planned(eng, client):
    add_tree(eng)
    sid = make_series(eng)
    populate_results(eng, sid, runs=10)  # more rounds took the 3 planned runs to 10 boots
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert "10 boots: 3 planned, 7 more for undecided metrics" in html
    assert "10/3" not in html


def test_events_keep_state_changes_and_fold_progress(eng, client):
    from stackbench.jobs.driver import lifecycle
    from stackbench.resultsdb import db, series_runs_store

    add_tree(eng)
    sid = make_series(eng, state="applied")
    with db.session(eng) as s:  # handed over: the k/N is the running attempt's
        series_runs_store.begin(s, sid, source="web", executor="buildbot")
    lifecycle.set_state(eng, sid, "building", "building 3 kernels", progress="0/3")
    for i in range(1, 4):
        lifecycle.set_state(eng, sid, "building", f"kernel {i} built", progress=f"{i}/3")
    for i in range(1, 43):  # one line per benchmark, as the rounds report them
        lifecycle.set_state(eng, sid, "running", f"benchmark {i} of 42 stored", progress=f"{i}/42")
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert '<span id="series-progress">42/42</span>' in html
    assert client.get(f"/api/series/{sid}").get_json()["progress"] == "42/42"
    lifecycle.set_state(eng, sid, "done", "3 kernels built, 42 benchmarks measured")
    assert client.get(f"/api/series/{sid}").get_json()["progress"] is None
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert 'id="series-progress"' not in html
    events = html[html.index("<h2>Events</h2>") :]
    assert events.count('<tr class="event">') == 3  # building, running, done
    assert "benchmark 42 of 42 stored" in events and "41 earlier running lines" in events
    assert "3 earlier building lines" in events
    assert events.index("3 kernels built, 42") < events.index("benchmark 42 of 42")
