"""The seeds' tables from a real database: seed 001's latency percentiles, seed 003's
Success/Success(N) beside compact_* counters, and seed 002's per-run view and plot."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from stackbench.cli import main
from stackbench.errors import StackbenchError
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.tables import per_run, render

pytest_plugins = ["helpers.web"]

VANILLA, PATCHED = "a" * 40, "b" * 40
# seed 002's "Steals over 50 runs" (VANILLA PATCHED pairs, from its cover letter)
STEALS = """1504 227 1557 6 1391 13 1080 26 1057 40 1156 6 805 46 736 20 1747 2 1699 34 1269 13 1858 12
907 4 727 2 563 2 3094 2 10211 3 2621 1 5508 2 1060 2 538 3 5773 2 2199 0 3781 2 1387 1 4977 0
2865 1 1814 1 3739 1 6857 0 382 0 407 1 3784 0 297 0 298 0 6636 0 4188 0 242 0 9960 0 5816 0
354 0 287 0 261 0 140 1 2065 0 312 0 331 0 164 0 465 1 219 0"""
MEMINFO = "MemTotal:        1000000 kB\nMemFree:          %d kB\n"
SCENARIO = {"scenario": "fill-free-3of4", "vm.compaction_proactiveness": 20, "order": 9}


def _highalloc_runs(commit, name, lat_us, allocated, free_kb, counters, params, runs=2):
    job = ig.JobSpec("stress-highalloc", "stress-highalloc", dict(params))
    return [
        ig.RunData(
            job=job,
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-vm", cpus=2, memory_mb=1024),
            iteration=i,
            samples={
                "stress-highalloc.latency-pass1": [v * 1000 for v in lat_us],
                "stress-highalloc.allocated-pass1": [float(allocated)],
                "stress-highalloc.pass1": [allocated * 100 // len(lat_us)],
                **{f"mmtests-vmstat.{k}": [float(v)] for k, v in counters.items()},
            },
            sysstate={"start": {"/proc/meminfo": MEMINFO % free_kb}},
        )
        for i in range(runs)
    ]


@pytest.fixture
def highalloc(eng):
    # vanilla: attempts of 1..100 us; patched: 2..4 us with one slow tail
    ig.ingest(eng, _highalloc_runs(VANILLA, "vanilla", range(1, 101), 90, 204800, {}, SCENARIO))
    fast = [2] * 30 + [3] * 30 + [4] * 35 + [429] * 5
    ig.ingest(eng, _highalloc_runs(PATCHED, "patched", fast, 95, 204800, {}, SCENARIO))
    return eng


def test_alloc_latency_table_has_the_seed_layout(highalloc):
    out = render.render(highalloc, ["vanilla", "patched"], style="alloc-latency")
    assert out.startswith("(all latency values are in microseconds)\n")
    assert (
        "stress-highalloc scenario=fill-free-3of4 order=9 vm.compaction_proactiveness=20\n" in out
    )
    assert "- With vanilla (2 runs, 200 attempts of order 9, pass 1)\n" in out
    assert (
        "  percentile latency\n  \u2013\u2013\u2013\u2013\u2013\u2013\u2013\u2013\u2013\u2013 "
        in out
    )
    vanilla, patched = out.split("- With ")[1:]
    # nearest rank over the pooled attempts: p% of 1..100 us is p us
    rows = re.findall(r"^\t\s*(\d+)\s+(\d+)$", vanilla, re.M)
    assert rows == [(str(p), str(p)) for p in (5, 10, 25, 30, 40, 50, 60, 75, 80, 90, 95)]
    assert "\t   5       1\n" not in vanilla and "\t   5       5\n" in vanilla
    prow = dict(re.findall(r"^\t\s*(\d+)\s+(\d+)$", patched, re.M))
    assert (prow["5"], prow["50"], prow["95"]) == ("2", "3", "4")
    assert "\t  95       4\n" in patched
    # 90 huge pages of 2M out of 200 MB free
    assert (
        "Total 2M hugepages allocated = 90 (180M worth of hugepages out of 200M total free "
        "=> 90% of free memory could be allocated as hugepages) [mean of 2 runs]"
    ) in vanilla


def test_order_success_table_computes_success_and_success_n(eng):
    params = {"scenario": "spread-25-movable", "hogger": 400, "order": 3, "attempts": 100}
    counters = {"compact_stall": 710, "compact_success": 98, "compact_free_scanned": 5240676}
    # 25 of 100 order-3 attempts; 1600 kB free = 50 possible order-3 blocks
    ig.ingest(eng, _highalloc_runs(VANILLA, "base", [5] * 100, 25, 1600, counters, params))
    ig.ingest(eng, _highalloc_runs(PATCHED, "new", [5] * 100, 40, 3200, counters, params))
    out = render.render(eng, ["base", "new"], style="order-success")
    lines = out.splitlines()
    assert (
        lines[0] == "Test: spread-25-movable hogger=400 (order 3, 100 attempts, pass 1, runs 2, 2)"
    )
    assert lines[1].split() == ["base", "new"]
    rows = {ln[:26].strip(): ln[26:].split() for ln in lines[2:]}
    assert rows["compact_free_scanned"] == ["5240676", "5240676"]
    assert rows["compact_isolated"] == ["-", "-"]
    assert rows["compact_stall"] == ["710", "710"]
    assert rows["Success:"] == ["25", "40"]
    # base: 25 of 50 possible; new: 3200 kB = 100 blocks, capped at the 100 attempts
    assert rows["Success(N):"] == ["50", "40"]


def _steal_runs(commit, name, values):
    job = ig.JobSpec("stress-highalloc", "stress-highalloc", {"bgload": "compile"})
    return [
        ig.RunData(
            job=job,
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-vm", cpus=2),
            iteration=0,
            samples={"mmtests-vmstat.compact_stall": [v]},
            idempotency_key=f"{commit}-{i}",
        )
        for i, v in enumerate(values)
    ]


@pytest.fixture
def fifty(eng):
    nums = [float(x) for x in STEALS.split()]
    ig.ingest(eng, _steal_runs(VANILLA, "vanilla", nums[0::2]))
    ig.ingest(eng, _steal_runs(PATCHED, "patched", nums[1::2]))
    return eng


def test_per_run_view_shows_50_runs_and_the_steady_state(fifty):
    out = render.render(
        fifty, ["vanilla", "patched"], style="per-run", metric="mmtests-vmstat.compact_stall"
    )
    lines = out.splitlines()
    assert lines[0] == "mmtests-vmstat.compact_stall per run: stress-highalloc bgload=compile"
    assert lines[1].split() == ["run", "vanilla", "patched"]
    assert lines[2].split() == ["1", "1504.0", "227.0"]
    assert lines[51].split() == ["50", "219.0", "0.0"]
    # the patched kernel settles (seed 002: "enters a steady state"), vanilla never does
    assert lines[52].split() == ["steady", "no", "from", "run", "25"]


def test_steady_state_rule():
    assert per_run.steady_from([5.0] * 9) is None  # too short to tell
    assert per_run.steady_from([100.0, 50.0] + [3.0] * 10) == 3
    assert per_run.steady_from([float(i * 100) for i in range(30)]) is None


def test_cli_per_run_plot_and_its_errors(fifty, tmp_path):
    svg = tmp_path / "steals.svg"
    out, err = io.StringIO(), io.StringIO()
    argv = ["compare", "--style", "per-run", "--metric", "mmtests-vmstat.compact_stall"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "--plot", str(svg), "vanilla", "patched"])
    assert rc == 0, err.getvalue()
    text = svg.read_text()
    polylines = re.findall(r'points="([^"]+)"', text)
    assert [len(p.split()) for p in polylines] == [50, 50]
    assert ">vanilla</text>" in text and ">patched</text>" in text

    for bad, message in (
        (["compare", "--style", "per-run", "vanilla"], "the per-run view needs --metric NAME"),
        ([*argv[:3], "--metric", "nope", "vanilla"], "no metric 'nope' stored"),
        ([*argv, "--plot", str(tmp_path / "no" / "x.svg"), "vanilla"], "cannot write the plot"),
    ):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(bad)
        assert rc == 1
        assert err.getvalue().startswith("stackbench: error:") and message in err.getvalue()
        assert len(err.getvalue().strip().splitlines()) == 1


def test_seed_styles_on_kernels_without_such_runs_are_clear_errors(fifty):
    with pytest.raises(StackbenchError, match="no stress-highalloc attempt latencies"):
        render.render(fifty, ["vanilla"], style="alloc-latency")
    with pytest.raises(StackbenchError, match="no stress-highalloc attempts"):
        render.render(fifty, ["vanilla"], style="order-success")


def test_series_report_mail_carries_the_seed_tables_when_it_has_such_runs(eng):
    from test_mail import _cfg, _series

    from stackbench.mail import reports

    sid = _series(eng)  # vm-scalability runs on base "b"*40 and 1/1 "c"*40
    body = reports.series_report(eng, sid, _cfg(25)).body
    assert "seed 001's layout" not in body and "seed 003's layout" not in body
    params = {"scenario": "spread-25-movable", "order": 3, "attempts": 100}
    for commit, name, got in (("b" * 40, "base", 25), ("c" * 40, "1/1", 40)):
        ig.ingest(eng, _highalloc_runs(commit, name, [5] * 100, got, 1600, {}, params))
    body = reports.series_report(eng, sid, _cfg(25)).body
    assert "Allocation latency (seed 001's layout):" in body
    assert "- With 1/1 (2 runs, 200 attempts of order 3, pass 1)" in body
    assert "Order-N success beside compaction counters (seed 003's layout):" in body
    assert re.search(r"^Success\(N\):\s+50\s+80$", body, re.M)


def test_lkp_header_names_the_knobs(highalloc):
    out = render.render(highalloc, ["vanilla", "patched"], style="lkp", all_rows=True)
    print(out)
    keys, values = out.splitlines()[1:3]
    axes = dict(zip(keys.rstrip(":").split("/"), values.strip().split("/"), strict=True))
    assert axes["scenario"] == "fill-free-3of4"
    assert axes["vm.compaction_proactiveness"] == "20"


def test_comparison_page_shows_the_seed_tables(highalloc, client):
    from helpers.web import add_user, login

    add_user(highalloc, "alice")  # starting a comparison needs an account
    login(client)
    q = {"k": f"{VANILLA} {PATCHED}"}
    r = client.get("/compare/new", query_string=q, follow_redirects=True)
    html = r.get_data(as_text=True)
    assert r.status_code == 200, html[:500]
    assert "The seeds&#39; tables" in html or "The seeds' tables" in html
    assert 'id="table-alloc-latency"' in html and 'id="table-order-success"' in html
    key = r.request.path.rsplit("/", 1)[1]
    text = client.get(f"/compare/{key}/alloc-latency.txt").get_data(as_text=True)
    assert text.startswith("(all latency values are in microseconds)")
    assert client.get(f"/compare/{key}/per-run.txt").status_code == 404
