"""Claims mapped to our jobs and to the series' kernels: seed 000's LKP blocks become
vm-scalability jobs by their case, seed 004's rows thpscale's metrics, and whatever has no
job or no kernel here is listed with the reason."""

from __future__ import annotations

import pytest
from conftest import SHARED

from stackbench.jobs.driver.claims_map import map_claims
from stackbench.patches import claims


def seed(n: str) -> str:
    found = sorted((SHARED / "seeds").glob(f"{n}_*.txt"))
    if not found:
        pytest.skip(f"seed {n} not present under {SHARED / 'seeds'}")
    return found[0].read_text(errors="replace")


def series(n: int) -> list[tuple[str, str]]:
    """A base and n-1 patches, as a series' kernels are given: (sha, subject)."""
    return [("ab" * 20, "v6.1-debian")] + [(f"{i:02x}" * 20, f"mm: patch {i}") for i in range(1, n)]


OURS = {
    "mmap-xread-seq-mt", "mmap-pread-seq", "mmap-pread-seq-mt", "lru-file-readtwice",
    "lru-file-mmap-read", "anon-wx-seq-mt", "anon-w-seq-mt", "anon-w-rand", "anon-w-rand-mt",
    "anon-cow-rand",
}  # fmt: skip


def test_seed_000_maps_each_case_to_a_vm_scalability_job_and_columns_by_order():
    lkp = [c for c in claims.parse(seed("000")) if c.style == "lkp"]
    mapped = map_claims(lkp, series(5))
    for m in mapped:
        test = m.claim.job["test"]
        if test in OURS:
            assert m.reason is None, (test, m.reason)
            assert m.job == f"vm-scalability[test={test}]"
            assert m.metric == "vm-scalability.throughput" and m.statistic == "mean"
            assert m.base_index == 0 and m.kernel_index == m.claim.column
            assert "300s" in m.scaling and "qemu-vm" in m.scaling
        else:
            assert m.job is None and m.kernel_index == m.claim.column
            assert m.reason == (
                f"vm-scalability case {test} is not one of ours (" + m.reason.split("(", 1)[1]
            )
    assert {m.claim.job["test"] for m in mapped if m.reason is None} == OURS
    # the highlights are the table's figures: they map to the same kernels
    short = [c for c in claims.parse(seed("000")) if c.style == "short"]
    hl = map_claims(short, series(5))
    assert [(m.job, m.metric, m.base_index, m.kernel_index, m.reason) for m in hl[:2]] == [
        ("vm-scalability[test=mmap-pread-seq-mt]", "vm-scalability.throughput", 0, 1, None),
        ("vm-scalability[test=mmap-pread-seq-mt]", "vm-scalability.throughput", 0, 2, None),
    ]
    # the kernel columns in order: base, then the four patches
    first = [m.kernel_index for m in mapped[:4]]
    assert first == [1, 2, 3, 4]


def test_seed_000_columns_the_series_does_not_have_are_listed_not_guessed():
    lkp = [c for c in claims.parse(seed("000")) if c.style == "lkp"]
    # three patches: five columns cannot be placed by order, and no name matches
    mapped = map_claims(lkp, series(4))
    assert all(m.kernel_index is None and m.base_index is None for m in mapped)
    assert all("not in this series" in m.reason for m in mapped)
    # a highlight without a table naming its kernel in words only
    short = claims.parse("mmap-pread-seq-mt: -18.3% if split folios during compaction.")
    hl = map_claims(short, series(5))
    assert hl[0].job == "vm-scalability[test=mmap-pread-seq-mt]"
    assert hl[0].reason == ("kernel column split folios during compaction is not in this series")


def test_seed_004_maps_to_thpscale_within_the_guest_threads():
    cs = claims.parse(seed("004"))
    mapped = {m.claim.metric: m for m in map_claims(cs, series(23))}
    m3 = mapped["Amean fault-both-3"]
    assert (m3.job, m3.metric, m3.statistic, m3.reason) == (
        "thpscale", "thpscale.fault-both-3", "Amean", None,
    )  # fmt: skip
    # "baseline" and "patches" are the two ends of the series
    assert (m3.base_index, m3.kernel_index) == (0, 22)
    m5 = mapped["Amean fault-both-5"]
    assert (
        m5.job == "thpscale[max_threads=5]" and m5.reason is None and "max_threads 5" in m5.scaling
    )
    m12 = mapped["Amean fault-both-12"]
    assert m12.job is None
    assert m12.reason == "12 threads is beyond thpscale's 4 x CPUs on the 2-vCPU guest"
    h3 = mapped["Percentage huge-3"]
    assert (h3.job, h3.metric, h3.statistic) == ("thpscale", "thpscale.Percentage huge-3", "max")
    scan = mapped["Compaction migrate scanned"]
    assert (scan.job, scan.metric) == ("thpscale", "mmtests-vmstat.compact_migrate_scanned")
    # a bigger guest runs 12 threads
    big = {m.claim.metric: m for m in map_claims(cs, series(23), cpus=4, mem_mb=4096)}
    assert big["Amean fault-both-12"].job == "thpscale[max_threads=12]"
    assert big["Amean fault-both-12"].reason is None


