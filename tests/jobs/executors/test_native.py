"""Native runs (jobs/executors/native.py): the guest image run in a chroot on the running kernel, as a
bare-metal box does after its kexec. These run for real on this machine's own kernel (root,
util-linux's unshare); the sizes are those of a 1 GiB machine so they stay small. The
whole box flow, with a kexec, is in tests/jobs/executors/test_box_vm.py."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks.guest import initramfs
from stackbench.jobs.executors import native
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not initramfs.BUSYBOX.is_file(),
    reason="native runs need root, unshare and busybox-static",
)

MACHINE = MachineSpec(name="box-test", kind="baremetal", cpus=2, memory_mb=1024)


def kernel() -> KernelSpec:
    return KernelSpec(commit="0" * 40, name="running", config_hash="c" * 64, compiler="gcc")


def artifact(tmp_path, release: str = "") -> os.PathLike:
    art = tmp_path / "artifact"
    (art / "modules").mkdir(parents=True)
    (art / "config").write_text("CONFIG_64BIT=y\n")
    (art / "meta.json").write_text(json.dumps({"kernel_release": release}))
    return art


def mounts_under(path) -> list[str]:
    root = str(path.resolve())
    with open("/proc/self/mountinfo") as fh:
        return [ln.split()[4] for ln in fh if ln.split()[4].startswith(root)]


def test_native_runs_use_the_guest_format(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    plan = native.plan_for_box(
        "thpscale[max_threads=2,mapsize_fraction=0.05,suite_source=builtin]", 2, MACHINE
    )
    runs = native.run_plan(
        artifact(tmp_path), plan, kernel=kernel(), machine=MACHINE,
        workdir=tmp_path / "native", boot_id="native-test",
    )  # fmt: skip
    assert [r.status for r in runs] == ["done", "done"], [r.error for r in runs]
    for r in runs:
        assert r.source == native.SOURCE
        assert 0 <= r.samples["thpscale.Percentage huge-1"][0] <= 100
        # the snapshots and knobs of a QEMU guest's run, read from this machine
        assert "knobs" in r.logs and "status" in r.logs
        assert "/proc/vmstat" in r.sysstate["start"]
    assert os.uname().release in runs[0].logs["console.log"].decode()
    # the chroot is gone, and nothing it mounted outlived it
    assert not (tmp_path / "native" / "root").exists()
    assert mounts_under(tmp_path) == []


def test_a_hung_native_run_is_killed_and_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    plan = native.plan_for_box(
        "thpscale[max_threads=2,mapsize_fraction=0.05,suite_source=builtin]", 3, MACHINE
    )
    runs = native.run_plan(
        artifact(tmp_path), plan, kernel=kernel(), machine=MACHINE,
        workdir=tmp_path / "native", boot_id="native-hang", timeout_s=2,
    )  # fmt: skip
    assert [r.status for r in runs] == ["timeout"] * 3
    assert "did not finish within 2 s; killed" in runs[0].error
    assert runs[0].samples == {}
    assert mounts_under(tmp_path) == []


def test_a_knob_this_kernel_refuses_fails_that_run_only(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    plan = native.plan_for_box(
        "thpscale[max_threads=2,mapsize_fraction=0.05,suite_source=builtin,vm.no_such_knob=1]",
        1,
        MACHINE,
    )
    runs = native.run_plan(
        artifact(tmp_path), plan, kernel=kernel(), machine=MACHINE,
        workdir=tmp_path / "native", boot_id="native-knob",
    )  # fmt: skip
    assert [r.status for r in runs] == ["failed"]
    assert "this kernel has no /proc/sys/vm/no_such_knob" in runs[0].error


def test_the_wrong_running_kernel_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    with pytest.raises(StackbenchError, match="the kexec did not take"):
        native.run_job(
            artifact=artifact(tmp_path, release="0.0.0-not-this-one"), job="thpscale",
            runs=1, kernel=kernel(), machine=MACHINE, workdir=tmp_path / "n", boot_id="x",
        )  # fmt: skip
    assert not (tmp_path / "n").exists()


def test_extract_initramfs_round_trip(tmp_path):
    cp = initramfs.CpioWriter()
    cp.dir("a")
    cp.dir("a/b")
    cp.file("a/b/x", b"hello", 0o755)
    cp.symlink("a/l", "b/x")
    import gzip

    (tmp_path / "i.gz").write_bytes(gzip.compress(cp.finish()))
    root = initramfs.extract_initramfs(tmp_path / "i.gz", tmp_path / "out")
    assert (root / "a/b/x").read_bytes() == b"hello"
    assert os.access(root / "a/b/x", os.X_OK)
    assert (root / "a/l").resolve() == (root / "a/b/x").resolve()


def test_extract_refuses_a_name_outside(tmp_path):
    cp = initramfs.CpioWriter()
    cp.file("../escape", b"x")
    import gzip

    (tmp_path / "i.gz").write_bytes(gzip.compress(cp.finish()))
    with pytest.raises(StackbenchError, match="outside the archive"):
        initramfs.extract_initramfs(tmp_path / "i.gz", tmp_path / "out")
    assert not (tmp_path / "escape").exists()
