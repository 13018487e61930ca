"""The whole guest path on a real kernel: highalloc module built against it, our initramfs
booted under QEMU with a tiny plan (one short run of each benchmark), results back over the
virtio port, and collect() parsing them. Uses the kernel tests' shared kernel cache."""

from __future__ import annotations

import pytest
from kernelkit import base_kernel

from stackbench.jobs import collect as c
from stackbench.jobs import definitions as d
from stackbench.jobs.guest import initramfs
from stackbench.resultsdb.ingest import KernelSpec, MachineSpec

GUEST_MEM_MB = 1024
GUEST_CPUS = 2


def tiny_plan() -> list[d.SubJob]:
    jobs = [
        {
            "suite": "vm-scalability",
            "runs": 2,
            "timeout": 120,
            "params": {
                "test": ["anon-w-seq-mt", "lru-file-readtwice", "anon-cow-rand"],
                "mem_fraction": 0.05,
                "runtime": "20s",
            },
        },
        {
            "suite": "thpscale",
            "runs": 1,
            "timeout": 180,
            "params": {"max_threads": 2, "mapsize_fraction": 0.1},
        },
        {
            "suite": "stress-highalloc",
            "runs": 1,
            "timeout": 180,
            "params": {"pace_ms": 1, "alloc_fraction": 0.2, "load_fraction": 0.1},
        },
    ]
    plan: list[d.SubJob] = []
    for i, job in enumerate(jobs):
        plan += d.expand(
            d.parse(job, path=f"tiny-{i}.yaml"), guest_mem_mb=GUEST_MEM_MB, guest_cpus=GUEST_CPUS
        )
    return plan


def highalloc_module(res, monkeypatch):
    """The module the kernel build made, or one built now against the same workspace."""
    ko = res.modules.get("stackbench_highalloc")
    if ko is not None:
        return ko
    from stackbench.jobs.highalloc import build_module
    from stackbench.kernels import build

    with build.workspace(res.tree, res.config_name):
        return build_module(res.srcdir, res.objdir, res.artifact_dir / "modules-test")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tiny_plan_runs_in_the_guest_and_collects(monkeypatch, tmp_path):
    from stackbench.kernels import qemu

    _, res = base_kernel(monkeypatch)
    ko = highalloc_module(res, monkeypatch)
    plan = tiny_plan()
    initrd = initramfs.build_initramfs(
        tmp_path / "initrd.gz", plan, ko, cache_dir=tmp_path / "guest-bin"
    )
    boot = qemu.boot(
        res.bzimage,
        initrd,
        workdir=tmp_path / "vm",
        cpus=GUEST_CPUS,
        mem_mb=GUEST_MEM_MB,
        timeout_s=1200,
        expect=initramfs.READY_BANNER,
        expect_within_s=120,
    )
    assert boot.status == "ok", boot.reason + "\n" + boot.console_tail
    assert boot.results_dir is not None
    assert (boot.results_dir / "complete").is_file(), boot.console_tail

    kernel = KernelSpec(commit=res.commit, config_hash=res.config_hash, compiler=res.compiler)
    machine = MachineSpec(name="qemu-test", kind="qemu", cpus=GUEST_CPUS, memory_mb=GUEST_MEM_MB)
    runs = c.collect(boot.results_dir, plan, kernel=kernel, machine=machine)
    assert len(runs) == 3 * 2 + 1 + 1
    problems = [(r.job.suite, r.job.test, r.iteration, r.status, r.error) for r in runs]
    assert all(r.status == "done" for r in runs), problems

    for r in runs:
        assert r.samples["duration.elapsed"][0] > 0
        assert "mmtests-vmstat.pgfault" in r.samples
        assert r.sysstate["start"]["/proc/buddyinfo"].startswith("Node 0")
    vms = [r for r in runs if r.job.suite == "vm-scalability"]
    assert all(r.samples["vm-scalability.throughput"][0] > 0 for r in vms)
    thp = next(r for r in runs if r.job.suite == "thpscale")
    assert {"thpscale.fault-both-1", "thpscale.fault-both-2"} <= set(thp.samples)
    assert 0 <= thp.samples["thpscale.Percentage huge-1"][0] <= 100
    ha = next(r for r in runs if r.job.suite == "stress-highalloc")
    for k in (1, 2, 3):
        assert 0 <= ha.samples[f"stress-highalloc.pass{k}"][0] <= 100
    # at rest with most memory free, a fifth of memory in huge pages must be allocatable
    assert ha.samples["stress-highalloc.pass3"][0] > 50


def test_module_build_needs_a_configured_kernel_with_modules(tmp_path):
    from stackbench.errors import InputError
    from stackbench.jobs.highalloc import build_module

    obj = tmp_path / "obj"
    obj.mkdir()
    with pytest.raises(InputError, match=r"obj/.config: kernel object dir has no .config"):
        build_module(tmp_path, obj, tmp_path / "out")
    (obj / ".config").write_text("CONFIG_64BIT=y\n# CONFIG_MODULES is not set\n")
    with pytest.raises(InputError, match="CONFIG_MODULES is not set"):
        build_module(tmp_path, obj, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_module_build_failure_is_one_clear_error(tmp_path):
    from stackbench.errors import StackbenchError
    from stackbench.jobs.highalloc import build_module

    obj = tmp_path / "obj"
    obj.mkdir()
    (obj / ".config").write_text("CONFIG_MODULES=y\n")
    (obj / "Makefile").write_text("modules:\n\t@echo no kernel here; exit 2\n")
    with pytest.raises(StackbenchError, match=r"(?s)highalloc module build against .* failed"):
        build_module(tmp_path, obj, tmp_path / "out")
    assert not (tmp_path / "out" / "stackbench_highalloc.ko").exists()
