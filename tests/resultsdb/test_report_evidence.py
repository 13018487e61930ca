"""The report's evidence against the stored runs: each headline metric's noise and smallest
detectable change per machine, and the compaction/THP counters that show the code ran."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench.mail import reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import evidence, verdict
from stackbench.resultsdb import ingest as ig
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
    # the rule's own figure at the 5-boot look (its power: the simulation test below)
    detect = evidence.detectable_change(cov, 5, "throughput")
    assert detect > 0.10  # the old closed form at the total alpha said 8.0%
    assert (
        f"vm-scalability.throughput (vm-scalability/anon-w-seq) on qemu-a: 5 boots, "
        f"noise {cov * 100:.1f}%, smallest detectable change {detect * 100:.1f}%"
    ) in body
    # a machine whose runs never vary: no noise, the policy's floor is what it can detect
    assert "on qemu-b: 3 boots, noise 0.0%, smallest detectable change 2.0%" in body
    # the counters judged by the headline rule: only the one that changed is listed
    assert "Compaction and THP counters that changed" in body
    row = next(line for line in body.splitlines() if "thp_fault_alloc" in line)
    # its figures as the stackbench table prints them, named
    assert row.strip().startswith(
        "1/1 mmtests-vmstat.thp_fault_alloc (vm-scalability/anon-w-seq): 100.00 -> 300.00 "
        "(means) +200.0% ["
    ), row
    assert "q=" in row
    assert "compact_stall" not in body
    assert "moved" not in body


@pytest.mark.parametrize(("boots", "cov"), [(5, 0.01), (10, 0.02), (10, 0.05)])
def test_the_detectable_change_is_what_the_rule_detects_with_its_power(boots, cov):
    """The printed figure, checked by simulating the verdict's own rule at that change: it
    is called worse in about ``verdict.POWER`` of comparisons at that look."""
    change = evidence.detectable_change(cov, boots, "throughput")
    assert change > verdict.DEFAULT.effect_floor("throughput")
    rng = np.random.default_rng(boots)
    base = 1 + cov * rng.normal(size=(4000, boots))
    new = (1 + cov * rng.normal(size=(4000, boots))) * (1 - change)
    res = verdict.decide_batch(base, new, kind="throughput")
    power = ((res.outcome == verdict.CHANGED) & (res.sign < 0)).mean()
    assert abs(power - verdict.POWER) < 0.05, power


@pytest.mark.parametrize(("boots", "cov"), [(5, 0.01), (10, 0.02)])
def test_a_paired_design_quotes_the_paired_test_and_its_power_holds_on_a_lab(boots, cov):
    """Paired by round: n - 1 degrees of freedom on the per-round differences. Simulated on
    a lab whose boxes are 3% apart (the offsets cancel in a round), the live paired rule
    finds the printed change in about ``verdict.POWER`` of comparisons."""
    change = evidence.detectable_change(cov, boots, "throughput", paired=True)
    # fewer degrees of freedom than Welch's on as many boots per side
    assert change > evidence.detectable_change(cov, boots, "throughput")
    rng = np.random.default_rng(100 + boots)
    box = 1 + 0.03 * rng.normal(size=(4000, boots))
    base = box * (1 + cov * rng.normal(size=(4000, boots)))
    new = box * (1 + cov * rng.normal(size=(4000, boots))) * (1 - change)
    res = verdict.decide_batch(base, new, kind="throughput", paired=True)
    power = ((res.outcome == verdict.CHANGED) & (res.sign < 0)).mean()
    assert abs(power - verdict.POWER) < 0.05, power


def test_the_aa_quotes_the_same_rule_on_its_own_boots():
    """The nightly A/A's smallest change is the report's rule (paired, the look of that many
    rounds, the same power) on the night's boots resampled: on normal boots the two agree."""
    from stackbench.resultsdb import aa

    night = 1000 * (1 + 0.02 * np.random.default_rng(5).normal(size=400))
    found = aa.smallest_change(list(night), True, "throughput", 10)
    quoted = evidence.detectable_change(0.02, 10, "throughput", paired=True)
    assert found is not None and abs(found - 100 * quoted) < 0.5, (found, quoted)
    # lower is better: the worse direction is up, found alike
    up = aa.smallest_change(list(night), False, "throughput", 10)
    assert up is not None and abs(up - found) < 0.5


def _rounds(commit: str, name: str, values: list[float]) -> list[ig.RunData]:
    return [
        ig.RunData(
            job=ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"}),
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-a"),
            iteration=i,
            samples={"vm-scalability.throughput": [v]},
            meta={"boot_id": f"{name}-{i}", "boot_round": i + 1, "series": "1", "worker": "w"},
        )
        for i, v in enumerate(values)
    ]


def test_rounds_that_pair_the_kernels_quote_the_paired_noise(eng):
    """Boots in rounds whose hosts differ by far more than a boot's noise: the verdict pairs
    them, so the noise quoted is the spread of the per-round differences (over sqrt 2), not
    the base's boot-to-boot spread, and the detectable change is the paired test's."""
    from stackbench.resultsdb import query

    host = np.array([1.0, 1.08, 0.93, 1.05, 0.97, 1.02])
    base = 1000 * host * np.array([1.0, 1.01, 0.99, 1.0, 1.01, 0.99])
    new = 1000 * host * np.array([0.99, 1.0, 1.0, 1.01, 0.99, 1.0])
    ig.ingest(eng, _rounds(BASE, "base", list(base)))
    ig.ingest(eng, _rounds(C1, "1/1", list(new)))
    with eng.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, [BASE, C1]))
    (row,) = evidence.noise(ds)
    diff = new - base
    want = diff.std(ddof=1) / np.sqrt(2) / base.mean()
    assert row.design == evidence.PAIRED and row.boots == 6
    assert row.cov == pytest.approx(want)
    assert row.cov < (base.std(ddof=1) / base.mean()) / 3
    assert row.detectable == evidence.detectable_change(want, 6, "throughput", paired=True)
    lines = reports.evidence_lines(ds, {})
    assert any("on qemu-a: 6 rounds paired, noise" in line for line in lines), lines


