"""A pair's verdict must not depend on what else is on the page (issue 27): the series'
report of every commit and ``compare BASE 3/3`` give 3/3 the same verdicts, and a job's
headline metric keeps its power beside many side counters.

Built in the database with the real ingest path, the way the demo's runs arrive: a base and
three commits; 1/3 and 2/3 change nothing, 3/3 lowers the throughput and moves 19 of its
counters a lot, and 80 more counters are noise. Under one false-discovery family for every
row of the page the throughput of 3/3 was ``worse`` with two kernels and ``undecided`` with
four (its q tripled with the rows)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import verdict
from stackbench.resultsdb.tables import render

JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"})
KERNELS = [("base", "a" * 40), ("1/3", "b" * 40), ("2/3", "c" * 40), ("3/3", "d" * 40)]
TPUT = "vm-scalability.throughput"
# ten boots per side (the last look); the worse side is 3.7% lower: Yuen's p about 0.002,
# under the last look's alpha on its own and near the BH line of a crowded family
_Z = [0.0, 1.2, -1.2, 0.6, -0.6, 1.8, -1.8, 0.3, -0.3, 0.0]
BASE_TPUT = [100000.0 + 2000.0 * z for z in _Z]
SLOW_TPUT = [96300.0 + 2000.0 * z for z in reversed(_Z)]


def _runs(label: str, commit: str, k: int) -> list[ig.RunData]:
    rng = np.random.default_rng(100 + k)
    tput = SLOW_TPUT if label == "3/3" else BASE_TPUT
    out = []
    for it in range(10):
        samples = {TPUT: [tput[it]]}
        for c in range(19):  # counters 3/3 moves by half
            level = 1500.0 if label == "3/3" else 1000.0
            samples[f"vm-scalability.moved_{c:02d}"] = [level * (1 + 0.02 * rng.normal())]
        for c in range(80):  # counters no kernel moves
            samples[f"vm-scalability.noise_{c:02d}"] = [1000.0 * (1 + 0.02 * rng.normal())]
        out.append(
            ig.RunData(
                job=JOB,
                kernel=ig.KernelSpec(commit, name=label),
                machine=ig.MachineSpec("qemu-vm", cpus=2),
                iteration=it,
                samples=samples,
            )
        )
    return out


@pytest.fixture
def series(eng):
    for k, (label, commit) in enumerate(KERNELS):
        ig.ingest(eng, _runs(label, commit, k))
    return eng


def _rows_of(text: str, kernel: str) -> dict[str, list[str]]:
    """metric -> cells of KERNEL's block in a rendered --all stackbench table."""
    rows: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        m = re.match(r"\s+new:\s+(\S+)", line)
        if m:
            current = m.group(1)
        elif current == kernel and re.match(r"  [\w-]+\.\S", line):
            cells = re.split(r"\s{2,}", line.strip())
            rows[cells[0]] = cells
    return rows


def test_a_commits_verdicts_are_the_same_on_the_series_report_and_alone(series):
    every = render.render(series, [c for _, c in KERNELS], style="stackbench", all_rows=True)
    alone = render.render(series, [KERNELS[0][1], KERNELS[3][1]], style="stackbench", all_rows=True)
    on_report, by_itself = _rows_of(every, "3/3"), _rows_of(alone, "3/3")
    assert len(on_report) == 100
    # every cell of every row: figures, change, interval, verdict, q, boots
    assert on_report == by_itself
    # and the headline metric keeps its power beside 99 counters, 19 of them changed
    assert on_report[TPUT][6] == "worse"
    assert float(on_report[TPUT][7]) < 0.05
    assert all(on_report[f"vm-scalability.moved_{c:02d}"][6] == "changed" for c in range(19))
    assert "per kernel and job, headline metrics one family" in every


def test_headline_family_is_apart_from_the_counters():
    rng = np.random.default_rng(7)
    pairs = {TPUT: (BASE_TPUT, SLOW_TPUT, True, "throughput")}
    for c in range(300):
        base = list(1000.0 * (1 + 0.02 * rng.normal(size=10)))
        new = list(1000.0 * (1 + 0.02 * rng.normal(size=10)))
        pairs[f"vm-scalability.noise_{c:03d}"] = (base, new, None, "count")
    fam = {n: verdict.family(1, 1, verdict.is_headline(n, p[3], p[2])) for n, p in pairs.items()}
    with_families = verdict.judge_many(pairs, families=fam)[TPUT]
    alone = verdict.judge_many({TPUT: pairs[TPUT]})[TPUT]
    assert with_families == alone
    assert alone.label == "worse"
    # one family for every row: the same evidence loses its verdict to 300 noise counters
    assert verdict.judge_many(pairs)[TPUT].outcome == "undecided"
