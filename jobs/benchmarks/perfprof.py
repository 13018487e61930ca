"""The CPU profile of an evidence boot (docs/profile.md): Debian's ``perf`` (linux-perf),
copied with its shared libraries into the evidence boot's initramfs (:func:`guest_files`),
samples every CPU on the cpu-clock software event during each benchmark
(jobs/benchmarks/guest/init.sh writes ``<run>/perf.data``), and the host reads the file back
with the same perf against the kernel's own System.map (:func:`read_run`): per symbol the
share of the run's samples in it (self) and under it on the call chain (children).

cpu-clock because the guest runs under TCG, which emulates no PMU; with a PMU (KVM) the
figures would be cycles. The tiny guest is built with CONFIG_PERF_EVENTS (x86 selects it);
its kernel call chains come from the "guess" unwinder (every kernel text address on the
stack), so a children share can include a stale frame: the self shares are exact."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from stackbench.errors import StackbenchError

PERF = Path("/usr/bin/perf")
# where the guest finds perf and its libraries (run through the copied dynamic loader)
GUEST_DIR = "stackbench/perf"
# samples per second and CPU: TCG pays for each sample's unwinding
FREQUENCY = 499
# a symbol below this share of both kernels' samples is left out of the stored profile
KEEP_SHARE = 0.0005
REPORT_TIMEOUT_S = 300

_LIB = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def guest_files(perf: Path = PERF) -> dict[str, Path]:
    """The initramfs paths (under :data:`GUEST_DIR`) of perf, its dynamic loader and every
    shared library ``ldd`` names; StackbenchError when perf is not installed."""
    if not perf.is_file():
        raise StackbenchError(f"{perf} not found (install linux-perf)")
    real = perf.resolve()
    out = {f"{GUEST_DIR}/perf": real}
    try:
        listing = subprocess.run(
            ["ldd", str(real)], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise StackbenchError(f"ldd {real}: {exc}") from exc
    for m in _LIB.finditer(listing):
        lib = Path(m.group(1))
        name = "ld.so" if "ld-linux" in lib.name else f"lib/{lib.name}"
        out[f"{GUEST_DIR}/{name}"] = lib.resolve()
    if f"{GUEST_DIR}/ld.so" not in out:
        raise StackbenchError(f"ldd {real}: no dynamic loader listed")
    return out


def read_run(run_dir: Path, system_map: Path | None, perf: Path = PERF) -> dict[str, Any] | None:
    """A run's profile: ``samples``, ``self`` and ``children`` (kernel symbol -> share of
    the sampled time, 0..1; every user-space sample in one :data:`USER` entry, kernel
    addresses no symbol covers in :data:`UNRESOLVED`), or
    ``error`` with the reason. None when the boot did not profile."""
    if system_map is None:
        return None
    error = run_dir / "perf-error"
    if error.is_file():
        return {"error": error.read_text(errors="replace").strip() or "perf failed in the guest"}
    data = run_dir / "perf.data"
    if not data.is_file():
        return {"error": "the guest wrote no perf.data for this run"}
    if not Path(system_map).is_file():
        return {"error": f"the kernel's System.map is missing ({system_map})"}
    try:
        text = _report(data, Path(system_map), perf)
    except StackbenchError as exc:
        return {"error": str(exc)}
    samples, self_share, children = parse_report(text)
    if not samples:
        return {"error": "perf recorded no samples"}
    return {
        "event": "cpu-clock",
        "samples": samples,
        "self": _kept(self_share),
        "children": _kept(children),
    }


# every user-space sample: the guest's programs are not symbolized (the profile is the kernel's)
USER = "[user space]"
UNRESOLVED = "[unresolved]"
_ADDRESS = re.compile(r"(?:0x)?[0-9a-f]{8,}")
# perf report --children -F overhead_children,overhead,sample,sym:
# "<children %> <self %> <self samples> [k] <symbol>" ([.] for user space)
_ROW = re.compile(
    r"^\s*(?P<children>[\d.]+)%\s+(?P<self>[\d.]+)%\s+(?P<n>\d+)\s+\[(?P<where>.)\]\s+(?P<sym>.+?)\s*$"
)


def parse_report(text: str) -> tuple[int, dict[str, float], dict[str, float]]:
    """(samples, self shares, children shares) from ``perf report``'s rows; a share is of
    the sampled time (perf weighs each sample by its period)."""
    samples = 0
    self_share: dict[str, float] = {}
    children: dict[str, float] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        samples += int(m["n"])
        sym = m["sym"] if m["where"] == "k" else USER
        if _ADDRESS.fullmatch(sym):
            # a call chain entry no symbol covers (a user address on a kernel chain, a
            # stale word the guess unwinder took for a return address)
            sym = UNRESOLVED
        self_share[sym] = self_share.get(sym, 0.0) + float(m["self"]) / 100
        if sym not in (USER, UNRESOLVED):
            children[sym] = max(children.get(sym, 0.0), float(m["children"]) / 100)
    return samples, self_share, children


def _kept(shares: dict[str, float]) -> dict[str, float]:
    return {
        sym: round(v, 6)
        for sym, v in sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
        if v >= KEEP_SHARE
    }


def _report(data: Path, system_map: Path, perf: Path) -> str:
    """``perf report``'s rows for ``data``, the kernel symbolized from ``system_map``. The
    host's own kernel symbols must not be used: an empty --symfs and a scratch HOME keep
    perf to the System.map given."""
    with tempfile.TemporaryDirectory(prefix="sb-perf-") as scratch:
        cmd = [
            str(perf), "report", "-i", str(data), "--stdio", "-q", "--force",
            "--kallsyms", str(system_map), "--symfs", scratch, "--sort", "sym",
            "-g", "none", "--percent-limit", "0", "--children",
            "-F", "overhead_children,overhead,sample,sym",
        ]  # fmt: skip
        env = {**os.environ, "HOME": scratch, "PAGER": "cat"}
        try:
            res = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=REPORT_TIMEOUT_S
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise StackbenchError(f"perf report failed: {exc}") from exc
    if res.returncode != 0:
        last = (res.stderr or "").strip().splitlines()
        raise StackbenchError(f"perf report exited {res.returncode}: {last[-1] if last else ''}")
    return res.stdout


def available(perf: Path = PERF) -> str | None:
    """None when the host can give the guest perf, else why not."""
    if shutil.which(str(perf)) is None and not perf.is_file():
        return f"{perf} not found (install linux-perf)"
    return None
