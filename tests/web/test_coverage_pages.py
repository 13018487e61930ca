"""The coverage report where users read it, from counts stored as an evidence boot stores
them (stackbench.resultsdb.coverage_store): ``compare --style stackbench``, the comparison
page, the series page and the comparison's JSON; against a real PostgreSQL, the pages
through Flask's test client. The counts come from a real boot in test_coverage_guest.py."""

from __future__ import annotations

import re

from helpers.web import app, changed_function, client, finished_series  # noqa: F401

from stackbench.jobs.driver import lifecycle
from stackbench.resultsdb import coverage_store
from stackbench.resultsdb import db as rdb
from stackbench.resultsdb.models import KernelBuild, Patch
from stackbench.resultsdb.tables import render


def _stored(eng) -> tuple[int, list[int]]:
    """A finished 3-patch series: 1/3 changes a function the job calls, 2/3 only a comment,
    3/3 a function the job never calls."""
    sid, build_ids = finished_series(eng, n=3)
    with rdb.session(eng) as s:
        patches = {p.idx: p.id for p in s.query(Patch).filter(Patch.series_id == sid)}
        coverage_store.save_functions(
            s, patches[1], [changed_function("compact_zone", static=True)]
        )
        coverage_store.save_functions(s, patches[2], [])
        coverage_store.save_functions(
            s, patches[3], [changed_function("sysctl_compaction_handler")]
        )
        for b, zone in zip(build_ids, (12001, 12345, 12002, 11999), strict=True):
            counted = {"compact_zone": zone, "sysctl_compaction_handler": 0}
            coverage_store.save_counts(
                s, b, "vm-scalability", {"calls": counted, "untraceable": []}
            )
    return sid, build_ids


def test_the_stackbench_table_flags_the_commit_whose_code_did_not_run(eng) -> None:
    _sid, build_ids = _stored(eng)
    with rdb.session(eng) as s:
        commits = [s.get(KernelBuild, b).commit for b in build_ids]
    text = render.render(eng, commits, style="stackbench")
    flagged = [ln for ln in text.splitlines() if ln.startswith("   new:") and "[" in ln]
    assert len(flagged) == 1 and "patch3" in flagged[0], flagged
    assert coverage_store.NOT_RUN in flagged[0]
    assert "vm-scalability: compact_zone (static) 12,345 calls (base 12,001)" in text
    assert re.search(r"patch2\S*: no function changed", text)
    assert (
        "vm-scalability: sysctl_compaction_handler 0 calls: this benchmark did not run the "
        "changed code"
    ) in text


def test_the_pages_and_the_json_show_the_coverage(eng, client) -> None:  # noqa: F811
    sid, _ids = _stored(eng)
    key = lifecycle.publish_comparison(eng, sid)
    assert key
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    section = page[page.index('id="coverage"') :]
    assert "no function changed" in section
    assert "0: this benchmark did not run the changed code" in section
    assert "12,345" in section and "12,001" in section
    doc = client.get(f"/api/comparisons/{key}").get_json()
    rows = {r["kernel"]: r for r in doc["coverage"]}
    assert rows["patch3"]["flag"] == coverage_store.NOT_RUN
    assert rows["patch2"]["no_function_changed"] is True
    assert rows["patch1"]["jobs"]["vm-scalability"][0]["calls"] == 12345
    assert "[" + coverage_store.NOT_RUN + "]" in client.get(
        f"/api/comparisons/{key}/tables/stackbench?format=text"
    ).get_data(as_text=True)
    series_page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert series_page.count('class="coverage-flag"') == 1
    assert 'id="coverage"' in series_page
    patches = client.get(f"/api/series/{sid}/patches").get_json()["patches"]
    assert [p["changed_functions"] is not None for p in patches] == [True, True, True]


def test_an_overrun_count_is_marked_a_lower_bound_and_the_series_json_has_it(eng, client) -> None:  # noqa: F811
    """The trace buffer dropped events on 1/3's evidence boot (funcprof-overrun): its count
    is shown as a lower bound on the page, in the text table and in both JSON documents."""
    sid, build_ids = _stored(eng)
    with rdb.session(eng) as s:
        counted = {"compact_zone": 12345, "sysctl_compaction_handler": 0}
        coverage_store.save_counts(
            s, build_ids[1], "vm-scalability",
            {"calls": counted, "untraceable": [], "lost_events": 4096},
        )  # fmt: skip
    assert client.get(f"/api/series/{sid}").get_json()["coverage"] is None  # not yet compared
    key = lifecycle.publish_comparison(eng, sid)
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    section = page[page.index('id="coverage"') :]
    assert "4,096 trace events lost: a lower bound" in section
    assert re.search(r'class="lower-bound"[^>]*>&ge;&nbsp;</span>12,345', section)
    text = client.get(f"/api/comparisons/{key}/tables/stackbench?format=text").get_data(
        as_text=True
    )
    assert "compact_zone (static) at least 12,345 calls (base 12,001) [4,096 trace events" in text
    rows = client.get(f"/api/series/{sid}").get_json()["coverage"]
    # labelled as the series labels its commits
    assert [r["kernel"] for r in rows] == ["1/3", "2/3", "3/3"], rows
    assert [r["flag"] for r in rows] == [None, None, coverage_store.NOT_RUN]
    assert rows[0]["jobs"]["vm-scalability"][0]["lower_bound"] is True
    # the comparison's own JSON still names its kernels its way
    doc = client.get(f"/api/comparisons/{key}").get_json()
    one = {r["kernel"]: r for r in doc["coverage"]}["patch1"]["jobs"]["vm-scalability"][0]
    assert one["lower_bound"] is True and one["lost_events"] == 4096
    assert one["base_lower_bound"] is False
