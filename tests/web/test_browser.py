"""The web UI in a real browser: Debian's chromium driven by Playwright.

Sign in, submit a series through the form, watch its state change while a worker (a thread
writing through the models, as the pipeline does) builds and benchmarks it, open the
comparison and copy a table. Screenshots go to artifacts/screenshots/ (a CI artifact).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers.web import DATA, add_tree, add_user, db, populate_results
from sqlalchemy import select

pytest_plugins = ["helpers.web"]
pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-sync",
    "--disable-default-apps",
]


@pytest.fixture
def server(app):
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


@pytest.fixture
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield b
        b.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def worker(eng, series_id: int, done: threading.Event) -> None:
    """What the pipeline does to a series, slowly enough to be watched."""
    from stackbench.jobs.driver import lifecycle
    from stackbench.resultsdb.models import KernelBuild, Series

    try:
        time.sleep(1.0)
        with db(eng) as s:
            s.get(Series, series_id).state = "applied"
            s.commit()
        time.sleep(2.5)
        builds = populate_results(eng, series_id, runs=4)  # builds, then every run
        with db(eng) as s:
            for b in builds:  # built with a config, as the pipeline builds them
                s.get(KernelBuild, b).config_name = "tiny-guest"
            s.get(Series, series_id).state = "done"
            s.commit()
        # what the service does when a series ends
        lifecycle.publish_comparison(eng, series_id)
    finally:
        done.set()


def test_sign_in_submit_watch_compare_copy(eng, server, browser):
    from playwright.sync_api import expect

    from stackbench.resultsdb.models import Series

    add_user(eng, "alice", password="pw-alice-1")
    add_tree(eng, "mm")
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    page = ctx.new_page()
    page.set_default_timeout(30_000)

    page.goto(server + "/login")
    page.fill("#name", "alice")
    page.fill("#password", "pw-alice-1")
    page.click("#login-button")
    page.wait_for_url(server + "/")
    assert page.inner_text("header").count("alice") == 1
    shot(page, "01-series-list")

    page.goto(server + "/submit")
    page.set_input_files("#mbox", str(DATA / "series.mbox"))
    page.select_option("#tree", "mm")
    page.check("input[name=jobs][value=vm-scalability]")
    page.fill("#runs", "4")
    shot(page, "02-submit")
    page.click("#submit-button")
    page.wait_for_url("**/series/*")
    assert page.inner_text("#series-state") == "new"
    with db(eng) as s:
        sid = s.scalars(select(Series.id)).one()
    shot(page, "03-series-new")

    done = threading.Event()
    threading.Thread(target=worker, args=(eng, sid, done), daemon=True).start()
    # the page polls its state and reloads on change: first "applied", then "done"
    expect(page.locator("#series-state")).to_have_text("applied", timeout=30_000)
    shot(page, "04-series-applied")
    assert done.wait(60)
    expect(page.locator("#series-state")).to_have_text("done", timeout=30_000)
    assert page.locator("td.cell .st-done").count() == 3  # base and both commits
    # the page leads with its verdicts: the last commit lowered throughput
    expect(page.locator("#series-verdicts")).to_be_visible()
    assert page.locator("#series-verdicts .worse-text").count() >= 1
    assert "vm-scalability.throughput" in page.inner_text("#series-verdicts")
    shot(page, "05-series-done")

    page.click("#compare-link")
    page.wait_for_selector("#table-lkp")
    assert page.locator("tr.worse").count() >= 1  # the last commit lowered throughput
    assert page.locator("svg.plot").count() >= 2
    shot(page, "06-comparison")

    page.click("button[data-copy=table-lkp]")
    expect(page.locator("button[data-copy=table-lkp]")).to_have_text("copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == page.inner_text("#table-lkp") or copied == page.text_content("#table-lkp")
    assert "%change" in copied and "vm-scalability.throughput" in copied
    shot(page, "07-copied")
    permalink = page.get_attribute("#permalink", "href")
    page.goto(permalink)
    assert page.text_content("#table-lkp") == copied
    ctx.close()
    # the series' own comparison opens for someone who never signed in
    anon = browser.new_context()
    page = anon.new_page()
    page.goto(f"{server}/series/{sid}")
    page.click("#series-comparison")
    page.wait_for_selector("#table-lkp")
    assert "/login" not in page.url and page.locator("tr.worse").count() >= 1
    anon.close()


def test_pages_work_without_javascript(eng, server, browser):
    add_user(eng, "alice", password="pw-alice-1")
    add_tree(eng, "mm")
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto(server + "/login")
    page.fill("#name", "alice")
    page.fill("#password", "pw-alice-1")
    page.click("#login-button")
    page.goto(server + "/submit")
    page.fill("#mbox_text", (DATA / "series.mbox").read_text())
    page.select_option("#tree", "mm")
    page.check("input[name=jobs][value=vm-scalability]")
    page.click("#submit-button")
    page.wait_for_url("**/series/*")
    assert "mm/compaction: two small tweaks" in page.inner_text("h1")
    # without scripts the pending page falls back to <meta refresh>
    assert page.locator("noscript").count() >= 0
    shot(page, "08-no-js-series")
    ctx.close()
