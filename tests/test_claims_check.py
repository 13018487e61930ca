"""A series' claims checked against its stored runs: a claim the runs contradict, one they
confirm, one they do not reproduce and one no job of ours measures, each with its status on
the series page, the comparison page, in the report mail and in the API; a v2's report puts
v1's measured claims beside its own."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench.mail import reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import claims_check, claims_store, series_runs_store, verdict
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.models import Patch, Series

pytest_plugins = ["test_web_support"]

BASE, C1, C2 = "a" * 40, "b" * 40, "c" * 40
JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "size": "512M"})
SPEC = "vm-scalability[test=anon-w-seq]"
COVER = """\
This series speeds up anonymous faults.

Measured on our test box, a 2-socket machine with 80 CPUs and 256G memory:

(the LKP table the claims were read from)
"""


def _runs(commit: str, name: str, tput: float, workload: float, seed: int) -> list[ig.RunData]:
    """Six boots of one run each, 1% run-to-run noise (what the TCG guest shows for a 4 s
    usemem case: bench/README.md)."""
    rng = np.random.default_rng(seed)
    return [
        ig.RunData(
            job=JOB,
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-claims", kind="qemu", cpus=2, memory_mb=1024),
            iteration=i,
            samples={
                "vm-scalability.throughput": [tput * (1 + 0.01 * rng.normal())],
                "vm-scalability.workload": [workload * (1 + 0.01 * rng.normal())],
            },
        )
        for i in range(6)
    ]


def _claim(metric: str, change: float, kernel: str, *, job: str | None = SPEC,
           ours: str | None = None, reason: str | None = None, ki: int = 1) -> dict:  # fmt: skip
    suite = metric.split(".")[0]
    return {
        "claim": {
            "style": "lkp",
            "job": {"suite": suite, "test": "anon-w-seq"},
            "kernel": kernel,
            "base": BASE[:10],
            "metric": metric,
            "printed_pct": change,
            "change_pct": change,
            "stddev_pct": None,
            "significant": None,
        },
        "job": job,
        "suite": "vm-scalability" if job else None,
        "params": {"test": "anon-w-seq"} if job else None,
        "metric": ours if ours is not None else (metric if job else None),
        "kernel_index": ki,
        "base_index": 0,
        "reason": reason,
    }


PLANTED = [
    # the runs: C1 10% slower, C2 20% faster; workload unchanged on both
    _claim("vm-scalability.throughput", +12.0, C1[:10], ki=1),  # contradicted
    _claim("vm-scalability.throughput", +18.0, C2[:10], ki=2),  # confirmed
    _claim("vm-scalability.workload", -30.0, C2[:10], ki=2),  # not reproduced
    _claim(
        "will-it-scale.per_thread_ops",
        5.0,
        C2[:10],
        job=None,
        reason="will-it-scale is not a suite here",
        ki=2,
    ),  # fmt: skip
]


def _series(eng, *, version: int = 1, previous: int | None = None, claims=PLANTED,
            title: str = "mm: faster faults") -> int:  # fmt: skip
    with Session(eng) as s, s.begin():
        meta = {}
        if previous is not None:
            meta["previous_version"] = previous
        series = Series(title=title, base_commit=BASE, base_ref="v6.1",
                        state="done", message_id=f"<v{version}@example.com>", version=version,
                        cover_letter=COVER, meta=meta)  # fmt: skip
        for i, sha in enumerate((C1, C2), 1):
            series.patches.append(Patch(idx=i, total=2, subject=f"mm: p{i}", commit_sha=sha))
        s.add(series)
        s.flush()
        claims_store.put(series, claims)
        series_runs_store.begin(s, series.id, source="mbox", executor=series_runs_store.FOREGROUND,
                                check_claims=True)  # fmt: skip
        s.execute(text("UPDATE kernel_build SET series_id = :s WHERE series_id IS NULL"),
                  {"s": series.id})  # fmt: skip
        return series.id


@pytest.fixture
def planted(eng):
    ig.ingest(eng, _runs(BASE, "v6.1", 1000.0, 5e8, 1))
    ig.ingest(eng, _runs(C1, "1/2-bbbbbbbb", 900.0, 5e8, 2))
    ig.ingest(eng, _runs(C2, "2/2-cccccccc", 1200.0, 5e8, 3))
    return _series(eng)


def _statuses(report: claims_check.ClaimsReport) -> list[tuple[str, str, str]]:
    return [(c.metric or c.claim["metric"], c.kernel, c.status) for c in report.checks]


EXPECTED = [
    ("vm-scalability.throughput", "1/2-bbbbbbbb", "contradicted"),
    ("vm-scalability.throughput", "2/2-cccccccc", "confirmed"),
    ("vm-scalability.workload", "2/2-cccccccc", "not reproduced"),
    ("will-it-scale.per_thread_ops", "2/2-cccccccc", "not checked"),
]


def test_each_claim_gets_the_status_of_its_pairs_verdict(eng, planted):
    report = claims_check.check_series(eng, planted)
    assert _statuses(report) == EXPECTED
    contradicted, confirmed, steady, unmapped = report.checks
    assert contradicted.measured_pct == pytest.approx(-10, abs=2.5)
    assert contradicted.ci_low_pct < contradicted.measured_pct < contradicted.ci_high_pct
    assert confirmed.measured_pct == pytest.approx(20, abs=3) and confirmed.verdict == "better"
    assert steady.ci_low_pct <= 0 <= steady.ci_high_pct
    assert unmapped.why == "will-it-scale is not a suite here"
    assert "80 CPUs" in report.their_machine
    assert report.our_machine == "a QEMU guest (2 vCPUs, 1024 MB memory)"


def test_the_measured_change_is_the_pair_verdict_every_view_shows(eng, planted):
    """The claim's figures are the stackbench table's for that pair, not a second verdict."""
    from stackbench.resultsdb import query
    from stackbench.resultsdb.tables import verdict as judged_table

    with eng.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, [BASE, C1, C2]))
    table = {(k.commit, name): v for _j, k, rows in judged_table.compare(ds)
             for name, _b, _n, v in rows}  # fmt: skip
    report = claims_check.check_series(eng, planted)
    for c, sha in zip(report.checks[:3], (C1, C2, C2), strict=True):
        v = table[(sha, c.metric)]
        assert (c.measured_pct, c.ci_low_pct, c.ci_high_pct) == (
            v.change_pct,
            v.ci_low_pct,
            v.ci_high_pct,
        )


def test_report_mail_shows_each_claims_status(eng, planted):
    body = reports.series_report(eng, planted, MailConfig(list_addr="l@example.org")).body
    section = body[body.index("Claims of the cover letter, measured again") :]
    assert "1 confirmed, 1 not reproduced, 1 contradicted, 1 not checked" in section
    assert (
        "Their machine: Measured on our test box, a 2-socket machine with 80 CPUs and 256G memory."
    ) in section
    assert "Ours: a QEMU guest (2 vCPUs, 1024 MB memory)." in section
    assert (f"  [contradicted] vm-scalability.throughput ({SPEC}), 1/2-bbbbbbbb against v6.1"
            in section)  # fmt: skip
    assert f"  [confirmed] vm-scalability.throughput ({SPEC}), 2/2-cccccccc against v6.1" in section
    assert "      claimed:  +12.00% (lkp row 'vm-scalability.throughput')" in section
    assert "  [not checked] will-it-scale.per_thread_ops" in section
    assert "      will-it-scale is not a suite here" in section


def test_series_page_comparison_page_and_api_show_each_status(eng, planted, client):
    page = client.get(f"/series/{planted}").get_data(as_text=True)
    found = [(m, st) for m, st, _k in _rows(page)]
    assert found == [(m, st) for m, _k, st in EXPECTED]
    assert "80 CPUs" in page and "2 vCPUs" in page
    key = _publish(eng, planted)
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    assert [(m, st) for m, st, _k in _rows(page)] == [(m, st) for m, _k, st in EXPECTED]
    api = client.get(f"/api/series/{planted}").get_json()
    assert [c["status"] for c in api["claims"]["claims"]] == [st for _m, _k, st in EXPECTED]
    assert api["claims"]["counts"]["confirmed"] == 1
    for _ in range(2):  # the second answer comes from the comparison's cache
        doc = client.get(f"/api/comparisons/{key}").get_json()
        assert doc["claims"] == api["claims"] and doc["kernels"]


def test_a_comparison_that_is_no_series_own_has_no_claims_in_the_api(eng, planted, client):
    from stackbench.resultsdb import comparisons_q
    from stackbench.resultsdb.models import KernelBuild

    with Session(eng) as s, s.begin():
        by_commit = {k.commit: k.id for k in s.query(KernelBuild)}
        key = comparisons_q.publish(s, [by_commit[c] for c in (BASE, C2)]).key
    doc = client.get(f"/api/comparisons/{key}").get_json()
    assert doc["claims"] is None and len(doc["kernels"]) == 2


def _publish(eng, sid: int) -> str:
    """The series' own comparison, as lifecycle.publish_comparison makes it when it ends."""
    from stackbench.resultsdb import comparisons_q, series_store
    from stackbench.resultsdb.models import KernelBuild

    with Session(eng) as s, s.begin():
        by_commit = {k.commit: k.id for k in s.query(KernelBuild)}
        key = comparisons_q.publish(s, [by_commit[c] for c in (BASE, C1, C2)]).key
        series_store.merge_meta(s.get(Series, sid), comparison={"key": key})
    return key


