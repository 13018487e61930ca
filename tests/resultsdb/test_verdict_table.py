"""The ``--style stackbench`` table from a real database: three kernels ingested with the real
ingest path, rendered through tables.render and through ``stackbench compare``."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

from stackbench.cli import main
from stackbench.errors import StackbenchError
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import render, verdict

BASE, SLOW, SAME = "a" * 40, "b" * 40, "c" * 40
JOB = ig.JobSpec("vm-scalability", "anon-w-seq-mt", {"test": "anon-w-seq-mt", "size": "8T"})


def _runs(commit: str, name: str, tput: float, free: float, seed: int) -> list[ig.RunData]:
    """Five runs with 0.3% noise; migrate_mbps only in the first run (one run: n/a)."""
    rng = np.random.default_rng(seed)
    out = []
    for it in range(5):
        samples = {
            "vm-scalability.throughput": [tput * (1 + 0.003 * rng.normal())],
            # per-run latency samples: their mean is the run's value
            "vm-scalability.free_time": list(free * (1 + 0.003 * rng.normal(size=3))),
            "vm-scalability.workload": [1e9 * (1 + 0.003 * rng.normal())],
        }
        if it == 0:
            samples["vm-scalability.migrate_mbps"] = [500.0]
        out.append(
            ig.RunData(
                job=JOB,
                kernel=ig.KernelSpec(commit, name=name),
                machine=ig.MachineSpec("qemu-vm", cpus=2),
                iteration=it,
                samples=samples,
            )
        )
    return out


@pytest.fixture
def three(eng):
    ig.ingest(eng, _runs(BASE, "base", 100000.0, 2.0, 1))
    # 10% less throughput, 20% slower freeing
    ig.ingest(eng, _runs(SLOW, "slow", 90000.0, 2.4, 2))
    ig.ingest(eng, _runs(SAME, "same", 100000.0, 2.0, 3))
    return eng


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(kernel name, metric) -> the row's cells, from the rendered table."""
    rows: dict[tuple[str, str], list[str]] = {}
    kernel = ""
    for line in text.splitlines():
        m = re.match(r"\s+new:\s+(\S+)", line)
        if m:
            kernel = m.group(1)
        elif re.match(r"  [\w-]+\.\S", line):
            cells = re.split(r"\s{2,}", line.strip())
            rows[(kernel, cells[0])] = cells
    return rows


def test_table_rows_and_outcomes(three):
    out = render.render(three, ["base", "slow", "same"], style="stackbench", all_rows=True)
    lines = out.splitlines()
    assert lines[0] == "== vm-scalability/anon-w-seq-mt  size=8T test=anon-w-seq-mt"
    assert lines[1] == f"   base: base ({BASE[:12]})"
    rows = _rows(out)
    metrics = [
        "vm-scalability.free_time",
        "vm-scalability.migrate_mbps",
        "vm-scalability.throughput",
        "vm-scalability.workload",
    ]
    # every metric for both later kernels, by metric name within each block
    assert [k for k in rows if k[0] == "slow"] == [("slow", m) for m in metrics]
    assert [k for k in rows if k[0] == "same"] == [("same", m) for m in metrics]

    tput = rows[("slow", "vm-scalability.throughput")]
    assert tput[6] == "worse"
    change = float(tput[4].rstrip("%"))
    interval, level = tput[5].split("] ")
    lo, hi = (float(x) for x in interval.strip("[").split(","))
    assert -11 < lo < change < hi < -9
    # the decision's interval, with its confidence: 1 - the 5-boot look's alpha
    assert level == f"{100 * (1 - verdict.verdict.DEFAULT.look_alpha(5)):.3f}%"
    assert tput[8] == "5/5"
    # base and new are the figures the change is of: means here, medians for the rank test
    assert tput[3] == "mean" and float(tput[2]) < float(tput[1])

    # a latency: rank path; five runs cannot reach the stringent level, so it asks for 10
    free = rows[("slow", "vm-scalability.free_time")]
    assert free[6] == "undecided" and free[8] == "5/5>10" and free[3] == "median"
    assert 15 < float(free[4].rstrip("%")) < 25

    # a count has no preferred direction; an unchanged kernel is "~"
    assert rows[("same", "vm-scalability.throughput")][6] == "~"
    assert rows[("same", "vm-scalability.workload")][6] == "~"
    assert rows[("slow", "vm-scalability.workload")][6] == "~"

    # one run per side: n/a, no statistics
    na = rows[("slow", "vm-scalability.migrate_mbps")]
    assert na[6] == "n/a" and na[4] == "-" and na[5] == "-" and na[7] == "-"
    assert "undecided rows need 10 boots per side" in out
    assert "Benjamini-Hochberg" in out and "per kernel and job" in out and "(8 rows)" in out


def test_compare_shares_the_verdicts_and_fdr_spans_the_family(three):
    with three.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, ["base", "slow", "same"]))
    blocks = verdict.compare(ds)
    assert [(j.test, k.name) for j, k, _ in blocks] == [
        ("anon-w-seq-mt", "slow"),
        ("anon-w-seq-mt", "same"),
    ]
    rows = {(k.name, name): (mb, mn, v) for _, k, rs in blocks for name, mb, mn, v in rs}
    mb, mn, v = rows[("slow", "vm-scalability.throughput")]
    assert mb == pytest.approx(100000, rel=0.01) and mn == pytest.approx(90000, rel=0.01)
    assert v.outcome == "changed" and v.direction == "worse" and v.test == "yuen-welch"
    # the q-value is BH-adjusted within its family (this kernel and job, headline metrics
    # apart), so never below the row's own p-value on the scale of the total alpha
    pol = verdict.verdict.DEFAULT
    assert v.q_value >= min(1.0, v.p_value * pol.alpha / pol.look_alpha(5))
    mb, mn, v = rows[("slow", "vm-scalability.free_time")]
    assert v.test == "mann-whitney" and v.estimator == "median"
    assert (mb, mn) == (v.base_est, v.new_est) and 1.9 < mb < 2.1 and 2.3 < mn < 2.5


