"""QEMU boots of the real tiny-guest kernel: clean exit with results over the virtio channel,
crash detection, hang detection with the VM killed, and the interrupt path."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from helpers.kernelkit import MARKER, base_kernel, make_initramfs

from stackbench.kernels import qemu

slow = pytest.mark.slow


@pytest.fixture
def kernel_and_initrd(monkeypatch, tmp_path):
    _, res = base_kernel(monkeypatch)
    initrd = make_initramfs(tmp_path / "initrd.cpio.gz")
    return res.bzimage, initrd


def _vm_processes(workdir: Path) -> list[int]:
    """QEMU processes whose command line mentions this test's workdir."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmd and str(workdir) in cmd:
            found.append(int(entry.name))
    return found


@slow
def test_boot_ok_collects_results(kernel_and_initrd, tmp_path):
    kernel, initrd = kernel_and_initrd
    wd = tmp_path / "ok"
    res = qemu.boot(kernel, initrd, workdir=wd, mem_mb=256, timeout_s=120, append="sbtest=ok")
    assert res.status == "ok", res.reason + "\n" + res.console_tail
    assert res.accel_used in ("kvm", "tcg")
    assert MARKER in res.console_path.read_text()
    assert res.results_dir is not None
    assert (res.results_dir / "hello.txt").read_text().startswith("hello from 6.1")
    assert "thp_fault_alloc" in (res.results_dir / "sub" / "vmstat").read_text()
    assert _vm_processes(wd) == []


@slow
def test_boot_crash_is_detected(kernel_and_initrd, tmp_path):
    kernel, initrd = kernel_and_initrd
    wd = tmp_path / "crash"
    res = qemu.boot(kernel, initrd, workdir=wd, mem_mb=256, timeout_s=120, append="sbtest=crash")
    assert res.status == "crashed"
    assert "Kernel panic" in res.console_tail
    assert "sysrq" in res.reason.lower() or "panic" in res.reason.lower()
    assert res.results_dir is None
    assert _vm_processes(wd) == []


@slow
def test_boot_hang_times_out_and_vm_is_killed(kernel_and_initrd, tmp_path):
    kernel, initrd = kernel_and_initrd
    wd = tmp_path / "hang"
    res = qemu.boot(kernel, initrd, workdir=wd, mem_mb=256, timeout_s=20, append="sbtest=hang")
    assert res.status == "timeout"
    assert "no exit within 20 s" in res.reason
    assert MARKER in res.console_tail
    assert _vm_processes(wd) == []


@slow
def test_interrupt_kills_vm(kernel_and_initrd, tmp_path, monkeypatch):
    kernel, initrd = kernel_and_initrd
    wd = tmp_path / "interrupt"
    calls = {"n": 0}
    real_sleep = qemu.time.sleep

    def interrupting_sleep(s):
        calls["n"] += 1
        if calls["n"] == 10:  # the VM is running by now
            assert _vm_processes(wd), "the VM should be running before the interrupt"
            raise KeyboardInterrupt
        real_sleep(s)

    monkeypatch.setattr(qemu.time, "sleep", interrupting_sleep)
    with pytest.raises(KeyboardInterrupt):
        qemu.boot(kernel, initrd, workdir=wd, mem_mb=256, timeout_s=120, append="sbtest=hang")
    monkeypatch.setattr(qemu.time, "sleep", real_sleep)
    assert _vm_processes(wd) == []


def test_missing_kernel_is_an_error(tmp_path):
    wd = tmp_path / "err"
    res = qemu.boot(tmp_path / "no-such-bzImage", None, workdir=wd, timeout_s=30, accel="tcg")
    assert res.status == "error"
    assert "qemu exited" in res.reason


@slow
def test_kvm_probe_gives_a_verdict(kernel_and_initrd, monkeypatch, tmp_path):
    kernel, _ = kernel_and_initrd
    usable, reason = qemu.probe_kvm(kernel, timeout_s=15)
    if not usable:
        assert reason  # says why it falls back to TCG
    assert os.path.exists("/dev/kvm") or not usable


# --- fast: console and channel handling, no VM -------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "[    1.234] Kernel panic - not syncing: sysrq triggered crash",
        "[    2.000] BUG: kernel NULL pointer dereference, address: 0000000000000008",
        "[    3.1] kernel BUG at mm/compaction.c:123!",
        "[    0.5] Oops: 0002 [#1] SMP",
        "general protection fault, probably for non-canonical address",
    ],
)
def test_find_crash_lines(line):
    text = f"[    0.000] Linux version 6.1\n{line}\n[    9.0] more\n"
    assert qemu.find_crash(text) == qemu._clean_line(line)


def test_find_crash_ignores_healthy_console():
    text = "[    0.0] Linux version 6.1\nRun /init as init process\nBUGS: none\nOK\n"
    assert qemu.find_crash(text) is None


def test_extract_results_truncated_stream_keeps_whole_members(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, size in (("a.txt", 100), ("b.bin", 50000)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(b"x" * size))
    data = buf.getvalue()
    channel = tmp_path / "channel.bin"
    channel.write_bytes(data[:20000])  # guest died while sending b.bin
    out = qemu.extract_results(channel, tmp_path / "res")
    assert out is not None
    assert (out / "a.txt").read_bytes() == b"x" * 100


def test_extract_results_refuses_escaping_paths(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
        info = tarfile.TarInfo("good.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    channel = tmp_path / "channel.bin"
    channel.write_bytes(buf.getvalue())
    out = qemu.extract_results(channel, tmp_path / "res")
    assert not (tmp_path / "escape.txt").exists()
    assert (out / "good.txt").read_text() == "ok"


def test_extract_results_empty_channel(tmp_path):
    channel = tmp_path / "channel.bin"
    channel.write_bytes(b"")
    assert qemu.extract_results(channel, tmp_path / "res") is None


@slow
def test_boot_that_never_reaches_userspace_is_a_hang(kernel_and_initrd, tmp_path):
    kernel, initrd = kernel_and_initrd
    wd = tmp_path / "noinit"
    res = qemu.boot(
        kernel,
        initrd,
        workdir=wd,
        mem_mb=256,
        timeout_s=300,
        append="sbtest=hang",
        expect="this banner is never printed",
        expect_within_s=15,
    )
    assert res.status == "timeout"
    assert "did not reach userspace" in res.reason
    assert _vm_processes(wd) == []


@slow
def test_console_lines_reach_the_callback(kernel_and_initrd, tmp_path):
    kernel, initrd = kernel_and_initrd
    lines: list[str] = []
    res = qemu.boot(
        kernel,
        initrd,
        workdir=tmp_path / "lines",
        mem_mb=256,
        timeout_s=120,
        append="sbtest=ok",
        expect=MARKER,
        expect_within_s=60,
        on_line=lines.append,
    )
    assert res.status == "ok"
    assert MARKER in lines
