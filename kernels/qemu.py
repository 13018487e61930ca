"""Boot a kernel under QEMU (direct kernel boot), watch its serial console for crashes, enforce
a timeout, and collect what the guest sent over the results channel.

Channel contract with the guest (stackbench.jobs.benchmarks.guest): a virtio serial port named
``org.stackbench.results`` whose host side is the file ``<workdir>/channel.bin``. The guest
writes a tar stream of its results there, then ``reboot -f``; with ``-no-reboot`` QEMU exits.
The host extracts the tar into ``<workdir>/results``. The console is ``<workdir>/console.log``.

The VM is always killed (its whole process group) on every path out of :func:`boot`,
including exceptions and KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stackbench import proc
from stackbench.errors import StackbenchError
from stackbench.kernels import paths

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"
CHANNEL_NAME = "org.stackbench.results"
# a working KVM boots the tiny guest to its root-mount panic in about a second
KVM_PROBE_TIMEOUT_S = 10.0
# after a crash line, let the rest of the trace reach the console before the VM is killed
CRASH_GRACE_S = 3.0
POLL_S = 0.2
# under TCG the guest keeps the TSC: QEMU's emulated TSC is the host's, steady and shared by
# every vCPU, but the guest's cross-CPU sync check fails on the slow emulation ("Marking TSC
# unstable due to TSCs unsynchronized") and it falls back to the HPET, whose reads are
# emulated MMIO (600 ns a read measured, against 60 ns for the TSC).
# kernels/configs/tiny-guest.config says why the guest needs ACPI for the TSC at all.
# no_timer_check: the IO-APIC timer check counts jiffies over a busy-wait of a few ms; on a
# loaded host the emulated vCPU misses it and the guest panics "IO-APIC + timer doesn't
# work!" (seen in CI under full load). The timer itself works; the check only misjudges it.
TCG_CLOCK_CMDLINE = "tsc=reliable no_timer_check"

# lines that mean the kernel is dead or broken; matched anywhere in a console line
CRASH_PATTERNS = [
    re.compile(p)
    for p in (
        r"Kernel panic - not syncing",
        r"\bBUG: ",
        r"kernel BUG at ",
        r"\bOops: ",
        r"general protection fault",
        r"Unable to handle kernel",
        r"stack-protector: Kernel stack is corrupted",
        r"KVM internal error",
    )
]


@dataclass
class BootResult:
    status: str  # ok | crashed | timeout | error
    accel_used: str
    console_path: Path
    results_dir: Path | None
    console_tail: str
    duration_s: float
    exit_code: int | None = None
    reason: str = ""  # the crash line, the timeout, or what went wrong

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def find_crash(text: str) -> str | None:
    """The first console line that shows a kernel crash, or None."""
    for line in text.splitlines():
        for pat in CRASH_PATTERNS:
            if pat.search(line):
                return _clean_line(line)
    return None


def _clean_line(line: str) -> str:
    return re.sub(r"^\[\s*\d+\.\d+\]\s*", "", line.strip())


def qemu_argv(
    kernel: Path,
    initrd: Path | None,
    workdir: Path,
    *,
    accel: str,
    cpus: int,
    mem_mb: int,
    append: str,
    channel: bool = True,
    extra: list[str] | tuple[str, ...] = (),
) -> list[str]:
    clock = TCG_CLOCK_CMDLINE if accel != "kvm" else ""
    cmdline = " ".join(x for x in ("console=ttyS0", clock, append, "panic=-1") if x)
    argv = [QEMU]
    if accel == "kvm":
        argv += ["-accel", "kvm", "-cpu", "host"]
    else:
        argv += ["-accel", "tcg", "-cpu", "max"]
    argv += [
        "-smp", str(cpus),
        "-m", str(mem_mb),
        "-nodefaults",
        "-no-reboot",
        "-display", "none",
        "-monitor", "none",
        "-serial", f"file:{workdir / 'console.log'}",
        "-kernel", str(kernel),
        "-append", cmdline,
    ]  # fmt: skip
    if initrd is not None:
        argv += ["-initrd", str(initrd)]
    if channel:
        argv += [
            "-device", "virtio-serial-pci",
            "-chardev", f"file,id=sbres,path={workdir / 'channel.bin'}",
            "-device", f"virtserialport,chardev=sbres,name={CHANNEL_NAME}",
        ]  # fmt: skip
    return argv + list(extra)


def boot(
    kernel: Path,
    initrd: Path | None,
    *,
    workdir: Path,
    cpus: int = 2,
    mem_mb: int = 1024,
    timeout_s: float = 600,
    append: str = "",
    accel: str = "auto",
    expect: str | None = None,
    expect_within_s: float | None = None,
    on_line: Callable[[str], None] | None = None,
    extra: list[str] | tuple[str, ...] = (),
) -> BootResult:
    """Boot ``kernel`` with ``initrd`` until QEMU exits, the console shows a crash, or
    ``timeout_s`` passes. ``accel``: auto (probe KVM, else TCG), kvm or tcg.

    ``expect``: a console text that shows the guest reached its userspace (the runner's
    banner); without it after ``expect_within_s`` the boot is a hang (status timeout) long
    before the benchmarks' own time budget runs out. ``on_line`` sees every console line as it
    arrives (progress displays). ``extra``: more QEMU arguments (a disk image:
    stackbench.jobs.benchmarks.guest.image.drive_args)."""
    if accel not in ("auto", "kvm", "tcg"):
        raise StackbenchError(f"accel must be auto, kvm or tcg, not {accel!r}")
    if accel == "auto":
        accel = "kvm" if kvm_usable(kernel) else "tcg"
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in ("console.log", "channel.bin", "qemu.log"):
        (workdir / stale).unlink(missing_ok=True)
    shutil.rmtree(workdir / "results", ignore_errors=True)
    argv = qemu_argv(
        kernel, initrd, workdir, accel=accel, cpus=cpus, mem_mb=mem_mb, append=append, extra=extra
    )
    res = _run_vm(argv, workdir, timeout_s, expect, expect_within_s, on_line)
    res.accel_used = accel
    if res.status == "ok":
        res.results_dir = extract_results(workdir / "channel.bin", workdir / "results")
    return res


def _run_vm(
    argv: list[str],
    workdir: Path,
    timeout_s: float,
    expect: str | None = None,
    expect_within_s: float | None = None,
    on_line: Callable[[str], None] | None = None,
) -> BootResult:
    console = workdir / "console.log"
    console.touch()
    started = time.monotonic()
    log.debug("boot: %s", argv)
    # proc.run blocks until exit; a VM must be watched while it runs and killed as a group,
    # so it is started here directly (still an argument list, never a shell string)
    with open(workdir / "qemu.log", "wb") as qlog:
        vm = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=qlog,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    status, reason, crash_at = "timeout", "", None
    watcher = _ConsoleWatcher(console, expect, on_line)
    try:
        while True:
            exited = vm.poll() is not None
            line = watcher.scan()
            if line and crash_at is None:
                crash_at, reason = time.monotonic(), line
            if exited:
                break
            now = time.monotonic()
            if crash_at is not None and now - crash_at >= CRASH_GRACE_S:
                break
            if now - started >= timeout_s:
                reason = f"no exit within {timeout_s:g} s (hung); VM killed"
                break
            if (
                expect is not None
                and expect_within_s is not None
                and not watcher.expected_seen
                and now - started >= expect_within_s
            ):
                reason = (
                    f"the guest did not reach userspace ({expect!r} on the console) within "
                    f"{expect_within_s:g} s (hung boot); VM killed"
                )
                break
            time.sleep(POLL_S)
    finally:
        kill_vm(vm)
    line = watcher.scan()  # what arrived while the VM went down
    if line and crash_at is None:
        crash_at, reason = time.monotonic(), line
    duration = time.monotonic() - started
    code = vm.returncode
    if crash_at is not None:
        status = "crashed"
    elif exited and code == 0:
        status, reason = "ok", ""
    elif exited:
        status = "error"
        reason = f"qemu exited {code}: " + proc.tail_text(workdir / "qemu.log", 5).strip()
    return BootResult(
        status=status,
        accel_used="",
        console_path=console,
        results_dir=None,
        console_tail=proc.tail_text(console, 60),
        duration_s=duration,
        exit_code=code if exited else None,
        reason=reason,
    )


def _die_with_parent() -> None:
    """In the child before exec: the guest gets SIGKILL when its runner dies, even by SIGKILL
    (a stopped Buildbot worker, a killed demo); its own session would otherwise outlive it."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class _ConsoleWatcher:
    """Reads the console file as it grows and reports the first crash line."""

    def __init__(
        self,
        path: Path,
        expect: str | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""
        self.expect = expect
        self.expected_seen = expect is None
        self.on_line = on_line

    def scan(self) -> str | None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return None
        if not data:
            return None
        self.offset += len(data)
        text = self.partial + data.decode(errors="replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        for line in lines:
            if not self.expected_seen and self.expect in line:
                self.expected_seen = True
            if self.on_line is not None:
                self.on_line(line.rstrip("\r"))
        found = find_crash("\n".join(lines))
        if found is None and len(self.partial) > 4096:
            found, self.partial = find_crash(self.partial), ""
        return found


def kill_vm(vm: subprocess.Popen) -> None:
    """Stop the VM's whole process group: TERM, then KILL if it lingers."""
    if vm.poll() is None:
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(vm.pid, sig)
            except ProcessLookupError:
                break
            try:
                vm.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # QEMU is gone; anything it left in its group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(vm.pid, signal.SIGKILL)
    vm.wait()


def extract_results(channel: Path, dest: Path) -> Path | None:
    """Unpack the guest's tar stream; None when the guest sent nothing. A stream cut short
    (guest died while sending) keeps the members that arrived whole."""
    if not channel.is_file() or channel.stat().st_size == 0:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(channel, mode="r:*") as tar:
            for member in tar:
                try:
                    tar.extract(member, dest, filter="data")
                except (tarfile.FilterError, OSError) as exc:
                    log.warning("results: skipped %s: %s", member.name, exc)
    except (tarfile.ReadError, EOFError) as exc:
        log.warning("results stream %s is incomplete: %s", channel, exc)
    return dest


# --- KVM probe -------------------------------------------------------------------------------

_probe_cache: dict[str, tuple[bool, str]] = {}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def kvm_usable(kernel: Path) -> bool:
    """Whether KVM can run a guest here. Cached per process and, per host boot, in the home
    (the answer only changes with the host). Logs the fallback once."""
    key = _boot_id()
    if key in _probe_cache:
        return _probe_cache[key][0]
    cache_file = paths.cache_root() / "kvm-probe.json"
    try:
        saved = json.loads(cache_file.read_text())
        if saved.get("boot_id") == key:
            _probe_cache[key] = (bool(saved["usable"]), saved.get("reason", ""))
            return _probe_cache[key][0]
    except (OSError, ValueError, KeyError):
        pass
    usable, reason = probe_kvm(kernel)
    _probe_cache[key] = (usable, reason)
    if not usable:
        log.warning("KVM unusable here (%s), falling back to TCG", reason)
    with contextlib.suppress(OSError):
        cache_file.write_text(json.dumps({"boot_id": key, "usable": usable, "reason": reason}))
    return usable


def probe_kvm(kernel: Path, timeout_s: float = KVM_PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Boot ``kernel`` under KVM without an initramfs: a working KVM runs it to the point
    where it looks for a root filesystem and panics (panic=-1 then ends QEMU). Anything else
    (QEMU abort, emulation failure, no progress) means KVM cannot be used."""
    dev = Path("/dev/kvm")
    if not dev.exists():
        return False, "/dev/kvm does not exist"
    if not os.access(dev, os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user"
    workdir = paths.cache_root() / "kvm-probe"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    argv = qemu_argv(
        kernel, None, workdir, accel="kvm", cpus=1, mem_mb=256, append="", channel=False
    )
    res = _run_vm(argv, workdir, timeout_s)
    console = proc.tail_text(workdir / "console.log", 200)
    qemu_out = proc.tail_text(workdir / "qemu.log", 5).strip()
    reached_root = re.search(
        r"VFS: Unable to mount root|No working init found|Kernel panic", console
    )
    if "KVM internal error" in console + qemu_out or "emulation failure" in qemu_out:
        return False, "KVM internal error: emulation failure"
    if reached_root and res.status != "timeout":
        return True, ""
    if res.status == "timeout":
        if not console.strip():
            return False, f"a KVM guest printed nothing in {timeout_s:g} s"
        return False, f"a KVM guest did not finish booting in {timeout_s:g} s"
    detail = qemu_out.splitlines()[-1] if qemu_out else f"qemu exit code {res.exit_code}"
    return False, detail
