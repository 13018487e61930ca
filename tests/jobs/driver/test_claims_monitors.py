"""The demo cover letter's claims checked against planted runs, monitor rows and all: the
``mmtests-vmstat.*`` and ``duration.elapsed`` rows our own LKP tables print are measured by
every run, so each such claim gets the status of the same job's stored counter, and no claim
of the cover letter is left "not checked" (fast: no kernel is built, no guest booted)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.claims import claims_series

from stackbench.resultsdb import claims_check
from stackbench.resultsdb import ingest as ig

BASE = "e" * 40
# the demo's commits as its cover letter's columns name them (1/3-8a8bbfda ...)
COMMITS = ["8a8bbfda" + "1" * 32, "7dff4ee2" + "2" * 32, "b83c69a5" + "3" * 32]
NAMES = ["v6.1-debian", *(f"{i}/3-{c[:8]}" for i, c in enumerate(COMMITS, 1))]
JOBS = {
    "anon-w-rand": ig.JobSpec("vm-scalability", "anon-w-rand", {"test": "anon-w-rand"}),
    "anon-w-seq": ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"}),
    "thpscale": ig.JobSpec("thpscale", "thpscale", {"madvise": "false"}),
}
# planted against the claim: 3/3's anon-w-rand run takes 20% less time than the base's (the
# cover claims 17.4% more), and 2/3 leaves anon-w-seq's nr_active_anon where it was (-7.5%
# claimed)
AGAINST = {("anon-w-rand", "duration.elapsed", 3): -20.0}
UNMOVED = {("anon-w-seq", "mmtests-vmstat.nr_active_anon", 2)}


def _kept() -> list[dict]:
    from stackbench.cli.demo import DEMO_JOBS
    from stackbench.jobs.driver import claims_plan
    from stackbench.patches import stacks
    from stackbench.patches.parser import parse_mbox

    parsed = parse_mbox(stacks.stack_mbox("compaction-demo"), source="demo")
    _jobs, kept, _added = claims_plan.with_claims(parsed, list(DEMO_JOBS), 3, "v6.1-debian")
    return kept


def _case(c: dict) -> str:
    return (c.get("params") or {}).get("test") or c["suite"]


def _planted(kept: list[dict]) -> dict[tuple[str, str, int], float]:
    """The relative change (%) planted per (case, metric, kernel): the claimed one, but for
    the claims planted against."""
    out = {}
    for c in kept:
        key = (_case(c), c["metric"], c["kernel_index"])
        out[key] = 0.0 if key in UNMOVED else AGAINST.get(key, c["claim"]["change_pct"])
    return out


def _ingest(eng, planted: dict[tuple[str, str, int], float]) -> None:
    """Six boots of one run each per kernel and case, 1% run-to-run noise around 1000
    (shifted by 10 so a -100% claim stays a positive count)."""
    rng = np.random.default_rng(40)
    for ki, (commit, name) in enumerate(zip([BASE, *COMMITS], NAMES, strict=True)):
        for case, job in JOBS.items():
            metrics = sorted({m for (c, m, _k) in planted if c == case})
            runs = []
            for i in range(6):
                samples = {}
                for m in metrics:
                    mean = 10 + 1000 * (1 + (planted.get((case, m, ki), 0.0) if ki else 0) / 100)
                    samples[m] = [mean * (1 + 0.01 * rng.normal())]
                runs.append(
                    ig.RunData(
                        job=job,
                        kernel=ig.KernelSpec(commit, name=name),
                        machine=ig.MachineSpec("qemu-demo", kind="qemu", cpus=2, memory_mb=1024),
                        iteration=i,
                        samples=samples,
                    )
                )
            ig.ingest(eng, runs)


def _series(eng, kept: list[dict]) -> int:
    subjects = [
        "mm/compaction: factor out the compaction defer limit",
        "mm/huge_memory: wake kcompactd for THP faults outside MADV_HUGEPAGE",
        "mm/huge_memory: zero anonymous THPs before charging them",
    ]
    return claims_series(eng, title="mm: compaction and THP fault demo stack", base=BASE,
                         base_ref="v6.1-debian", patches=list(zip(COMMITS, subjects, strict=True)),
                         claims=kept, message_id="<demo@x>",
                         cover_letter="Test machine: a QEMU TCG guest")  # fmt: skip


@pytest.fixture
def demo(eng):
    kept = _kept()
    _ingest(eng, _planted(kept))
    return claims_check.check_series(eng, _series(eng, kept))


def test_every_claim_of_the_demo_cover_letter_is_mapped_monitor_rows_too():
    kept = _kept()
    assert len(kept) == 66
    assert [c["claim"]["metric"] for c in kept if c["reason"]] == []
    monitors = {c["metric"] for c in kept if not c["metric"].startswith(("vm-scal", "thpscale"))}
    assert "duration.elapsed" in monitors and "mmtests-vmstat.nr_mapped" in monitors
    assert {c["job"] for c in kept if c["metric"] in monitors} == {
        "vm-scalability[test=anon-w-rand]",
        "vm-scalability[test=anon-w-seq]",
    }


def test_monitor_claims_get_the_status_of_the_same_jobs_counter(demo):
    by = {(_case_of(c), c.metric, c.kernel): c for c in demo.checks}
    assert len(by) == 66
    assert [c.claim["metric"] for c in demo.checks if c.status == "not checked"] == []
    against_key = ("anon-w-rand", "duration.elapsed", "3/3-b83c69a5")
    unmoved_key = ("anon-w-seq", "mmtests-vmstat.nr_active_anon", "2/3-7dff4ee2")
    against = by[against_key]
    assert against.status == "contradicted" and against.measured_pct == pytest.approx(-20, abs=3)
    unmoved = by[unmoved_key]
    assert unmoved.status == "not reproduced"
    assert unmoved.ci_low_pct <= 0 <= unmoved.ci_high_pct
    confirmed = by[("anon-w-rand", "duration.elapsed", "1/3-8a8bbfda")]
    assert confirmed.status == "confirmed" and confirmed.measured_pct == pytest.approx(
        36.7 * 1000 / 1010, abs=3
    )
    # a counter measured in the claimed direction: the other family's verdict, same rules
    vmstat = by[("anon-w-seq", "mmtests-vmstat.nr_mapped", "1/3-8a8bbfda")]
    assert vmstat.status == "confirmed" and vmstat.measured_pct < -90
    for key, c in by.items():
        if key in (against_key, unmoved_key):
            continue
        # measured as claimed: decided in its direction, or undecided around it
        assert c.status in ("confirmed", "consistent"), (key, c.why)
        if (
            c.metric.startswith(("mmtests-vmstat.", "duration."))
            and abs(c.claim["change_pct"]) >= 5
        ):
            assert c.status == "confirmed", (key, c.why)


def _case_of(c: claims_check.ClaimCheck) -> str:
    job = c.job or ""
    return job.split("test=")[1].rstrip("]") if "test=" in job else job
