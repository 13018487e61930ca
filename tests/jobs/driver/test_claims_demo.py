"""``stackbench demo --check-claims``: the shipped stack's cover letter carries an LKP and an
mmtests table written from a real run of it; the demo keeps those claims, measures them on
real kernels under QEMU and runs to ``done``, and its page and report mail give every claim
its status."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from test_pipeline_e2e import kernel_env  # noqa: F401

from stackbench.resultsdb import claims_check, series_runs_store
from stackbench.resultsdb.models import Series

pytest_plugins = ["helpers.web"]


def test_the_demo_cover_letters_tables_are_claims_of_its_own_jobs():
    """Every claim of the shipped cover letter maps to a job the demo runs, kernel columns
    and all (fast: no kernel is built)."""
    from stackbench.cli.demo import DEMO_JOBS
    from stackbench.jobs.driver import claims_plan
    from stackbench.patches import stacks
    from stackbench.patches.parser import parse_mbox

    parsed = parse_mbox(stacks.stack_mbox("compaction-demo"), source="demo")
    jobs, kept, added = claims_plan.with_claims(parsed, list(DEMO_JOBS), 3, "v6.1-debian")
    styles = {k["claim"]["style"] for k in kept}
    assert styles == {"lkp", "mmtests"}
    assert added == [] and jobs == list(DEMO_JOBS)  # the demo's own jobs measure them all
    mapped = [k for k in kept if k["job"]]
    assert mapped and {k["suite"] for k in mapped} == {"vm-scalability", "thpscale"}


@pytest.mark.slow
def test_demo_with_check_claims_runs_to_done_and_shows_each_claims_status(
    eng,
    kernel_env,  # noqa: F811
    client,
    capsys,
):
    from stackbench.cli import main
    from stackbench.mail import reports
    from stackbench.mail.config import MailConfig

    argv = ["demo", "--check-claims", "--in-process", "--runs", "2", "--max-boots", "2"]
    assert main([*argv, "--no-serve"]) == 0
    out = capsys.readouterr().out
    with Session(eng) as s:
        (series,) = s.scalars(select(Series)).all()
        assert series.state == "done"
        assert series_runs_store.current(s, series.id).check_claims is True
        sid = series.id
    report = claims_check.check_series(eng, sid)
    statuses = [c.status for c in report.checks]
    assert statuses and set(statuses) <= set(claims_check.STATUSES)
    measured = [c for c in report.checks if c.measured_pct is not None]
    assert measured, "no claim of the cover letter was measured"
    assert "Claims of the cover letter, measured again" in out
    page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert re.findall(r'data-status="([^"]+)"', page) == statuses
    body = reports.series_report(eng, sid, MailConfig(list_addr="l@example.org")).body
    assert re.findall(r"^  \[([a-z ]+)\] ", body, re.M) == statuses