def _rows(page: str) -> list[tuple[str, str, str]]:
    import re

    return [
        (m.group(2), m.group(1), "")
        for m in re.finditer(r'data-status="([^"]+)" data-metric="([^"]+)"', page)
    ]


def test_a_v2_report_puts_v1s_measured_claims_beside_its_own(eng, planted):
    v2 = _series(eng, version=2, previous=planted, claims=PLANTED[1:2])
    report = claims_check.check_series(eng, v2)
    assert report.previous is not None and report.previous.series_id == planted
    assert _statuses(report.previous) == EXPECTED
    body = reports.series_report(eng, v2, MailConfig(list_addr="l@example.org")).body
    assert f"The same claims of v1 (series #{planted}), measured then:" in body
    after = body[body.index("measured then:") :]
    assert "[contradicted] vm-scalability.throughput" in after


def test_a_v2_from_another_door_finds_its_v1_by_title_and_shows_it_everywhere(eng, planted, client):
    """A v2 sent by the CLI, the form, the API or a push links no v1: the earlier version of
    the same title, submitter and tree is its v1, on the page and in the API too."""
    v2 = _series(eng, version=2, claims=PLANTED[1:2])
    other = _series(eng, version=2, claims=PLANTED[1:2], title="mm: another series")
    report = claims_check.check_series(eng, v2)
    assert report.previous is not None and report.previous.series_id == planted
    assert _statuses(report.previous) == EXPECTED
    assert claims_check.check_series(eng, other).previous is None
    page = client.get(f"/series/{v2}").get_data(as_text=True)
    assert 'id="claims-previous"' in page
    after = page[page.index('id="claims-previous"') :]
    assert [(m, st) for m, st, _k in _rows(after)] == [(m, st) for m, _k, st in EXPECTED]
    api = client.get(f"/api/series/{v2}").get_json()["claims"]
    assert api["previous"]["series"] == planted and api["previous"]["version"] == 1
    assert [c["status"] for c in api["previous"]["claims"]] == [st for _m, _k, st in EXPECTED]
    assert [c["status"] for c in api["claims"]] == ["confirmed"]


def test_a_claim_inside_an_undecided_interval_is_consistent():
    v = verdict.Verdict("m", "undecided", "none", 3.0, -2.0, 8.0, 0.3, 0.3, "t", 3, 3, 2)
    assert claims_check.status_of(5.0, v)[0] == "consistent"
    assert claims_check.status_of(20.0, v)[0] == "not reproduced"
    assert claims_check.status_of(None, v)[0] == "not checked"
    assert claims_check.status_of(5.0, None)[0] == "not checked"


def test_compare_style_stackbench_of_the_series_kernels_ends_with_its_claims(eng, planted, capsys):
    from stackbench.cli import main

    assert main(["compare", "--style", "stackbench", BASE[:10], C1[:10], C2[:10]]) == 0
    out = capsys.readouterr().out
    assert out.index("== vm-scalability") < out.index("Claims of the cover letter")
    assert "  [confirmed] vm-scalability.throughput" in out
    # two kernels of it are not the series: no claims section
    assert main(["compare", "--style", "stackbench", BASE[:10], C2[:10]]) == 0
    assert "Claims of the cover letter" not in capsys.readouterr().out
