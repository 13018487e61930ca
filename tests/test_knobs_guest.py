"""System knobs and the scenario stage on a real kernel under QEMU: the knobs are applied
and read back, a knob the kernel lacks fails its run with the reason, the scenario stage
fragments memory (the fragmentation score says so), and vm.compaction_proactiveness=20 makes
kcompactd compact proactively where 0 does not (seed 001). Uses the kernel tests' cache."""

from __future__ import annotations

import pytest
from kernelkit import base_kernel
from test_guest_boot import highalloc_module

from stackbench.jobs import collect as c
from stackbench.jobs import definitions as d
from stackbench.jobs.guest import initramfs
from stackbench.resultsdb.ingest import KernelSpec, MachineSpec

GUEST_MEM_MB = 1024
GUEST_CPUS = 2
FILL_FREE = {
    "thp_enabled": "madvise",
    "thp_defrag": "madvise",
    "vm.compaction_proactiveness": [0, 20],
    "scenario": "fill-free-3of4",
    "settle": 10,
    "gfp": "hugetlb",
    "pace_ms": 0,
    "alloc_fraction": 0.3,
    "load_fraction": 0,
    "passes": 1,
}


def plan() -> list[d.SubJob]:
    jobs = [
        FILL_FREE,
        {
            "scenario": "spread-25-unmovable",
            "hogger": 200,
            "order": 3,
            "attempts": 3000,
            "pace_ms": 0,
            "load_fraction": 0,
            "passes": 1,
        },
        {"vm.no_such_knob": 1, "alloc_fraction": 0.05, "load_fraction": 0, "passes": 1},
    ]
    out: list[d.SubJob] = []
    for i, params in enumerate(jobs):
        job = d.parse({"suite": "stress-highalloc", "runs": 1, "timeout": 400, "params": params})
        job.name = f"knobs-{i}"
        out += d.expand(job, guest_mem_mb=GUEST_MEM_MB, guest_cpus=GUEST_CPUS)
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_knobs_and_scenarios_on_a_real_kernel(monkeypatch, tmp_path):
    from stackbench.kernels import qemu

    _, res = base_kernel(monkeypatch)
    ko = highalloc_module(res, monkeypatch)
    subjobs = plan()
    initrd = initramfs.build_initramfs(
        tmp_path / "initrd.gz", subjobs, ko, cache_dir=tmp_path / "guest-bin"
    )
    boot = qemu.boot(
        res.bzimage,
        initrd,
        workdir=tmp_path / "vm",
        cpus=GUEST_CPUS,
        mem_mb=GUEST_MEM_MB,
        timeout_s=1500,
        expect=initramfs.READY_BANNER,
        expect_within_s=120,
    )
    assert boot.status == "ok", boot.reason + "\n" + boot.console_tail
    kernel = KernelSpec(commit=res.commit, config_hash=res.config_hash, compiler=res.compiler)
    machine = MachineSpec(name="qemu-test", kind="qemu", cpus=GUEST_CPUS, memory_mb=GUEST_MEM_MB)
    runs = {
        (r.job.params.get("vm.compaction_proactiveness"), r.job.params.get("scenario")): r
        for r in c.collect(boot.results_dir, subjobs, kernel=kernel, machine=machine)
    }
    print({k: (r.status, r.error) for k, r in runs.items()})
    p0, p20 = runs[(0, "fill-free-3of4")], runs[(20, "fill-free-3of4")]
    spread, lacking = runs[(None, "spread-25-unmovable")], runs[(None, None)]

    # a knob the kernel lacks: that run fails with the reason, the others run
    assert lacking.status == "failed"
    assert lacking.error.startswith(
        "knob vm.no_such_knob: this kernel has no /proc/sys/vm/no_such_knob"
    )
    for r in (p0, p20, spread):
        assert r.status == "done", r.error
    # the guest read the knobs back and they are stored with the run
    assert p20.meta["knobs"]["thp_enabled"] == "madvise"
    assert p20.meta["knobs"]["thp_defrag"] == "madvise"
    assert p20.meta["knobs"]["vm.compaction_proactiveness"] == "20"
    assert p0.meta["knobs"]["vm.compaction_proactiveness"] == "0"
    # a job without THP knobs runs on the boot's defaults again (restored between jobs)
    assert spread.meta["knobs"]["thp_enabled"] == "always"
    assert spread.meta["knobs"]["vm.compaction_proactiveness"] == "20"

    # the scenario stage fragments memory: no free 2 MB block left after fill-free
    for r in (p0, p20):
        before = r.sysstate["fragmentation"]["scenario_start"]
        zone = max(before, key=lambda z: before[z]["free_pages"])
        print(zone, before[zone]["score"], r.sysstate["fragmentation"]["start"][zone]["score"])
        assert before[zone]["score"] < 50
    assert p0.sysstate["fragmentation"]["start"][zone]["score"] > 90
    # proactiveness 20 sets kcompactd to work through the settle time; 0 leaves it idle
    daemon0 = p0.samples["scenario-vmstat.compact_daemon_migrate_scanned"][0]
    daemon20 = p20.samples["scenario-vmstat.compact_daemon_migrate_scanned"][0]
    print("compact_daemon_migrate_scanned", daemon0, daemon20)
    assert daemon20 > 1000 and daemon20 > 10 * max(daemon0, 1)
    # and it leaves memory less fragmented for the allocations
    assert (
        p20.sysstate["fragmentation"]["start"][zone]["score"]
        < p0.sysstate["fragmentation"]["start"][zone]["score"]
    )
    # seed 003's shape: order-3 attempts after the even 25% in unmovable pipes and a hogger
    assert len(spread.samples["stress-highalloc.latency-pass1"]) == 3000
    assert spread.samples["stress-highalloc.allocated-pass1"][0] > 0
