"""The tables stackbench prints read back as claims: every row of ``compare --style lkp``
and ``--style mmtests`` on stored runs is a claim whose numbers are the stored runs' own
(each row's statistic of their samples, checked for every row)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from stackbench.cli import main
from stackbench.patches import claims
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import lkp, mmtests
from stackbench.resultsdb.tables import mmtests_stats as st

DATA = Path(__file__).resolve().parent / "data"
LKP_KERNELS = [
    "1405df66cbe219b0bf6355bc3d60361a8376b6b4",
    "5b77236920ce1f89b9f6b0ad44a3220b49fe7b1d",
    "9e26ce95028e83a061cf35e9b09b22c90d9b94e2",
]
CHANGE = re.compile(r"^[-+]\d+(\.\d+)?%$")
MM_KERNELS = ["v6.8-rc1-base", "v6.8-rc1-patched", "mm-next"]


def cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    assert rc == 0, err.getvalue()
    return out.getvalue()


def dataset(eng, refs: list[str]) -> query.Dataset:
    with eng.connect() as conn:
        return query.load(conn, query.resolve_kernels(conn, refs))


def perf_rows(table: str) -> list[str]:
    """The table's stat rows that carry a %change in every later column."""
    out = []
    for line in table.splitlines():
        words = line.split()
        if (
            words
            and claims.number(words[0]) is not None
            and "%" in line
            and not (words[-1].endswith("%") or words[-1].startswith("perf-profile"))
        ):
            out.append(line)
    return out


@pytest.mark.parametrize("every", [False, True], ids=["changed", "all"])
def test_lkp_table_reads_back_as_the_stored_runs(eng, every):
    cli("import", "lkp", str(DATA / "lkp" / "good"))
    table = cli("compare", "--style", "lkp", *LKP_KERNELS, *(["--all"] if every else []))
    got = claims.parse(table)
    rows = perf_rows(table)
    changes = sum(1 for ln in rows for w in ln.split() if CHANGE.match(w))
    assert rows and len(got) == changes
    ds = dataset(eng, LKP_KERNELS)
    stored = {}
    for g in lkp.build_groups(ds):
        for r in lkp.calc_stats(lkp.all_stat_keys(g), g):
            if not r.failure:
                # the groups here differ in the kernels that ran them
                stored[(tuple(c.kernel.label for c in g.columns), r.stat)] = r
    for c in got:
        assert c.style == "lkp" and c.job["suite"] == "vm-scalability"
        # the imported runs without a test axis name their case in the result path
        assert c.job.get("test") or c.job["path_params"].endswith("-anon-w-rand")
        assert c.base == LKP_KERNELS[0] and set(c.columns) <= set(LKP_KERNELS)
        r = stored[(c.columns, c.metric)]
        i = c.column
        assert c.printed_pct == pytest.approx(r.changes[i - 1], abs=0.051), c
        assert c.value == pytest.approx(r.avgs[i], rel=1e-3, abs=0.006), c
        assert c.base_value == pytest.approx(r.avgs[0], rel=1e-3, abs=0.006), c
        sd = 100 * r.stddevs[i] / r.avgs[i] if r.avgs[i] and r.stddevs[i] > 0 else 0
        if sd > 2:
            assert c.stddev_pct == pytest.approx(sd, abs=1), c
        else:
            assert c.stddev_pct is None, c


@pytest.fixture
def mm_loaded(eng):
    for run in [*MM_KERNELS, "ha-base", "ha-new"]:
        cli("import", "mmtests", str(DATA / "mmtests" / run))
    return eng


def row_statistic(name: str | None, higher: bool):
    """The statistic an mmtests row names, computed as mmtests does (tables/mmtests_stats)."""
    fixed = {"Min": np.min, "Max": np.max, "Amean": st.amean, "Hmean": st.hmean,
             "Stddev": st.stddev, "CoeffVar": st.coeffvar}  # fmt: skip
    if name in fixed:
        return fixed[name]
    best = re.fullmatch(r"B[AH]mean-(\d+)", name or "")
    assert best, f"a row statistic the round trip does not know: {name!r}"
    return lambda d: st.best_mean(d, int(best[1]), higher)


def gain_rows(table: str) -> list[str]:
    return [ln for ln in table.splitlines() if "%)" in ln or "%*" in ln]


@pytest.mark.parametrize("which", ["latency", "counts"])
def test_mmtests_table_reads_back_as_the_stored_runs(mm_loaded, which):
    table = cli("compare", "--style", "mmtests", *MM_KERNELS, "--table", which)
    got = claims.parse(table)
    rows = gain_rows(table)
    assert rows and len(got) == 2 * len(rows)
    for c, line in zip(got[::2], rows, strict=True):
        assert line.split()[:2] == c.metric.split()
    assert {(c.kernel, c.base) for c in got} == {
        (MM_KERNELS[1], MM_KERNELS[0]), (MM_KERNELS[2], MM_KERNELS[0]),
    }  # fmt: skip
    series = mmtests.collect(dataset(mm_loaded, MM_KERNELS), "thpscale")
    ids = {k.label: k.id for k in dataset(mm_loaded, MM_KERNELS).kernels}
    for c in got:
        # every row's two numbers are the statistic it names of the stored runs' samples
        if c.statistic == "Percentage":  # one value per run: the best run's
            s = series[c.metric]
            want = [s.best(ids[k], True) for k in (c.base, c.kernel)]
        else:
            s = series[c.metric.split(maxsplit=1)[1]]
            stat = row_statistic(c.statistic, s.higher_is_better)
            want = [stat(s.pooled(ids[k])) for k in (c.base, c.kernel)]
        # a statistic with no value (the Stddev of one sample) is printed 0.00, as mmtests does
        want = [0.0 if st.isnan(w) else w for w in want]
        assert [c.base_value, c.value] == pytest.approx(want, abs=0.006), c
    if which == "latency":
        # the significance marks read back: starred means, unstarred means not significant
        stars = [ln for ln in rows if "%*" in ln]
        sig = [c for c in got if c.significant]
        assert stars and len(sig) == sum(ln.count("%*") for ln in stars)
        assert {c.significant for c in got if c.statistic == "Amean"} == {True, False}


def test_mmtests_monitor_and_highalloc_read_back(mm_loaded):
    table = cli("compare", "--style", "mmtests", *MM_KERNELS, "--monitor", "vmstat")
    got = claims.parse(table)
    numbers = [ln.split() for ln in table.splitlines() if ln.startswith("Ops ")]
    want = [
        (" ".join(w[:-3]), k, float(w[-3]), float(w[-3 + i]))
        for w in numbers
        for i, k in ((1, MM_KERNELS[1]), (2, MM_KERNELS[2]))
        if float(w[-3]) != 0 or float(w[-3 + i]) == 0
    ]
    assert [(c.metric, c.kernel, c.base_value, c.value) for c in got] == want
    table = cli("compare", "--style", "mmtests", "ha-base", "ha-new", "--table", "highalloc")
    got = claims.parse(table)
    assert got and len(got) == len(gain_rows(table))
    assert {c.job["suite"] for c in got} == {"stress-highalloc"}
    assert {c.metric for c in got} <= {"Ops 1", "Ops 2", "Ops 3"}