def test_seed_003_and_001_map_to_their_seed_definitions():
    cs = claims.parse(seed("003"))
    mapped = map_claims(cs, series(4))
    by = {
        (m.claim.job.get("test"), m.claim.job.get("hogger"), m.claim.metric, m.claim.kernel): m
        for m in mapped
    }
    m = by[("hogger-frag-movable", None, "Success(N):", "redesign")]
    assert m.job == "seed-003-compaction-hogger[scenario=spread-25-movable]"
    assert (m.metric, m.statistic, m.base_index, m.kernel_index) == (
        "stress-highalloc.allocated-pass1", "Success(N)", 0, 2,
    )  # fmt: skip
    m = by[("build-frag-unmovable", None, "compact_stall", "threshold")]
    assert m.job == "seed-003-compaction-build[scenario=spread-25-unmovable]"
    assert m.metric == "mmtests-vmstat.compact_stall" and m.reason is None
    m = by[("hogger-frag-movable", "200MB", "Success:", "bzImage-improve-threshold")]
    assert m.job == "seed-003-compaction-hogger[scenario=spread-25-movable,hogger=400]"
    assert "200MB of their 512 MB VM: 400 MB" in m.scaling
    assert m.reason == (
        "kernel columns bzImage-improve-threshold and bzImage-improve-base are not in this series"
    )
    ops = next(m for m in mapped if m.claim.metric == "Ops 1")
    assert (ops.job, ops.metric, ops.kernel_index) == (
        "stress-highalloc",
        "stress-highalloc.pass1",
        1,
    )
    lat = map_claims(claims.parse(seed("001")), series(2))
    assert [(m.job, m.metric, m.statistic) for m in lat[:2]] == [
        ("seed-001-proactive-compaction", "stress-highalloc.latency-pass1", "p5"),
        ("seed-001-proactive-compaction", "stress-highalloc.latency-pass1", "p10"),
    ]
    assert all((m.base_index, m.kernel_index, m.reason) == (0, 1, None) for m in lat)


def test_robot_columns_by_sha_prefix_and_suites_we_do_not_have():
    text = (
        "=" * 89 + "\n"
        "compiler/cpufreq_governor/kconfig/mode/nr_task/rootfs/tbox_group/test/testcase:\n"
        "  gcc-12/performance/x86_64-rhel-9.4/process/100%/debian-12/lkp-icl/page_fault2/will-it-scale\n"
        '\ncommit: \n  1234abcd56 ("mm: one")\n  9876fedc54 ("mm: two")\n\n'
        "1234abcd56ef7890 9876fedc54ba3210aaaaaaaaaaa \n"
        "---------------- --------------------------- \n"
        "         %stddev     %change         %stddev\n"
        "             \\          |                \\  \n"
        "   1000000           -10.0%     900000        will-it-scale.per_process_ops\n"
    )
    (c,) = claims.parse(text)
    kernels = [("1234abcd56" + "0" * 30, "mm: one"), ("9876fedc54" + "1" * 30, "mm: two")]
    (m,) = map_claims([c], kernels)
    assert (m.base_index, m.kernel_index, m.job) == (0, 1, None)
    assert m.reason == "will-it-scale is not a suite here"
    (m,) = map_claims([c], [("1234abcd56" + "0" * 30, "mm: one"), ("5" * 40, "mm: other")])
    assert (
        m.reason
        == "will-it-scale is not a suite here; kernel column 9876fedc54 is not in this series"
    )


