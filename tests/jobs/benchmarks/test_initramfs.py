"""The guest initramfs: what it holds (listed and unpacked with the real cpio tool)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from stackbench import proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks.guest import initramfs

BUSYBOX = shutil.which("busybox") or "/bin/busybox"


@pytest.fixture(scope="module")
def bin_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("guest-bin")


def full_plan() -> list[d.SubJob]:
    subs: list[d.SubJob] = []
    for job in d.load_all():
        subs += d.expand(job, guest_mem_mb=1024, guest_cpus=2)
    return subs


def fake_module(tmp_path: Path) -> Path:
    ko = tmp_path / "stackbench_highalloc.ko"
    ko.write_bytes(b"\x7fELF not really a module")
    return ko


def cpio_list(archive: Path) -> list[str]:
    res = proc.run(["cpio", "-t", "--quiet"], input=gzip.decompress(archive.read_bytes()))
    return res.stdout.splitlines()


def unpack(archive: Path, dest: Path) -> Path:
    dest.mkdir()
    # device nodes cannot be created unprivileged; the rest is what the kernel unpacks
    proc.run(
        ["cpio", "-idm", "--quiet", "--no-absolute-filenames", "--nonmatching", "dev/*"],
        cwd=dest,
        input=gzip.decompress(archive.read_bytes()),
    )
    return dest


def test_initramfs_contents(tmp_path, bin_cache):
    plan = full_plan()
    out = initramfs.build_initramfs(
        tmp_path / "initrd.gz", plan, fake_module(tmp_path), cache_dir=bin_cache
    )
    names = set(cpio_list(out))
    for must in (
        "init",
        "bin/busybox",
        "bin/sh",
        "dev/console",
        "stackbench/bin/usemem",
        "stackbench/bin/readfile",
        "stackbench/bin/thpfaults",
        "stackbench/cases/case-anon-w-seq-mt",
        "stackbench/cases/case-lru-file-readtwice",
        "stackbench/guest/run-vm-scalability.sh",
        "stackbench/guest/run-thpscale.sh",
        "stackbench/guest/run-stress-highalloc.sh",
        "stackbench/modules/stackbench_highalloc.ko",
        "stackbench/plan",
        "stackbench/versions",
    ):
        assert must in names, must
    assert {f"stackbench/jobs/{sj.name}.env" for sj in plan} <= names

    root = unpack(out, tmp_path / "root")
    assert (root / "init").read_bytes() == (d.GUEST_DIR / "init.sh").read_bytes()
    assert (root / "init").stat().st_mode & 0o111
    assert (root / "bin/sh").is_symlink() and (root / "bin/sh").readlink() == Path("busybox")
    for prog in ("usemem", "readfile", "thpfaults"):
        assert initramfs.is_static_elf(root / "stackbench/bin" / prog)
    plan_lines = (root / "stackbench/plan").read_text().splitlines()
    assert len(plan_lines) == len(plan)
    first = plan[0]
    assert plan_lines[0] == f"{first.name} {first.suite} {first.runs} {first.timeout_s}"
    versions = (root / "stackbench/versions").read_text()
    assert f"thpscale {d.suite_version('thpscale')}" in versions
    # every shell script is valid busybox sh
    scripts = [root / "init", *root.glob("stackbench/guest/*.sh"), *root.glob("stackbench/cases/*")]
    for script in scripts:
        res = proc.run([BUSYBOX, "sh", "-n", script], check=False)
        assert res.returncode == 0, f"{script}: {res.stdout}"


def test_env_files_source_to_the_resolved_params(tmp_path, bin_cache):
    sj = next(s for s in full_plan() if s.test == "anon-w-seq-mt")
    out = initramfs.build_initramfs(tmp_path / "i.gz", [sj], None, cache_dir=bin_cache)
    root = unpack(out, tmp_path / "root")
    env = root / "stackbench/jobs" / f"{sj.name}.env"
    res = proc.run([BUSYBOX, "sh", "-c", '. "$1"; echo "$TEST $NR_TASK $MEM_PERMILLE"', "sh", env])
    assert res.stdout.strip() == "anon-w-seq-mt 2 125"
    assert "stackbench/modules/stackbench_highalloc.ko" not in cpio_list(out)


def test_same_inputs_give_the_same_archive(tmp_path, bin_cache):
    plan = [s for s in full_plan() if s.suite == "thpscale"]
    a = initramfs.build_initramfs(tmp_path / "a.gz", plan, None, cache_dir=bin_cache)
    b = initramfs.build_initramfs(tmp_path / "b.gz", plan, None, cache_dir=bin_cache)
    assert a.read_bytes() == b.read_bytes()


def test_highalloc_plan_needs_the_module(tmp_path, bin_cache):
    plan = [s for s in full_plan() if s.suite == "stress-highalloc"]
    with pytest.raises(StackbenchError, match="runs stress-highalloc but no module"):
        initramfs.build_initramfs(tmp_path / "x.gz", plan, None, cache_dir=bin_cache)
    with pytest.raises(InputError, match=r"nope.ko: kernel module not found"):
        initramfs.build_initramfs(
            tmp_path / "x.gz", plan, tmp_path / "nope.ko", cache_dir=bin_cache
        )
    assert not (tmp_path / "x.gz").exists()


def test_dynamic_busybox_is_refused(tmp_path, bin_cache):
    plan = [s for s in full_plan() if s.suite == "thpscale"]
    dynamic = Path(shutil.which("ls") or "/bin/ls")
    with pytest.raises(InputError, match="busybox is not a static x86_64 executable"):
        initramfs.build_initramfs(
            tmp_path / "x.gz", plan, None, busybox=dynamic, cache_dir=bin_cache
        )
    with pytest.raises(StackbenchError, match="the plan has no sub-jobs"):
        initramfs.build_initramfs(tmp_path / "x.gz", [], None, cache_dir=bin_cache)


def test_unsafe_plan_values_are_refused():
    sj = full_plan()[0]
    sj.resolved["TEST"] = "x; reboot"
    with pytest.raises(StackbenchError, match=r"TEST='x; reboot' is not plain"):
        initramfs.env_text(sj)
    sj.name = "a b"
    with pytest.raises(StackbenchError, match="cannot name a results directory"):
        initramfs.plan_text([sj])