def test_compare_judges_a_dataset_once_per_policy(three, monkeypatch):
    from stackbench.resultsdb import verdict as judge

    with three.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, ["base", "slow", "same"]))
    calls = []
    real = judge.judge_many
    monkeypatch.setattr(judge, "judge_many", lambda *a: calls.append(1) or real(*a))
    first = verdict.compare(ds)
    rows = len(first[0][2])
    first[0][2].clear()  # a caller's changes to its copy do not reach the next caller
    second = verdict.compare(ds)
    assert len(calls) == 1 and len(second[0][2]) == rows > 0
    verdict.compare(ds, judge.Policy(alpha=0.01))
    assert len(calls) == 2


def _cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["compare", "--style", "stackbench", *argv])
    assert rc == 0, err.getvalue()
    return out.getvalue()


def test_cli_compare_style_stackbench(three):
    out = _cli("--all", "base", SLOW[:8])
    rows = _rows(out)
    assert rows[("slow", "vm-scalability.throughput")][6] == "worse"
    assert ("same", "vm-scalability.throughput") not in rows
    # 4 rows in this table: the FDR statement names its families and counts the rows
    assert "per kernel and job, headline metrics one family" in out and "(4 rows)" in out


def test_default_view_lists_changed_and_undecided_headline_metrics(three):
    out = _cli("base", "slow", "same")
    rows = _rows(out)
    # slow: the throughput (-10%, worse); free_time is vm-scalability's side metric
    assert [k for k in rows if k[0] == "slow"] == [("slow", "vm-scalability.throughput")]
    assert [k for k in rows if k[0] == "same"] == []  # nothing changed or undecided
    lines = out.splitlines()
    slow_rest, same_rest = [ln for ln in lines if "more rows not shown" in ln]
    assert slow_rest == (
        "  3 more rows not shown (other metrics: 1 n/a, 1 undecided, 1 ~); --all lists them"
    )
    assert same_rest == (
        "  4 more rows not shown (headline: 1 ~; other metrics: 1 n/a, 1 undecided, 1 ~); "
        "--all lists them"
    )
    assert "  no headline metric changed or undecided" in lines
    # the FDR families hold every row, shown or not
    assert "(8 rows)" in out
    assert "need" not in out  # no headline metric asks for more boots


THP = ig.JobSpec("thpscale", "thpscale", {"thp": "always"})


def _thp_runs(commit: str, name: str, huge: float, both: float, seed: int) -> list[ig.RunData]:
    rng = np.random.default_rng(seed)
    return [
        ig.RunData(
            job=THP,
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-vm", cpus=2),
            iteration=it,
            samples={
                "thpscale.fault-huge-1": [huge * (1 + 0.01 * rng.normal())],
                "thpscale.fault-both-1": [both * (1 + 0.01 * rng.normal())],
                "thpscale.fault-base-1": [50 * (1 + 0.2 * it)],  # a side metric, wild
                "thpscale.Percentage huge-1": [90 + 0.1 * rng.normal()],
            },
        )
        for it in range(5)
    ]


def test_default_view_orders_headline_metrics_by_the_size_of_their_change(eng):
    ig.ingest(eng, _thp_runs(BASE, "base", 100.0, 200.0, 1))
    ig.ingest(eng, _thp_runs(SLOW, "slow", 130.0, 220.0, 2))  # +30% and +10% latency
    out = render.render(eng, ["base", "slow"], style="stackbench")
    rows = _rows(out)
    assert list(rows) == [("slow", "thpscale.fault-huge-1"), ("slow", "thpscale.fault-both-1")]
    # latencies decide from 10 boots on (rank test): undecided, and the footer says so
    assert {r[6] for r in rows.values()} == {"undecided"}
    assert "undecided headline metrics need 10 boots per side to decide." in out
    assert "2 more rows not shown (headline: 1 ~; other metrics: 1 undecided)" in out


def test_all_lists_every_row_by_name(three):
    out = _cli("--all", "base", "slow", "same")
    assert len(_rows(out)) == 8 and "not shown" not in out


def test_runs_of_one_boot_are_one_unit(eng):
    # five runs per kernel, all from one boot each: nothing can be decided, however tight
    data = []
    for commit, name, tput in ((BASE, "base", 100000.0), (SLOW, "slow", 90000.0)):
        for run in _runs(commit, name, tput, 2.0, 1):
            run.meta = {**(run.meta or {}), "boot_id": f"boot-{name}"}
            run.idempotency_key = f"{commit}-{run.iteration}"
            data.append(run)
    ig.ingest(eng, data)
    rows = _rows(render.render(eng, ["base", "slow"], style="stackbench", all_rows=True))
    tput = rows[("slow", "vm-scalability.throughput")]
    assert tput[6] == "undecided" and tput[8] == "1/1>3"


def test_single_kernel_is_a_clear_error(three):
    with pytest.raises(StackbenchError, match="compares kernels"):
        render.render(three, ["base"], style="stackbench")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["compare", "--style", "stackbench", "base"])
    assert rc == 1
    assert err.getvalue().startswith("stackbench: error: the stackbench table compares kernels")
