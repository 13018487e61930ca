"""Test helpers for the kernel tests: the shared kernel cache and a minimal busybox initramfs.

The tree repository, ccache, object dirs and artifacts live in one fixed directory shared by
every test run and session (``STACKBENCH_TEST_CACHE``, default /var/cache/stackbench-test), so
only the first run ever pays for unpacking Linux and the cold kernel build.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from stackbench import proc

BUSYBOX = Path("/bin/busybox")
MARKER = "STACKBENCH-TEST-INIT-REACHED"

# /init of the test initramfs. What it does is chosen on the kernel command line
# (sbtest=ok|crash|hang) so one image serves every boot test.
INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "%(marker)s"
mode=ok
for arg in $(cat /proc/cmdline); do
  case "$arg" in sbtest=*) mode="${arg#sbtest=}" ;; esac
done
case "$mode" in
  crash) echo c > /proc/sysrq-trigger ;;
  hang) while :; do sleep 1000; done ;;
esac
# send results over the named virtio port, as the real guest runner does
port=""
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = "org.stackbench.results" ] && port="/dev/${p##*/}"
done
mkdir -p /results/sub
echo "hello from $(uname -r)" > /results/hello.txt
grep -E '^(thp_fault_alloc|compact_stall) ' /proc/vmstat > /results/sub/vmstat
[ -n "$port" ] && tar -cf "$port" -C /results . && echo "results sent on $port"
sync
reboot -f
"""


def cache_dir() -> Path:
    """STACKBENCH_TEST_CACHE, else /var/cache/stackbench-test when this user may write there,
    else ~/.cache/stackbench-test."""
    raw = os.environ.get("STACKBENCH_TEST_CACHE")
    if raw:
        return Path(raw)
    system = Path("/var/cache/stackbench-test")
    try:
        system.mkdir(parents=True, exist_ok=True)
        if os.access(system, os.W_OK):
            return system
    except OSError:
        pass
    return Path.home() / ".cache" / "stackbench-test"


def use_kernel_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the kernel store at the shared test cache (skip when it cannot exist here)."""
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        pytest.skip(f"kernel test cache {root} unusable: {exc}")
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(root))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    return root


def require_kernel_tools() -> None:
    missing = [
        t
        for t in ("qemu-system-x86_64", "make", "gcc", "cpio", "flex", "bison", "bc")
        if shutil.which(t) is None
    ]
    if not Path("/usr/src/linux-source-6.1.tar.xz").exists():
        missing.append("/usr/src/linux-source-6.1.tar.xz (linux-source-6.1)")
    if not BUSYBOX.exists():
        missing.append("busybox-static")
    if missing:
        pytest.skip("kernel tooling not installed: " + ", ".join(missing))


def make_initramfs(out: Path) -> Path:
    """A gzip'd newc cpio with static busybox and the test /init."""
    root = out.parent / (out.name + ".root")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "proc", "sys", "dev", "results", "tmp"):
        (root / d).mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    init = root / "init"
    init.write_text(INIT % {"marker": MARKER})
    init.chmod(0o755)
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    raw = out.with_suffix(".cpio")
    proc.run(
        ["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0", "-F", raw],
        cwd=root,
        input="\n".join(names) + "\n",
    )
    with open(raw, "rb") as src, gzip.open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    shutil.rmtree(root)
    return out


def base_kernel(monkeypatch: pytest.MonkeyPatch):
    """The default tree's base commit, built (or reused) in the shared cache."""
    from stackbench.jobs.benchmarks.highalloc import build_module
    from stackbench.kernels import build, trees

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    res = build.build(repo, tree.default_base, module_builder=build_module)
    assert res.status == "built", res.log_tail
    return repo, res


# the tiny guest the benchmark tests boot the base kernel as
GUEST_MEM_MB = 1024
GUEST_CPUS = 2


def boot_plan(res, plan, workdir: Path, *, module=None, timeout_s: int, expect_within_s: int,
              **boot_args):  # fmt: skip
    """Kernel build RES booted under QEMU as the tiny guest, with our initramfs holding the
    sub-jobs PLAN (and the highalloc MODULE): the boot's result. BOOT_ARGS go to qemu.boot."""
    from stackbench.jobs.benchmarks.guest import initramfs
    from stackbench.kernels import qemu

    initrd = initramfs.build_initramfs(
        workdir / "initrd.gz", plan, module, cache_dir=workdir / "guest-bin"
    )
    return qemu.boot(
        res.bzimage,
        initrd,
        workdir=workdir / "vm",
        cpus=GUEST_CPUS,
        mem_mb=GUEST_MEM_MB,
        timeout_s=timeout_s,
        expect=initramfs.READY_BANNER,
        expect_within_s=expect_within_s,
        **boot_args,
    )


def guest_specs(res, name: str = ""):
    """The kernel and machine the runs collected from a boot_plan of RES are stored under."""
    from stackbench.resultsdb.rundata import KernelSpec, MachineSpec

    kernel = KernelSpec(
        commit=res.commit, name=name, config_hash=res.config_hash, compiler=res.compiler
    )
    machine = MachineSpec(name="qemu-test", kind="qemu", cpus=GUEST_CPUS, memory_mb=GUEST_MEM_MB)
    return kernel, machine
