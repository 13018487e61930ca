"""The profile section where users read it, from profiles stored as an evidence boot stores
them (jobs/executors/profile_stage.save): ``compare --style stackbench``, the comparison
page, the series page and the comparison's JSON; against a real PostgreSQL, the pages
through Flask's test client. Real profiles come from a real boot in test_profile_guest.py."""

from __future__ import annotations

import re

import pytest
from helpers.web import (  # noqa: F401
    add_tree,
    app,
    changed_function,
    client,
    finished_series,
    make_series,
    populate_results,
)
from sqlalchemy import update

from stackbench.jobs.driver import lifecycle
from stackbench.jobs.executors import profile_stage
from stackbench.resultsdb import coverage_store, profile_store
from stackbench.resultsdb import db as rdb
from stackbench.resultsdb.models import KernelBuild, Patch, Series
from stackbench.resultsdb.tables import render

JOB = "vm-scalability"


def _prof(**self_share: float) -> dict:
    return {"event": "cpu-clock", "samples": 1000, "self": self_share,
            "children": {k: v + 0.1 for k, v in self_share.items()}}  # fmt: skip


def _stored(eng) -> tuple[int, list[int]]:
    """A finished 2-patch series: 1/2 changes compaction_alloc, whose share grows from 2% to
    14%; 2/2's evidence boot could not run perf."""
    sid, build_ids = finished_series(eng, n=2)
    with rdb.session(eng) as s:
        patches = {p.idx: p.id for p in s.query(Patch).filter(Patch.series_id == sid)}
        fn = changed_function("compaction_alloc", static=True)
        coverage_store.save_functions(s, patches[1], [fn])
        coverage_store.save_functions(s, patches[2], [])
        base, one = build_ids[0], build_ids[1]
        profile_stage.save(
            s, base, JOB, {"profile": _prof(clear_page_erms=0.5, compaction_alloc=0.02)}
        )
        got = _prof(clear_page_erms=0.4, **{"compaction_alloc.isra.0": 0.14})
        profile_stage.save(s, one, JOB, {"calls": {}, "profile": got})
        profile_stage.save(s, build_ids[2], JOB, {"error": "the evidence run lost: no results"})
    return sid, build_ids


def test_the_stackbench_table_lists_the_moved_symbols_in_lkp_names(eng) -> None:
    _sid, build_ids = _stored(eng)
    with rdb.session(eng) as s:
        commits = [s.get(KernelBuild, b).commit for b in build_ids]
    text = render.render(eng, commits, style="stackbench")
    print(text)
    section = text[text.index("== profile") :]
    lines = section.splitlines()
    # compaction_alloc's clone: the patched function, not in the base's profile by that name
    row = next(ln for ln in lines if "compaction_alloc.isra.0" in ln)
    assert re.search(
        r"-\s+\+14\.00\s+14\.00\s+\*perf-profile\.self\.cycles-pp\.compaction_alloc\.isra\.0", row
    )
    row = next(ln for ln in lines if "cycles-pp.clear_page_erms" in ln)
    assert re.search(r"50\.00\s+-10\.00\s+40\.00\s+ perf-profile", row), row
    # largest move first
    order = [ln for ln in lines if "perf-profile.self" in ln]
    assert "compaction_alloc.isra.0" in order[0]
    assert "(patched: compaction_alloc)" in section
    assert re.search(r"vm-scalability: not profiled: the evidence run lost", section)


def test_the_pages_and_the_json_show_the_profile(eng, client) -> None:  # noqa: F811
    sid, _ids = _stored(eng)
    key = lifecycle.publish_comparison(eng, sid)
    assert key
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    section = page[page.index('id="profile"') :]
    assert 'compaction_alloc.isra.0 <strong class="patched-mark">patched</strong>' in section
    # the base's compaction_alloc (not a clone there) is the patched function too
    assert section.count('class="patched-mark"') == 2
    assert 'compaction_alloc <strong class="patched-mark">' in section
    assert "not profiled: the evidence run lost" in section
    doc = client.get(f"/api/comparisons/{key}").get_json()
    rows = {r["kernel"]: r for r in doc["profile"]}
    (syms,) = rows["patch1"]["jobs"].values()
    top = syms[0]
    assert top["lkp"] == "perf-profile.self.cycles-pp.compaction_alloc.isra.0"
    assert top["patched"] is True and abs(top["delta"] - 0.14) < 1e-9
    assert rows["patch2"]["errors"][JOB].startswith("the evidence run lost")
    series_page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert 'id="profile"' in series_page and "patched-mark" in series_page
    text = client.get(f"/api/comparisons/{key}/tables/stackbench?format=text").get_data(
        as_text=True
    )
    assert "== profile" in text