def test_a_suite_without_a_definition_yet_says_so(monkeypatch):
    from stackbench.jobs.benchmarks import definitions

    text = (
        "Running thpchallenge\n"
        "                  baselin              patche\n"
        "                 baseline             patches\n"
        "Amean fault-both-1   100.00 (   0.00%)    90.00 *  10.00%*\n"
    )
    (c,) = claims.parse(text)
    assert c.job == {"suite": "thpchallenge"}
    known = [n for n in definitions.names() if n != "thpchallenge"]
    monkeypatch.setattr(definitions, "names", lambda: known)
    (m,) = map_claims([c], series(2))
    assert m.reason == "thpchallenge has no job definition here" and m.job is None


def test_the_tables_we_print_map_back_to_our_jobs():
    lkp_text = (
        "=" * 89 + "\n"
        "compiler/kconfig/path_params/rootfs/tbox_group/testcase:\n"
        "  gcc-13/defconfig/performance-300s-512G-anon-w-rand/debian-12/qemu-vm/vm-scalability\n"
        "\ncommit: \n  base-k\n  new-k\n\n"
        "          base-k                       new-k \n"
        "---------------- --------------------------- \n"
        "         %stddev     %change         %stddev\n"
        "             \\          |                \\  \n"
        "    481000            +4.2%     501000        vm-scalability.throughput\n"
    )
    (m,) = map_claims(claims.parse(lkp_text), [("a" * 40, "base-k"), ("b" * 40, "new-k")])
    assert (m.job, m.base_index, m.kernel_index, m.reason) == (
        "vm-scalability[test=anon-w-rand]", 0, 1, None,
    )  # fmt: skip
    mm_text = (
        "                          v6.1     1/1-abc\n"
        "                        debian     1/1-abc\n"
        "Ops 1      30.00 (   0.00%)     40.00 (  33.33%)\n"
    )
    (c,) = claims.parse(mm_text)
    assert c.job == {"suite": "stress-highalloc"}
    (m,) = map_claims([c], series(2))
    assert (m.job, m.metric, m.statistic) == ("stress-highalloc", "stress-highalloc.pass1", "mean")


def test_robot_rows_map_to_what_our_runs_store():
    text = next(SHARED.glob("fixtures/lkp/reports/lkml-2025-*"), None)
    if text is None:
        pytest.skip("robot report excerpts not present")
    cs = claims.parse(text.read_text())
    kernels = [
        ("448854478ab2f477" + "0" * 24, "mm/rmap: one"),
        ("6af8cb80d3a9a6bb" + "1" * 24, "two"),
    ]
    by = {m.claim.metric: m for m in map_claims(cs, kernels)}
    tp = by["vm-scalability.throughput"]
    assert (tp.job, tp.base_index, tp.kernel_index, tp.reason) == (
        "vm-scalability[test=anon-cow-seq]", 0, 1, None,
    )  # fmt: skip
    assert tp.scaling.startswith("runtime 300s, size 8T on lkp-srf-2sp1: the guest runs")
    assert by["vm-scalability.median"].reason is None
    # LKP's time monitor is not ours; /proc/vmstat deltas are
    assert by["vm-scalability.time.user_time"].reason.startswith(
        "vm-scalability.time.user_time is not measured here"
    )
    assert by["uptime.idle"].reason.startswith("uptime.idle is not measured here")


def test_proc_vmstat_rows_map_to_the_vmstat_delta():
    text = next(SHARED.glob("fixtures/lkp/reports/lkml-2020-*"), None)
    if text is None:
        pytest.skip("robot report excerpts not present")
    # the same report for one of our cases
    cs = claims.parse(text.read_text().replace("swap-w-rand-mt", "anon-w-rand-mt"))
    by = {
        m.claim.metric: m
        for m in map_claims(cs, [("3852f6768e" + "0" * 30, "a"), ("aae466b005" + "1" * 30, "b")])
    }
    m = by["proc-vmstat.pgdeactivate"]
    assert (m.metric, m.statistic, m.reason) == ("mmtests-vmstat.pgdeactivate", "mean", None)
    assert m.job == "vm-scalability[test=anon-w-rand-mt,thp_enabled=never,thp_defrag=always]"


@pytest.mark.parametrize("suite", ["thpchallenge", "thpcompact"])
def test_current_mmtests_tables_map_to_their_own_suites(suite):
    text = (
        f"Running {suite}\n"
        "                  baselin              patche\n"
        "                 baseline             patches\n"
        "Amean fault-both-1   100.00 (   0.00%)    90.00 *  10.00%*\n"
    )
    (m,) = map_claims(claims.parse(text), series(2))
    assert (m.job, m.metric, m.reason) == (suite, f"{suite}.fault-both-1", None)
    assert (m.base_index, m.kernel_index) == (0, 1)
