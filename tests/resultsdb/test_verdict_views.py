"""What is shown is what is decided, the same everywhere: the same stored boots (a base and
three commits in rounds on three boxes, through the real ingest) judged through every view
give every pair the same label, interval and q: ``compare BASE K`` (text and
``--style stackbench``), the series' report of all commits (``compare`` of all four), the
comparison page's data, the report mail and the API's JSON. And the figures beside each
change are the ones it is of: a latency whose one bad boot doubles its mean shows the
boots' medians, named, and a change of their sign, in every view."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench import cli
from stackbench.mail import reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.models import Patch, Series
from stackbench.resultsdb.tables.verdict import figure
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
    """kernel name -> (label, low, high, level, q, base, new, of boots) of the throughput
    row of a stackbench table."""
    rows, kernel = {}, ""
    for line in out.splitlines():
        m = re.match(r"\s+new:\s+(\S+)", line)
        if m:
            kernel = m.group(1)
        elif line.strip().startswith(METRIC):
            cells = re.split(r"\s{2,}", line.strip())
            found = len(cells) == 9 and re.fullmatch(r"\[(\S+), (\S+)\] (\S+)", cells[5])
            if found:  # a verdict row, not the LKP table's or the noise lines
                rows[kernel] = (cells[6], *found.groups(), cells[7], *cells[1:4])
    return rows


def _q(q: float) -> str:
    return f"{q:.2g}" if q < 0.001 else f"{q:.3f}"


def _from_data(result: dict) -> dict[str, tuple[str, ...]]:
    """The same cells from the page's (or the API's) data of every later kernel."""
    (row,) = [m for m in result["metrics"] if m["metric"] == METRIC]
    out = {}
    for k, v in zip(result["kernels"][1:], row["verdicts"], strict=True):
        lo, hi = (f"{x:+.2f}" for x in v["ci"])
        figures = (figure(v["base_est"]), figure(v["new_est"]), v["estimator"])
        out[k["label"]] = (v["verdict"], lo, hi, v.get("level"), _q(v["q"]), *figures)
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
    for name, (label, lo, hi, level, q, *_figures) in report.items():
        assert page[name][:3] == (label, lo, hi) and page[name][4] == q
        # and the same figures beside the change: the pair's own means of its boots
        assert page[name][5:] == report[name][5:] and report[name][7] == "mean"
        # the level the text prints is the one the data carries
        assert level == f"{100 * page[name][3]:.2f}%"


# A latency whose mean and median disagree in direction: the new kernel's boots are 6%
# faster but one of its ten boots is twelve times slower (a bad boot), so its mean more than
# doubles while its median, and the rank test's Hodges-Lehmann ratio, fall. The rows must show
# the figures the change is of (medians, named), the same in every view.
LAT_JOB = ig.JobSpec("thpscale", "thpscale", {"max_threads": 2})
LAT = "thpscale.fault-huge-1"


def _latency_boots(eng, commit: str, name: str, level: float, bad: int | None) -> list[float]:
    """Ingest ten boots of two runs each (five faults per run); return each boot's mean."""
    rng = np.random.default_rng(len(name))
    runs, boot_means = [], []
    for rnd in range(1, 11):
        boot = 40_000.0 * level * (1 + 0.02 * rng.normal()) * (12 if rnd == bad else 1)
        meta = {"boot_id": f"s2-r{rnd}-{name}", "boot_round": rnd, "worker": "w1", "series": 2}
        means = []
        for i in range(2):
            faults = list(boot * (1 + 0.01 * rng.normal(size=5)))
            means.append(float(np.mean(faults)))
            runs.append(
                ig.RunData(
                    LAT_JOB, ig.KernelSpec(commit, name=name), ig.MachineSpec("qemu-vm"),
                    2 * rnd + i, {LAT: faults}, meta=dict(meta),
                )
            )  # fmt: skip
        boot_means.append(float(np.mean(means)))
    ig.ingest(eng, runs)
    return boot_means


