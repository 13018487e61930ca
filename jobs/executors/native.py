"""Run a job natively on a bare-metal box, on the kernel it booted after the kexec.

The box runs exactly what a QEMU guest runs: the same image (jobs/benchmarks/guest/initramfs.py: busybox,
our programs, the upstream suites, the plan, the knobs), unpacked into a directory and started
by its own /init in a chroot, inside a private mount namespace (``unshare --mount`` so the
proc, sysfs, devtmpfs and tmpfs mounts /init makes vanish with it). ``/stackbench/native``
tells /init not to send its results over a virtio port nor to reboot: the results directory
is read here by the same collect() as after a QEMU boot. So the knobs are written to the box's
own /proc and /sys (and restored to the boot-time values between jobs), the snapshots, the
scenario stage, the runners and the result format are the same; the machine is the box.

What differs from QEMU: there is no console to watch for a crash. A kernel that dies takes
the box with it; the master's wait step then ends the attempt as ``lost`` after its report
timeout (jobs/executors/buildbot). A run that hangs is killed here at the plan's time budget and its
runs fail with that reason; nothing is uploaded for a job that did not finish.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from stackbench import proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks import knobs
from stackbench.jobs.benchmarks.collect import collect
from stackbench.jobs.benchmarks.definitions import SubJob
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec, RunData

SOURCE = "native"
# /init's last word when every run of the plan is done
DONE_LINE = "stackbench: all runs done"
CONSOLE_TAIL_LINES = 40


def box_size() -> tuple[int, int]:
    """This machine's CPUs and memory in MB (what a job scales its sizes to)."""
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    return os.cpu_count() or 1, mem_kb // 1024


def plan_for_box(job: str, runs: int, machine: MachineSpec) -> list[SubJob]:
    """The job's sub-jobs sized for this box (the machine's declared size, else its own)."""
    from stackbench.jobs.executors.jobspecs import plan_for, resolve_jobs
    from stackbench.jobs.executors.settings import Settings

    cpus, mem_mb = box_size()
    settings = Settings(cpus=machine.cpus or cpus, mem_mb=machine.memory_mb or mem_mb)
    return plan_for(resolve_jobs([job], runs), settings)


def kexec_append(artifact: Path, plan: list[SubJob]) -> str:
    """The kernel command line the plan's knobs ask for (added to the box's own at kexec)."""
    append, _refused = knobs.boot_setup(plan, Path(artifact) / "config")
    return append


def check_running_kernel(artifact: Path) -> None:
    """Refuse to measure a kernel other than the artifact's (the kexec did not take)."""
    meta_path = Path(artifact) / "meta.json"
    want = json.loads(meta_path.read_text()).get("kernel_release") if meta_path.is_file() else ""
    have = os.uname().release
    if want and have != want:
        raise StackbenchError(
            f"this box runs kernel {have}, not the artifact's {want}: the kexec did not take"
        )


def run_job(
    *,
    artifact: Path,
    job: str,
    runs: int,
    kernel: KernelSpec,
    machine: MachineSpec,
    workdir: Path,
    boot_id: str,
    timeout_s: float | None = None,
) -> list[RunData]:
    """Run ``job`` ``runs`` times on the running kernel; failed runs carry their reason."""
    check_running_kernel(artifact)
    plan = plan_for_box(job, runs, machine)
    return run_plan(
        artifact, plan, kernel=kernel, machine=machine, workdir=workdir, boot_id=boot_id,
        timeout_s=timeout_s,
    )  # fmt: skip


def run_plan(
    artifact: Path,
    plan: list[SubJob],
    *,
    kernel: KernelSpec,
    machine: MachineSpec,
    workdir: Path,
    boot_id: str,
    timeout_s: float | None = None,
) -> list[RunData]:
    from stackbench.jobs.benchmarks.guest.initramfs import build_initramfs, extract_initramfs
    from stackbench.jobs.executors.boot_stage import MODULE_FOR_SUITE, failure_runs

    if os.geteuid() != 0:
        raise StackbenchError("a native run writes kernel knobs and mounts: run it as root")
    for tool in ("unshare", "chroot"):
        if shutil.which(tool) is None:
            raise StackbenchError(f"a native run needs {tool} (util-linux, coreutils)")
    artifact = Path(artifact)
    modules = {p.stem: p for p in sorted((artifact / "modules").glob("*.ko"))}
    runnable, out = [], []

    def fail(sjs: list[SubJob], status: str, why: str, logs: dict[str, bytes]) -> None:
        runs = failure_runs(sjs, kernel, machine, status, why, boot_id, logs)
        for r in runs:
            r.source = SOURCE
        out.extend(runs)

    _append, refused = knobs.boot_setup(plan, artifact / "config")
    bad = {id(sj): why for sj, why in refused}
    for sj in plan:
        mod = MODULE_FOR_SUITE.get(sj.suite)
        if id(sj) in bad:
            fail([sj], "failed", bad[id(sj)], {})
        elif mod and mod not in modules:
            fail([sj], "failed", "the module for this suite was not built for this kernel", {})
        elif sj.resolved.get("SB_IMAGE"):
            fail([sj], "failed", "image jobs run under QEMU only (the box is the userland)", {})
        else:
            runnable.append(sj)
    if not runnable:
        return out
    module_ko = next((modules[m] for m in MODULE_FOR_SUITE.values() if m in modules), None)
    workdir.mkdir(parents=True, exist_ok=True)
    root = workdir / "root"
    if root.exists():
        _remove_root(root)
    try:
        initrd = build_initramfs(workdir / "image.cpio.gz", runnable, module_ko)
    except StackbenchError as exc:
        fail(runnable, "failed", f"preparing the suites failed: {exc}", {})
        return out
    extract_initramfs(initrd, root)
    (root / "stackbench" / "native").write_text("1\n")
    budget = timeout_s or sum(sj.runs * sj.timeout_s for sj in runnable) + 60
    console_path = workdir / "console.log"
    status, reason = _run_init(root, console_path, budget)
    console = console_path.read_bytes()[-(1 << 20) :]
    tail = proc.tail_text(console_path, CONSOLE_TAIL_LINES)
    if status != "ok":
        fail(runnable, status, f"{reason}\n--- output ---\n{tail}", {"console.log": console})
    else:
        collected = collect(
            root / "results", runnable, kernel=kernel, machine=machine, source=SOURCE,
            boot_id=boot_id,
        )  # fmt: skip
        for r in collected:
            r.logs = {**r.logs, "console.log": console}
        out.extend(collected)
    _remove_root(root)
    return out


def _run_init(root: Path, console_path: Path, budget_s: float) -> tuple[str, str]:
    argv = ["unshare", "--mount", "--propagation", "private", "chroot", str(root), "/init"]
    started = time.monotonic()
    with open(console_path, "wb") as console:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = child.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return "timeout", f"the native run did not finish within {budget_s:g} s; killed"
        finally:
            _kill_group(child)  # scenario helpers left behind go too
    text = console_path.read_text(errors="replace")
    if code != 0 or DONE_LINE not in text:
        took = time.monotonic() - started
        return "failed", f"the native run ended with exit {code} after {took:.0f} s"
    return "ok", ""


def _kill_group(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _remove_root(root: Path) -> None:
    """Delete the chroot, but never through a mount that outlived the run's namespace."""
    resolved = str(root.resolve())
    with open("/proc/self/mountinfo") as fh:
        mounted = [ln.split()[4] for ln in fh]
    if any(m == resolved or m.startswith(resolved + "/") for m in mounted):
        raise InputError(root, "something is still mounted under the native run's root")
    shutil.rmtree(root)
