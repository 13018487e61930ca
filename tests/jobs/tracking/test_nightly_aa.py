"""The nightly A/A: a branch's baseline booted again in two interleaved sets through the
ordinary driver, judged against itself; the figures (false-alarm rate, spread, smallest
change found with 80% power) land on the machines of the kind and on the machines page. The
boots are dry with numbers drawn from stored real boots (tests/jobs/tracking/test_nightly_history.py)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_nightly import (
    METRIC,
    mail_env,  # noqa: F401 (a fixture)
    night,
    outbox,
)
from test_nightly_history import RealBootLab, real_offsets

from stackbench.resultsdb import aa
from stackbench.resultsdb.models import Machine, Run, TrackedBranch


def test_the_figures_of_one_kernel_against_itself():
    rng = np.random.default_rng(1)
    quiet = list(1000 * (1 + 0.005 * rng.standard_normal(20)))
    noisy = list(1000 * (1 + 0.08 * rng.standard_normal(20)))
    q = aa.figures("m", quiet, True, "throughput", 10)
    n = aa.figures("m", noisy, True, "throughput", 10)
    assert q.boots == n.boots == 10
    assert not q.false_alarm
    assert 0.2 < q.spread_pct < 1.0 and 4 < n.spread_pct < 12
    # a quiet machine sees a few % with 10 boots a side, a noisy one only far more
    assert q.smallest_pct is not None and q.smallest_pct <= 4
    assert n.smallest_pct is None or n.smallest_pct >= 3 * q.smallest_pct
    # the sets interleave: a slow second half of the night falls on both
    assert aa.split([1, 2, 3, 4, 5]) == ([1, 3, 5], [2, 4])
    drift = [1000.0 + 10 * i for i in range(20)]
    assert not aa.figures("m", drift, True, "throughput", 10).false_alarm


def runs_of_baseline(eng) -> int:
    with Session(eng) as s:
        bid = s.scalars(select(TrackedBranch)).one().baseline_build_id
        return s.scalar(select(func.count()).select_from(Run).where(Run.build_id == bid))


def test_a_nightly_aa_puts_its_figures_on_the_machines_page(eng):
    from stackbench.web import create_app

    lab = RealBootLab(real_offsets(), n=2)
    night(eng, lab)  # the first night: the baseline
    before = runs_of_baseline(eng)
    summary = night(eng, lab, aa_boots=6)
    assert runs_of_baseline(eng) - before == 12  # 2 x 6 fresh boots (one run each)
    (done,) = summary["aa"]
    (figs,) = done["figures"]["qemu"]
    assert figs["metric"] == METRIC and figs["boots"] == 6 and not figs["false_alarm"]
    assert 0.3 < figs["spread_pct"] < 2.0  # the real boots' spread (0.77%)
    assert figs["smallest_pct"] is not None and figs["smallest_pct"] <= 5
    night(eng, lab, aa_boots=6)
    with Session(eng) as s:
        m = s.scalars(select(Machine).where(Machine.name == "fake-qemu")).one()
        assert len(m.meta["aa"]) == 2
    app = create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})
    page = app.test_client().get("/machines").get_data(as_text=True)
    assert 'id="aa-table"' in page and METRIC in page
    row = page[page.index(METRIC, page.index('id="aa-table"')) :].split("</tr>")[0]
    assert "<td>2</td>" in row and "0% (0)" in row and "at 10 boots" in row


def test_a_comparison_and_its_report_show_the_machines_aa_beside_the_headline(eng):
    from stackbench.mail import reports
    from stackbench.resultsdb import aa, db
    from stackbench.web import comparisons, create_app

    lab = RealBootLab(real_offsets(), n=2)
    night(eng, lab)  # the baseline
    night(eng, lab, aa_boots=6)
    lab.head = 2
    night(eng, lab)  # the head, measured on the same machine
    with Session(eng) as s:
        ids = comparisons.resolve_builds(s, [lab.history[0], lab.history[2]])
        key = comparisons.get_or_create(s, ids, comparisons.Options()).key
        s.commit()
        (row,) = aa.summary(s.scalars(select(Machine)).one().meta)
    said = aa.describe(row)
    assert said.startswith("A/A: false alarms 0% of 1 night, spread ")
    assert "smallest change seen with 80% power" in said and "at 10 boots" in said

    app = create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})
    page = app.test_client().get(f"/compare/{key}").get_data(as_text=True)
    assert f"{METRIC} fake-qemu: {said}" in page

    ds = reports._dataset(eng, [lab.history[0], lab.history[2]])
    with db.session(eng) as s:
        lines = reports.evidence_lines(ds, aa.of_machines(s, ["fake-qemu"]))
    at = next(
        i for i, ln in enumerate(lines) if ln.startswith(f"  {METRIC} (") and "fake-qemu" in ln
    )
    assert lines[at + 1] == f"    {said}"


def test_a_regression_mail_gives_the_machines_aa_of_its_metric(eng, mail_env):  # noqa: F811
    from stackbench.resultsdb import aa

    lab = RealBootLab(real_offsets(), n=2, bad_from=2, drop=0.1)
    night(eng, lab)  # the baseline
    night(eng, lab, aa_boots=6)
    lab.head = 2  # 10% worse
    (branch,) = night(eng, lab)["branches"]
    assert branch["state"] == "regressed"
    with Session(eng) as s:
        (row,) = aa.summary(s.scalars(select(Machine)).one().meta)
    (mail,) = outbox(eng, "regression")
    assert "machine:  fake-qemu (qemu, 2 CPUs, 1024 MB)\n" in mail.body
    assert f"\nnoise:    {aa.describe(row)}\n" in mail.body