def test_a_line_says_so_when_no_counter_moved(eng):
    sid = _series(eng, {"thp_fault_alloc": 101, "compact_stall": 5})
    body = reports.series_report(eng, sid, _cfg()).body
    assert "None of the 2 compaction and THP counters judged changed against" in body


# ten boots per side, two runs each: boot-to-boot noise of about 3%
_Z = [0.0, 1.2, -1.2, 0.6, -0.6, 1.8, -1.8, 0.3, -0.3, 0.9]
STALL, FAULTS, NOISY = (
    "mmtests-vmstat.compact_stall",
    "mmtests-vmstat.thp_fault_alloc",
    "mmtests-vmstat.pgmigrate_success",
)


def _planted(label: str, commit: str) -> list[ig.RunData]:
    new = label != "base"
    out = []
    for b, z in enumerate(_Z if not new else _Z[::-1]):
        stall = 1000.0 * (1 + 0.03 * z) * (1.3 if new else 1.0)  # 30% more in every boot
        faults = 1000.0 * (1 + 0.03 * z) * (1.15 if new and b == 4 else 1.0)  # one boot only
        # 40% boot-to-boot noise: a 12% difference of means is no evidence
        noisy = 1000.0 * (1 + 0.4 * _Z[(b * 3) % 10]) * (1.12 if new else 1.0)
        for r in range(2):
            out.append(
                ig.RunData(
                    job=ig.JobSpec("thpscale", "default", {}),
                    kernel=ig.KernelSpec(commit, name=label),
                    machine=ig.MachineSpec("qemu-a"),
                    iteration=2 * b + r,
                    samples={
                        "thpscale.fault-huge-4": [50.0 + z + r],
                        STALL: [stall + r],
                        FAULTS: [faults - r],
                        NOISY: [noisy + r],
                    },
                    meta={"boot_id": f"{label}-{b}"},
                )
            )
    return out


def test_counters_are_judged_by_boots_like_the_headline_metrics(eng):
    from stackbench.resultsdb import query
    from stackbench.resultsdb.tables import render

    ig.ingest(eng, _planted("base", BASE))
    ig.ingest(eng, _planted("1/1", C1))
    with eng.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, [BASE, C1]))
    found = {c.name: c.verdict for c in evidence.counters(ds)}
    assert set(found) == {STALL, FAULTS, NOISY}
    stall = found[STALL]
    assert stall.outcome == "changed" and stall.n_base == stall.n_new == 10
    assert 20 < stall.ci_low_pct < 30 < stall.ci_high_pct < 40
    assert stall.q_value is not None and stall.q_value < 0.05
    # 15% in one boot of ten, and 12% under 40% noise, were "moved" for a 10% mark
    assert found[FAULTS].outcome != "changed"
    assert found[NOISY].outcome != "changed"
    text = render.render(eng, [BASE, C1], style="stackbench")
    row = next(line for line in text.splitlines() if STALL in line)
    assert "changed" in row and re.search(r"\[\+2\d\.\d+, \+3\d\.\d+\]", row), row
    assert FAULTS not in text and NOISY not in text
    assert "THP/compaction counters another (listed when changed)" in text


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_latency_too_noisy_for_any_drop_says_so_without_dividing_by_zero():
    """Boots too few and too noisy for the rank test to call even a 99% drop: no change is
    detectable (inf), and no boot of 0 reaches the rank test's logarithm on the way."""
    rng = np.random.default_rng(3)
    base = np.exp(rng.normal(size=(200, 3)))
    new = np.exp(rng.normal(size=(200, 3)))
    assert evidence.smallest(base, new, "latency") == float("inf")


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_latency_of_a_large_spread_has_a_detectable_change_from_positive_boots():
    """At a CoV of 60% normal boots would go below zero and the rank test's logarithm would
    make every trial NaN; the latency's boots are drawn log-normal, so the figure is one the
    rule reaches (below 5 boots a side no rank p-value is small enough), and it shrinks
    with more boots."""
    few = evidence.detectable_change(0.6, 10, "latency")
    many = evidence.detectable_change(0.6, 20, "latency")
    assert 0 < many < few < 0.99


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_boots_of_zero_take_the_t_test_in_a_batch_as_in_one_judgement():
    """A latency with a boot of 0 is judged by Yuen-Welch in judge(); a batch of such rows
    (evidence.smallest on real boots) takes the same test, not the rank test's log(0)."""
    base = np.array([[0.0, 1.0, 2.0, 1.5], [1.0, 2.0, 3.0, 2.5]])
    new = base * 3
    res = verdict.decide_batch(base, new, kind="latency")
    assert res.test == "yuen-welch"
    one = verdict.judge(list(base[0]), list(new[0]), higher_is_better=False, kind="latency")
    assert one.test == "yuen-welch"