def _figures_in_html(html: str) -> list[tuple[str, str, str, str]]:
    """(base, new, estimator, change) of every verdict cell that prints its figures."""
    found = re.findall(
        r'<span class="figures"[^>]*>([^ ]+) &rarr; ([^ ]+) <span class="muted">\((\w[\w ]*)s\)'
        r"</span></span> ([+-][\d.]+)%",
        html,
    )
    return [tuple(f) for f in found]


def test_the_figures_beside_a_change_are_the_ones_it_is_of(eng, client, capsys):
    base_commit, new_commit = "e" * 40, "f" * 40
    base = _latency_boots(eng, base_commit, "base", 1.00, None)
    new = _latency_boots(eng, new_commit, "1/1", 0.94, bad=4)
    # the data disagrees with itself: the mean says twice as slow, the median 6% faster
    assert np.mean(new) > 1.8 * np.mean(base) and np.median(new) < 0.96 * np.median(base)
    want = (figure(float(np.median(base))), figure(float(np.median(new))))
    with Session(eng) as s, s.begin():
        series = Series(title="mm: y", submitter_email="dev@example.com", state="done",
                        base_commit=base_commit, message_id="<d@example.com>")  # fmt: skip
        series.patches.append(Patch(idx=1, total=1, subject="mm: y", commit_sha=new_commit))
        s.add(series)
        s.flush()
        sid = series.id
        s.execute(text("UPDATE kernel_build SET series_id = :s"), {"s": sid})
    with Session(eng) as s:
        key = comparisons.get_or_create(
            s, comparisons.resolve_builds(s, [base_commit, new_commit]), comparisons.Options()
        ).key
        s.get(Series, sid).meta = {"comparison": {"key": key}}
        s.commit()

    # compare BASE K: the row's figures are the boots' medians, named, beside the HL ratio
    assert cli.main(["compare", "--style", "stackbench", "--all", base_commit, new_commit]) == 0
    out = capsys.readouterr().out
    (row,) = [line.strip() for line in out.splitlines() if line.strip().startswith(LAT + " ")]
    cells = re.split(r"\s{2,}", row)
    assert (cells[1], cells[2], cells[3]) == (*want, "median")
    change = float(cells[4].rstrip("%"))
    assert change < -3 and cells[6] == "better"
    assert "the median for a rank-tested latency" in out

    # the API's JSON of the comparison: the same figures, as numbers
    doc = client.get(f"/api/comparisons/{key}").get_json()
    (m,) = [m for m in doc["metrics"] if m["metric"] == LAT]
    (v,) = m["verdicts"]
    assert v["estimator"] == "median" and (figure(v["base_est"]), figure(v["new_est"])) == want
    assert v["base_est"] == pytest.approx(np.median(base)) and v["change_pct"] < 0
    assert v["new_est"] == pytest.approx(np.median(new))
    assert round(v["change_pct"], 2) == change and v["verdict"] == "better"

    # the series page and the comparison page print them too, never the means (the plots
    # of the runs, below the verdicts, mark each kernel's mean run as they say)
    for page, start, end in (
        (f"/series/{sid}", 'id="series-verdicts"', "</section>"),
        (f"/compare/{key}", "<h2>stackbench verdicts</h2>", "<h2>Runs across commits</h2>"),
    ):
        html = client.get(page).get_data(as_text=True)
        section = html[html.index(start) : html.index(end, html.index(start))]
        shown = _figures_in_html(section)
        assert shown and all(f[:3] == (*want, "median") for f in shown), (page, shown)
        assert all(float(f[3]) < 0 for f in shown)
        assert figure(float(np.mean(new))) not in section

    # and the report mail's table
    body = reports.series_report(eng, sid, MailConfig(list_addr="l@example.org")).body
    lines = [re.split(r"\s{2,}", ln.strip()) for ln in body.splitlines()]
    (mailed,) = [c for c in lines if c[0] == LAT and len(c) == len(cells)]  # not the noise
    assert mailed[:5] == cells[:5]
