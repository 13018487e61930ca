"""The report's evidence against the stored runs: each headline metric's noise and smallest
detectable change per machine, and the compaction/THP counters that show the code ran."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench.mail import reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import verdict
from stackbench.resultsdb.models import Patch, Series

BASE, C1 = "a" * 40, "d" * 40
THROUGHPUT = {"base": [100, 104, 97, 101, 98], "c1": [99, 103, 98, 100, 101]}


def _runs(commit, name, machine, values, counters):
    return [
        ig.RunData(
            job=ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"}),
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec(machine),
            iteration=i,
            samples={
                "vm-scalability.throughput": [v],
                **{f"mmtests-vmstat.{k}": [c] for k, c in counters.items()},
            },
        )
        for i, v in enumerate(values)
    ]


def _series(eng, c1_counters) -> int:
    base_counters = {"thp_fault_alloc": 100, "compact_stall": 5}
    ig.ingest(eng, _runs(BASE, "base", "qemu-a", THROUGHPUT["base"], base_counters))
    ig.ingest(eng, _runs(BASE, "base", "qemu-b", [200, 200, 200], base_counters))
    ig.ingest(eng, _runs(C1, "1/1", "qemu-a", THROUGHPUT["c1"], c1_counters))
    with Session(eng) as s, s.begin():
        series = Series(title="mm: x", submitter_email="dev@example.com", base_commit=BASE,
                        state="done", message_id="<c@example.com>")  # fmt: skip
        series.patches.append(Patch(idx=1, total=1, subject="mm: x", commit_sha=C1))
        s.add(series)
        s.flush()
        s.execute(text("UPDATE kernel_build SET series_id = :s"), {"s": series.id})
        return series.id


def _cfg() -> MailConfig:
    return MailConfig(list_addr="l@example.org", sender="bot <bot@example.org>")


def test_noise_and_detectable_change_per_metric_and_machine(eng):
    sid = _series(eng, {"thp_fault_alloc": 300, "compact_stall": 5})
    body = reports.series_report(eng, sid, _cfg()).body
    values = np.array(THROUGHPUT["base"], dtype=float)
    cov = values.std(ddof=1) / values.mean()
    factor = stats.t.ppf(1 - verdict.DEFAULT.alpha / 2, 8) + stats.t.ppf(0.8, 8)
    detect = max(factor * math.sqrt(2 / 5) * cov, verdict.DEFAULT.effect_floor("throughput"))
    assert (
        f"vm-scalability.throughput (vm-scalability/anon-w-seq) on qemu-a: 5 boots, "
        f"noise {cov * 100:.1f}%, smallest detectable change {detect * 100:.1f}%"
    ) in body
    # a machine whose runs never vary: no noise, the policy's floor is what it can detect
    assert "on qemu-b: 3 boots, noise 0.0%, smallest detectable change 2.0%" in body
    lines = body.splitlines()
    row = next(line for line in lines if line.strip().startswith("thp_fault_alloc"))
    assert row.split() == ["thp_fault_alloc", "*", "100", "300"]
    row = next(line for line in lines if line.strip().startswith("compact_stall"))
    assert row.split() == ["compact_stall", "5", "5"]
    assert "None of these counters moved" not in body


def test_a_line_says_so_when_no_counter_moved(eng):
    sid = _series(eng, {"thp_fault_alloc": 101, "compact_stall": 5})
    body = reports.series_report(eng, sid, _cfg()).body
    assert "None of these counters moved against the base" in body
