"""What is shown is what is decided, the same everywhere: the same stored boots (a base and
three commits in rounds on three boxes, through the real ingest) judged through every view
give every pair the same label, interval and q: ``compare BASE K`` (text and
``--style stackbench``), the series' report of all commits (``compare`` of all four), the
comparison page's data, the report mail and the API's JSON."""

from __future__ import annotations

import re

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench import cli
from stackbench.mail import reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.models import Patch, Series
from stackbench.web import comparisons

pytest_plugins = ["helpers.web"]

JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"})
METRIC = "vm-scalability.throughput"
BOX = {"w1": 0.03, "w2": -0.02, "w3": 0.0}
# the base, a commit 6% slower, an unchanged one, and an unchanged one with 5x the noise
KERNELS = [
    ("base", "a" * 40, 1.00, 0.01),
    ("1/3", "b" * 40, 0.94, 0.01),
    ("2/3", "c" * 40, 1.00, 0.01),
    ("3/3", "d" * 40, 1.00, 0.05),
]


def _runs(name: str, commit: str, level: float, cov: float, k: int) -> list[ig.RunData]:
    rng = np.random.default_rng(10 + k)
    out = []
    for rnd in range(1, 11):
        worker = f"w{1 + rnd % 3}"
        boot = 1e5 * level * (1 + BOX[worker]) * (1 + cov * rng.normal())
        meta = {"boot_id": f"s1-r{rnd}-{name}", "boot_round": rnd, "worker": worker, "series": 1}
        for i in range(2):
            out.append(
                ig.RunData(
                    JOB, ig.KernelSpec(commit, name=name), ig.MachineSpec("qemu-vm"),
                    2 * rnd + i, {METRIC: [boot * (1 + 0.002 * rng.normal())]}, meta=dict(meta),
                )
            )  # fmt: skip
    return out


def _series(eng) -> int:
    for k, (name, commit, level, cov) in enumerate(KERNELS):
        ig.ingest(eng, _runs(name, commit, level, cov, k))
    with Session(eng) as s, s.begin():
        series = Series(title="mm: x", submitter_email="dev@example.com", base_commit="a" * 40,
                        state="done", message_id="<c@example.com>")  # fmt: skip
        for i, (_name, commit, *_rest) in enumerate(KERNELS[1:], start=1):
            series.patches.append(Patch(idx=i, total=3, subject=f"mm: {i}", commit_sha=commit))
        s.add(series)
        s.flush()
        s.execute(text("UPDATE kernel_build SET series_id = :s"), {"s": series.id})
        return series.id


def _rows(out: str) -> dict[str, tuple[str, ...]]:
    """kernel name -> (label, low, high, level, q) of the throughput row of a stackbench
    table."""
    rows, kernel = {}, ""
    for line in out.splitlines():
        m = re.match(r"\s+new:\s+(\S+)", line)
        if m:
            kernel = m.group(1)
        elif line.strip().startswith(METRIC):
            cells = re.split(r"\s{2,}", line.strip())
            found = len(cells) == 8 and re.fullmatch(r"\[(\S+), (\S+)\] (\S+)", cells[4])
            if found:  # a verdict row, not the LKP table's or the noise lines
                rows[kernel] = (cells[5], *found.groups(), cells[6])
    return rows


def _q(q: float) -> str:
    return f"{q:.2g}" if q < 0.001 else f"{q:.3f}"


def _from_data(result: dict) -> dict[str, tuple[str, ...]]:
    """The same cells from the page's (or the API's) data of every later kernel."""
    (row,) = [m for m in result["metrics"] if m["metric"] == METRIC]
    out = {}
    for k, v in zip(result["kernels"][1:], row["verdicts"], strict=True):
        lo, hi = (f"{x:+.2f}" for x in v["ci"])
        out[k["label"]] = (v["verdict"], lo, hi, v.get("level"), _q(v["q"]))
    return out


def test_every_view_shows_each_pair_the_same_verdict(eng, client, capsys):
    sid = _series(eng)
    commits = [c for _n, c, *_r in KERNELS]

    def table(*refs: str) -> dict[str, tuple[str, ...]]:
        assert cli.main(["compare", "--style", "stackbench", "--all", *refs]) == 0
        return _rows(capsys.readouterr().out)

    report = table(*commits)  # the series' report: every commit
    alone = {}
    for _name, commit, *_r in KERNELS[1:]:
        alone |= table(commits[0], commit)  # compare BASE K
    assert alone == report and set(report) == {"1/3", "2/3", "3/3"}
    assert report["1/3"][0] == "worse" and report["2/3"][0] != "worse"
    # the noisier commit's interval is its own, wider than its quiet neighbour's
    width = {k: float(v[2]) - float(v[1]) for k, v in report.items()}
    assert width["3/3"] > 2 * width["2/3"]

    # the report mail prints the same table (its default view: changed and undecided rows)
    body = reports.series_report(eng, sid, MailConfig(list_addr="l@example.org")).body
    mailed = _rows(body)
    assert "1/3" in mailed and all(report[k] == v for k, v in mailed.items())

    # the comparison page's data and the API's JSON of the same comparison
    with Session(eng) as s:
        ids = comparisons.resolve_builds(s, commits)
        key = comparisons.get_or_create(s, ids, comparisons.Options()).key
        s.commit()
    page = _from_data(comparisons.lookup(eng, key).result)
    doc = client.get(f"/api/comparisons/{key}").get_json()
    api = _from_data(doc)
    # each row names its job with its parameters: two sub-jobs of a suite share metric names
    assert {m["subjob"] for m in doc["metrics"]} == {"vm-scalability/anon-w-seq  test=anon-w-seq"}
    assert page == api
    for name, (label, lo, hi, level, q) in report.items():
        assert page[name][:3] == (label, lo, hi) and page[name][4] == q
        # the level the text prints is the one the data carries
        assert level == f"{100 * page[name][3]:.2f}%"
