"""``stackbench compare --style mmtests`` on the synthetic runs of tests/data/mmtests/, three
kernels side by side; every number below is worked out by hand from those files."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import cli

from stackbench.errors import StackbenchError
from stackbench.resultsdb.tables import mmtests, mmtests_vmstat, render

DATA = Path(__file__).parents[1] / "data" / "mmtests"
THREE = ["v6.8-rc1-base", "v6.8-rc1-patched", "mm-next"]


@pytest.fixture
def loaded(eng):
    for run in [*THREE, "ha-base", "ha-new"]:
        rc, _, err = cli("import", "mmtests", str(DATA / run))
        assert rc == 0, err
    return eng


def compare(*extra: str, kernels: list[str] = THREE) -> list[str]:
    rc, out, err = cli("compare", "--style", "mmtests", *kernels, *extra)
    assert rc == 0, err
    return out.rstrip("\n").split("\n")


HEADER3_LATENCY = [
    " " * 22 + f"{'v6.8-rc1':>23}{'v6.8-rc1':>23}{'mm':>23}",
    " " * 22 + f"{'base':>23}{'patched':>23}{'next':>23}",
]


def test_latency_three_kernels(loaded):
    lines = compare()
    assert lines[:2] == HEADER3_LATENCY
    # 8 statistics x (base, huge, both) x (1, 2 threads)
    assert len(lines) == 2 + 8 * 6
    assert [line[:22] for line in lines[2:8]] == [
        "Min       fault-base-1",
        "Min       fault-base-2",
        "Min       fault-huge-1",
        "Min       fault-huge-2",
        "Min       fault-both-1",
        "Min       fault-both-2",
    ]
    rows = {line[:22].rstrip(): line for line in lines[2:]}
    # base pooled huge-1 faults 100 200 300 | 100 100 200 -> 166.67; patched 50 60 70 |
    # 55 65 75 60 -> 435/7 = 62.14, gain 100 - 62.14*100/166.67 = 62.71 and a clear t-test;
    # mm-next 150 250 -> 200, 20% worse, two samples against six: not significant
    assert rows["Amean     fault-huge-1"] == (
        "Amean     fault-huge-1      166.67 (   0.00%)       62.14 *  62.71%*"
        "      200.00 ( -20.00%)"
    )
    # patched's second iteration had no base fault: mmtests adds one 0 sample, so the
    # pooled base faults are 20 and 0; Min 0 is "100% better"
    assert rows["Min       fault-base-1"] == (
        "Min       fault-base-1       10.00 (   0.00%)        0.00 ( 100.00%)"
        "       15.00 ( -50.00%)"
    )
    # stddev of 10,30 and of 20,0 are equal (0% gain); one sample has none: 0.00, no gain
    assert rows["Stddev    fault-base-1"] == (
        "Stddev    fault-base-1       14.14 (   0.00%)       14.14 (   0.00%)"
        "        0.00 (   0.00%)"
    )
    # CoeffVar of 10,30 = 14.14*100/20 = 70.71; of 20,0 = 141.42 -> 100% worse
    assert rows["CoeffVar  fault-base-1"].startswith(
        "CoeffVar  fault-base-1       70.71 (   0.00%)      141.42 (-100.00%)"
    )
    # best 50% of six huge-1 samples: the three lowest 100 100 100
    assert rows["BAmean-50 fault-huge-1"].startswith("BAmean-50 fault-huge-1      100.00 (")
    # best 95% of six: int(5.7) = 5 lowest: (100+100+100+200+200)/5 = 140
    assert rows["BAmean-95 fault-huge-1"].startswith("BAmean-95 fault-huge-1      140.00 (")
    assert rows["Max       fault-huge-2"] == (
        "Max       fault-huge-2      700.00 (   0.00%)      340.00 (  51.43%)"
        "      550.00 (  21.43%)"
    )
    # stars only ever on the mean rows
    assert all("*" not in line for line in lines if not line.startswith("Amean"))


def test_significance_rows(loaded):
    plain = compare()
    lines = compare("--table", "significance") if _has_table() else _render("significance")
    assert lines[: len(plain)] == plain
    sig = {line[:24]: line for line in lines[len(plain) :]}
    assert len(sig) == 6
    huge1 = sig["Significant fault-huge-1"]
    assert huge1.startswith("Significant fault-huge-1        0.00 (   0.00%)        1.00 (")
    assert huge1[70:82] == "        0.00"  # mm-next: not significant
    # p in percent where the gain usually is: 200 vs 166.67 on 2+6 samples, t = 0.55
    assert float(huge1[84:91]) > 10.0


def _has_table() -> bool:
    return "significance" in _table_choices()


def _table_choices() -> tuple[str, ...]:
    from stackbench.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    table = next(a for a in sub.choices["compare"]._actions if a.dest == "table")
    return tuple(table.choices or ())


def _render(table: str) -> list[str]:
    from stackbench.resultsdb import db

    out = render.render(db.engine(), THREE, style="mmtests", table=table)
    return out.rstrip("\n").split("\n")


def test_counts(loaded):
    # Percentage huge-1: base 3 of 4 in both iterations; patched 3/4 then 4/4, best 100
    # (+33.33%); mm-next 2 of 3 = 66.67, 66.67*100/75 - 100 = -11.11%
    assert compare("--table", "counts") == [
        " " * 17 + f"{'v6.8-rc1':>23}{'v6.8-rc1':>23}{'mm':>23}",
        " " * 17 + f"{'base':>23}{'patched':>23}{'next':>23}",
        "Percentage huge-1       75.00 (   0.00%)      100.00 (  33.33%)       66.67 ( -11.11%)",
        "Percentage huge-2      100.00 (   0.00%)      100.00 (   0.00%)      100.00 (   0.00%)",
    ]


def test_locality(loaded):
    lines = compare("--table", "locality")
    rows = {line[:24].rstrip(): line for line in lines[2:]}
    assert [line[:24].rstrip() for line in lines[2:7]] == [
        "Percentage local-base-1",
        "Percentage local-huge-1",
        "Percentage remote-base-1",
        "Percentage remote-huge-1",
        "Percentage uncertain-1",
    ]
    # base: iteration 0's only base fault was remote, iteration 1's unknown (1 of 4 faults)
    assert rows["Percentage remote-base-1"].startswith("Percentage remote-base-1      100.00 (")
    assert rows["Percentage uncertain-1"].startswith("Percentage uncertain-1         25.00 (")
    # base's second iteration, threads-2: one of two huge faults on a remote node
    assert rows["Percentage remote-huge-2"].startswith("Percentage remote-huge-2       50.00 (")


def test_duration_monitor(loaded):
    # the shortest of each iteration's times
    assert compare("--monitor", "duration") == [
        " " * 16 + f"{'v6.8-rc1':>12}{'v6.8-rc1':>12}{'mm':>12}",
        " " * 16 + f"{'base':>12}{'patched':>12}{'next':>12}",
        "Duration User           1.00        1.00        3.00",
        "Duration System         9.00        8.00       12.00",
        "Duration Elapsed       20.00       18.00       30.00",
    ]


def test_vmstat_monitor(loaded):
    lines = compare("--monitor", "vmstat")
    assert len(lines) == 2 + len(mmtests_vmstat.VMSTAT_ROWS)
    assert lines[0] == " " * 32 + f"{'v6.8-rc1':>15}{'v6.8-rc1':>15}{'mm':>15}"
    rows = {line[:32].rstrip(): line[32:] for line in lines[2:]}

    def values(title: str) -> list[str]:
        return rows[f"Ops {title}"].split()

    # pgfault - pgmajfault: base iteration 0 is 2000 - 2, iteration 1 is 1000
    assert values("Minor Faults") == ["1998.00", "2500.00", "100.00"]
    assert values("Compaction stalls") == ["100.00", "90.00", "0.00"]
    # per iteration, then the best: base 40/100 and 40/50 -> 80; patched 60/80, 45/90 -> 75
    assert values("Compaction efficiency") == ["80.00", "75.00", "0.00"]
    # base: 1000 migrate / 4000 free scanned = 25, then 2000 / 1000 = 200
    assert values("Compact scan efficiency") == ["200.00", "50.00", "0.00"]
    # (7*1000 + 19*200 + 1038*100 + 14*10) / 1e6 = 0.11474
    assert values("Compaction cost") == ["0.11", "0.06", "0.00"]
    assert values("THP fault fallback") == ["2.00", "0.00", "0.00"]
    assert values("Kswapd efficiency %") == ["100.00", "100.00", "100.00"]


def test_highalloc_table(loaded):
    assert compare(kernels=["ha-base", "ha-new"]) == [
        " " * 5 + f"{'ha':>23}{'ha':>23}",
        " " * 5 + f"{'base':>23}{'new':>23}",
        "Ops 1       50.00 (   0.00%)       75.00 (  50.00%)",
        "Ops 2       25.00 (   0.00%)       50.00 ( 100.00%)",
        "Ops 3       75.00 (   0.00%)      100.00 (  33.33%)",
    ]
    vm = compare("--monitor", "vmstat", kernels=["ha-base", "ha-new"])
    assert "Ops Compaction efficiency                 50.00          75.00" in vm


def test_unknown_kernel(loaded):
    rc, out, err = cli("compare", "--style", "mmtests", "v6.8-rc1-base", "nosuch")
    assert rc == 1
    assert out == ""
    assert err.strip().split("\n") == [
        "stackbench: error: unknown kernel 'nosuch' (not a stored commit, prefix or run name)"
    ]


def test_table_without_its_data(loaded):
    rc, _, err = cli("compare", "--style", "mmtests", "ha-base", "ha-new", "--table", "counts")
    assert rc == 1
    assert err.strip() == (
        "stackbench: error: no thpscale or thpchallenge or thpcompact results for these kernels "
        "(stored: stress-highalloc)"
    )


def test_unknown_table_and_monitor(loaded):
    from stackbench.resultsdb import db

    with pytest.raises(StackbenchError, match="unknown mmtests table 'nope'"):
        render.render(db.engine(), THREE, style="mmtests", table="nope")
    with pytest.raises(StackbenchError, match="unknown mmtests monitor 'nope'"):
        render.render(db.engine(), THREE, style="mmtests", monitor="nope")


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("baseline", ("baselin", "baseline")),
        ("patches", ("patche", "patches")),
        ("v6.8-rc1-base", ("v6.8-rc1", "base")),
        ("5.3-rc2-tip", ("5.3-rc2", "tip")),
        ("mm-next-2024", ("mm", "next-2024")),
        ("v6.8-rcx", ("v6.8", "rcx")),
    ],
)
def test_split_name(name, parts):
    assert mmtests.split_name(name) == parts