def test_moved_keeps_the_patched_function_below_the_top() -> None:
    base = {"self": {f"f{i}": 0.01 * i for i in range(20)} | {"target": 0.001}}
    new = {"self": {f"f{i}": 0.02 * i for i in range(20)} | {"target": 0.001}}
    rows = profile_store.moved(new, base, {"target"}, top=5)
    assert [r.symbol for r in rows[:5]] == ["f19", "f18", "f17", "f16", "f15"]
    assert rows[-1].symbol == "target" and rows[-1].patched and rows[-1].delta == 0


# rows as perf report --children -F overhead_children,overhead,sample,sym prints them (from
# a real evidence boot of the tiny guest)
REPORT = """\
    42.10%    40.96%           539  [k] clear_page_erms
    41.87%     0.08%             1  [k] do_huge_pmd_anonymous_page
    46.43%     0.00%             0  [.] 0x0000000000401bf1
     3.65%     2.00%            26  [.] 0x00000000004610d3
     0.50%     0.50%             7  [k] 0xffffffff81a00000
"""


def test_the_report_rows_become_kernel_shares() -> None:
    from stackbench.jobs.benchmarks import perfprof

    samples, self_share, children = perfprof.parse_report(REPORT)
    assert samples == 539 + 1 + 26 + 7
    assert self_share["clear_page_erms"] == pytest.approx(0.4096)
    assert self_share[perfprof.USER] == pytest.approx(0.02)
    assert self_share[perfprof.UNRESOLVED] == pytest.approx(0.005)
    # a user address on a kernel call chain is no kernel symbol's children share
    assert set(children) == {"clear_page_erms", "do_huge_pmd_anonymous_page"}
    assert children["do_huge_pmd_anonymous_page"] == pytest.approx(0.4187)


def test_a_caller_holding_a_folded_in_patched_function_is_marked(eng, client) -> None:  # noqa: F811
    """The demo's 3/3 changes __do_huge_pmd_anonymous_page, which gcc folds into its one
    caller at -Os: it has no symbol, the evidence boot counted it untraceable, and its code
    runs in do_huge_pmd_anonymous_page, whose samples are the patched ones."""
    add_tree(eng)
    sid = make_series(eng, n=1)
    build_ids = populate_results(eng, sid, runs=3)
    inner, outer = "__do_huge_pmd_anonymous_page", "do_huge_pmd_anonymous_page"
    with rdb.session(eng) as s:
        s.execute(update(Series).where(Series.id == sid).values(state="done"))
        s.execute(
            update(KernelBuild)
            .where(KernelBuild.id.in_(build_ids))
            .values(config_name="tiny-guest")
        )
        (patch,) = s.query(Patch).filter(Patch.series_id == sid)
        fn = {"name": inner, "path": "mm/huge_memory.c", "change": "modified", "static": True,
              "inline": False, "callers": {inner: [outer]}}  # fmt: skip
        coverage_store.save_functions(s, patch.id, [fn])
        for b, share in zip(build_ids, (0.01, 0.03), strict=True):
            got = {"calls": {outer: 40}, "untraceable": [inner],
                   "profile": _prof(clear_page_erms=0.4 + share, **{outer: share})}  # fmt: skip
            coverage_store.save_counts(s, b, JOB, got)
            profile_stage.save(s, b, JOB, got)
        commits = [s.get(KernelBuild, b).commit for b in build_ids]
    text = render.render(eng, commits, style="stackbench")
    section = text[text.index("== profile") :]
    print(section)
    (row,) = [ln for ln in section.splitlines() if f"cycles-pp.{outer}" in ln]
    assert f"*perf-profile.self.cycles-pp.{outer}" in row and f"(holds {inner}, inlined)" in row
    assert "*perf-profile.self.cycles-pp.clear_page_erms" not in section
    assert "no patched function has a sample" not in section
    key = lifecycle.publish_comparison(eng, sid)
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    part = page[page.index('id="profile"') :]
    assert f'{outer} <strong class="patched-mark">patched</strong>' in part
    assert f"(holds {inner}, inlined)" in part
    (jrow,) = client.get(f"/api/comparisons/{key}").get_json()["profile"]
    (syms,) = jrow["jobs"].values()
    assert [(m["symbol"], m["holds"]) for m in syms if m["patched"]] == [(outer, [inner])]
