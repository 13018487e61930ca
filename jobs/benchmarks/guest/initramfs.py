"""The guest image for builtin suites: a gzip'd newc initramfs built without privileges.

It holds busybox (static), our benchmark programs compiled statically (cached by source
hash under ``$STACKBENCH_HOME/guest-bin``), the case scripts, the suite runners, the
highalloc module, the plan and ``/init``. The archive is written here in Python so device
nodes (/dev/console) and root ownership need no root privileges, and the same inputs give
the same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shlex
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from stackbench import config, proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks import knobs, perfprof, suites
from stackbench.jobs.benchmarks.definitions import GUEST_DIR, WORKLOADS_DIR, SubJob
from stackbench.jobs.benchmarks.guest import mmtests_image

BUSYBOX = Path("/bin/busybox")
CC = "gcc"
CFLAGS = ("-O2", "-static", "-pthread", "-Wall")
# program -> its sources under jobs/benchmarks/workloads
PROGRAMS: dict[str, tuple[str, ...]] = {
    "usemem": ("usemem.c",),
    "readfile": ("readfile.c",),
    "thpfaults": ("thpfaults.c",),
    "fragment": ("fragment.c",),
    "clockres": ("clockres.c",),
}
RUNNERS = (
    "run-vm-scalability.sh",
    "run-thpscale.sh",
    "run-thpchallenge.sh",
    "run-thpcompact.sh",
    "run-stress-highalloc.sh",
    "scenario.sh",
    "run-vm-scalability-upstream.sh",
    "run-thpscale-upstream.sh",
    "run-thpchallenge-upstream.sh",
    "run-thpcompact-upstream.sh",
    *mmtests_image.RUNNERS.values(),
    mmtests_image.LIBRARY,
)
# commands the upstream case scripts call that busybox lacks or spells differently
UPSTREAM_BIN = GUEST_DIR / "upstream-bin"
MODULE_NAME = "stackbench_highalloc.ko"
# the first line /init prints on the console: the guest reached its userspace (qemu.boot's
# ``expect``)
READY_BANNER = "stackbench: guest up"
_ENV_VALUE_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._%+-")


@dataclass
class GuestPlan:
    """The sub-jobs one boot runs, in order."""

    subjobs: list[SubJob] = field(default_factory=list)

    def by_name(self) -> dict[str, SubJob]:
        return {sj.name: sj for sj in self.subjobs}


def as_plan(plan: list[SubJob] | GuestPlan) -> GuestPlan:
    return plan if isinstance(plan, GuestPlan) else GuestPlan(list(plan))


def plan_text(plan: list[SubJob] | GuestPlan) -> str:
    """/stackbench/plan: ``<name> <suite> <runs> <timeout_s>`` per sub-job."""
    lines = []
    for sj in as_plan(plan).subjobs:
        if not sj.name or any(c.isspace() for c in sj.name) or "/" in sj.name:
            raise StackbenchError(f"sub-job name {sj.name!r} cannot name a results directory")
        lines.append(f"{sj.name} {sj.suite} {sj.runs} {sj.timeout_s}\n")
    return "".join(lines)


def env_text(sj: SubJob) -> str:
    """/stackbench/jobs/<name>.env: the resolved parameters as shell assignments."""
    out = [f"# {sj.suite} {sj.test} {sj.suite_version}\n"]
    for key, value in sj.resolved.items():
        text = str(int(value) if isinstance(value, bool) else value)
        if not key.isidentifier() or not set(text) <= _ENV_VALUE_OK:
            raise StackbenchError(f"{sj.name}: resolved parameter {key}={text!r} is not plain")
        out.append(f"{key}={shlex.quote(text)}\n")
    return "".join(out)


# ---- static programs ------------------------------------------------------------------------


def _compiler_id() -> str:
    return proc.run([CC, "--version"]).stdout.splitlines()[0]


def compile_program(name: str, cache_dir: Path | None = None) -> Path:
    """Our program ``name`` built with ``gcc -O2 -static``, from the cache when its sources,
    flags and compiler are unchanged."""
    srcs = [WORKLOADS_DIR / s for s in PROGRAMS[name]]
    h = hashlib.sha256()
    h.update(_compiler_id().encode() + b"\0" + " ".join(CFLAGS).encode() + b"\0")
    for s in srcs:
        h.update(s.name.encode() + b"\0" + s.read_bytes() + b"\0")
    root = cache_dir or (config.home() / "guest-bin")
    out = root / h.hexdigest()[:16] / name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{name}.{os.getpid()}.tmp")
    try:
        proc.run([CC, *CFLAGS, "-o", tmp, *srcs])
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def compile_programs(cache_dir: Path | None = None) -> dict[str, Path]:
    return {name: compile_program(name, cache_dir) for name in PROGRAMS}


def is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a program interpreter (PT_INTERP)."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only; the guest is x86_64
            return False
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def upstream_files(plan: list[SubJob] | GuestPlan) -> dict[str, Path]:
    """The built upstream suites the plan's upstream sub-jobs run (path under
    /stackbench/upstream -> host file), fetched and built on first use (jobs/benchmarks/suites.py)."""
    files: dict[str, Path] = {}
    done: set[tuple[str, suites.Upstream]] = set()
    trees: set[suites.Upstream] = set()
    for sj in as_plan(plan).subjobs:
        if sj.upstream is None:
            continue
        if (sj.suite, sj.upstream) not in done:
            done.add((sj.suite, sj.upstream))
            files.update(suites.build(sj.suite, sj.upstream))
        if mmtests_image.wants_image(sj) and sj.upstream not in trees:
            trees.add(sj.upstream)
            files.update(mmtests_image.tree_files(sj.upstream))
    return files


# ---- cpio (newc) ----------------------------------------------------------------------------


class CpioWriter:
    """A minimal newc archive writer: every entry owned by root, mtime 0."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1
        self.names: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)):
        name = name.strip("/")
        if name in self.names:
            raise StackbenchError(f"initramfs: {name} added twice")
        self.names.add(name)
        self._raw(name, mode, data, rdev, nlink=2 if mode & 0o170000 == 0o040000 else 1)

    def _raw(self, name: str, mode: int, data: bytes, rdev: tuple[int, int], nlink: int):
        encoded = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1]]
        fields += [len(encoded), 0]
        self.ino += 1
        self.buf.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        self.buf.write(encoded)
        self._pad()
        self.buf.write(data)
        self._pad()

    def _pad(self) -> None:
        self.buf.write(b"\0" * (-self.buf.tell() % 4))

    def dir(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, 0o040000 | mode)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self._entry(name, 0o020000 | mode, rdev=(major, minor))

    def finish(self) -> bytes:
        self.ino = 0
        self._raw("TRAILER!!!", 0, b"", (0, 0), nlink=1)
        self.buf.write(b"\0" * (-self.buf.tell() % 512))
        return self.buf.getvalue()


def extract_initramfs(archive: Path, dest: Path) -> Path:
    """Unpack a gzip'd newc archive of :func:`build_initramfs` into ``dest`` (a bare-metal
    box runs the same image in a chroot, jobs/executors/native.py). Device nodes need root; a name that
    would leave ``dest`` is an error."""
    data = gzip.decompress(Path(archive).read_bytes())
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    pos = 0
    while True:
        if data[pos : pos + 6] != b"070701":
            raise StackbenchError(f"{archive}: not a newc archive at byte {pos}")
        f = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, rdev, namesize = f[1], f[6], (f[9], f[10]), f[11]
        pos += 110
        name = data[pos : pos + namesize - 1].decode()
        pos += namesize + (-(110 + namesize) % 4)
        body = data[pos : pos + size]
        pos += size + (-size % 4)
        if name == "TRAILER!!!":
            # an appended archive (an evidence boot's perf) follows its block padding
            while pos < len(data) and data[pos] == 0:
                pos += 1
            if pos >= len(data):
                return dest
            continue
        target = (root / name).resolve() if mode & 0o170000 != 0o120000 else root / name
        if not (target == root or target.is_relative_to(root)):
            raise StackbenchError(f"{archive}: {name} is outside the archive")
        kind = mode & 0o170000
        if kind == 0o040000:
            target.mkdir(mode & 0o7777, parents=True, exist_ok=True)
        elif kind == 0o100000:
            target.write_bytes(body)
            target.chmod(mode & 0o7777)
        elif kind == 0o120000:
            target.unlink(missing_ok=True)
            target.symlink_to(body.decode())
        elif kind == 0o020000:
            target.unlink(missing_ok=True)
            os.mknod(target, mode, os.makedev(*rdev))


def perf_archive(cache_dir: Path | None = None) -> bytes:
    """The gzip'd newc archive of perf and its libraries (jobs/benchmarks/perfprof.py) that an
    evidence boot's initramfs gets appended, cached by the files' names, sizes and times:
    compressing its 35 MB took 5 s a boot on the loaded 2-core host."""
    files = perfprof.guest_files()
    key = hashlib.sha256(
        repr(
            [
                (rel, str(p), p.stat().st_size, p.stat().st_mtime_ns)
                for rel, p in sorted(files.items())
            ]
            + [perfprof.FREQUENCY]
        ).encode()
    ).hexdigest()[:16]
    cached = (cache_dir or (config.home() / "guest-bin")) / f"perf-{key}.cpio.gz"
    if cached.is_file():
        return cached.read_bytes()
    cp = CpioWriter()
    for d in ("stackbench", perfprof.GUEST_DIR, f"{perfprof.GUEST_DIR}/lib"):
        cp.dir(d)
    for rel, path in sorted(files.items()):
        cp.file(rel, path.read_bytes(), 0o755)
    cp.file(f"{perfprof.GUEST_DIR}/frequency", f"{perfprof.FREQUENCY}\n".encode())
    data = gzip.compress(cp.finish(), compresslevel=6, mtime=0)
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cached.parent, prefix=".perf-", delete=False) as tf:
        tf.write(data)
    os.replace(tf.name, cached)
    return data


def build_initramfs(
    out: Path,
    plan: list[SubJob] | GuestPlan,
    module_ko: Path | None,
    *,
    busybox: Path = BUSYBOX,
    cache_dir: Path | None = None,
    coverage: list[str] | None = None,
    profile: bool = False,
) -> Path:
    """Write the gzip'd newc initramfs for ``plan`` to ``out`` and return ``out``.
    ``coverage``: an evidence boot's functions whose calls the guest counts during each run
    (jobs/executors/coverage_stage.py); a measured boot has none. ``profile``: the guest
    gets perf and samples the CPUs during each run (jobs/benchmarks/perfprof.py)."""
    gp = as_plan(plan)
    if not gp.subjobs:
        raise StackbenchError("initramfs: the plan has no sub-jobs")
    if not busybox.is_file():
        raise InputError(busybox, "busybox not found (install busybox-static)")
    if not is_static_elf(busybox):
        raise InputError(busybox, "busybox is not a static x86_64 executable")
    if module_ko is not None and not Path(module_ko).is_file():
        raise InputError(module_ko, "kernel module not found")
    needs_module = any(sj.suite == "stress-highalloc" for sj in gp.subjobs)
    if needs_module and module_ko is None:
        raise StackbenchError("initramfs: the plan runs stress-highalloc but no module was given")
    programs = compile_programs(cache_dir)
    upstream = upstream_files(gp)
    perf = perf_archive(cache_dir) if profile else b""

    cp = CpioWriter()
    for d in (
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "root",
        "etc",
        "results",
        "stackbench",
        "stackbench/bin",
        "stackbench/cases",
        "stackbench/guest",
        "stackbench/jobs",
        "stackbench/modules",
        "stackbench/guest/upstream-bin",
        "stackbench/upstream",
        *sorted(
            {f"stackbench/upstream/{d}" for rel in upstream for d in Path(rel).parents}
            - {"stackbench/upstream/."}
        ),
    ):
        cp.dir(d)
    cp.chardev("dev/console", 5, 1)
    cp.chardev("dev/null", 1, 3, 0o666)
    cp.file("bin/busybox", busybox.read_bytes(), 0o755)
    cp.symlink("bin/sh", "busybox")
    cp.file("init", (GUEST_DIR / "init.sh").read_bytes(), 0o755)
    for name, path in programs.items():
        cp.file(f"stackbench/bin/{name}", path.read_bytes(), 0o755)
    for case in sorted((WORKLOADS_DIR / "cases").glob("case-*.sh")):
        cp.file(f"stackbench/cases/{case.stem}", case.read_bytes(), 0o755)
    for runner in RUNNERS:
        cp.file(f"stackbench/guest/{runner}", (GUEST_DIR / runner).read_bytes(), 0o755)
    for tool in sorted(UPSTREAM_BIN.iterdir()):
        cp.file(f"stackbench/guest/upstream-bin/{tool.name}", tool.read_bytes(), 0o755)
    for rel, path in sorted(upstream.items()):
        cp.file(f"stackbench/upstream/{rel}", path.read_bytes(), 0o755)
    if module_ko is not None:
        cp.file(f"stackbench/modules/{MODULE_NAME}", Path(module_ko).read_bytes())
    cp.file("stackbench/plan", plan_text(gp).encode())
    versions = sorted({f"{sj.suite} {sj.suite_version}\n" for sj in gp.subjobs})
    cp.file("stackbench/versions", "".join(versions).encode())
    for sj in gp.subjobs:
        cp.file(f"stackbench/jobs/{sj.name}.env", env_text(sj).encode())
        cp.file(f"stackbench/jobs/{sj.name}.knobs", knobs.knobs_text(sj.setup.knobs).encode())
        cp.file(f"stackbench/jobs/{sj.name}.cmdline", (sj.setup.cmdline + "\n").encode())
    cp.file(
        "stackbench/knobs", knobs.all_paths_text([sj.setup.knobs for sj in gp.subjobs]).encode()
    )
    if coverage:
        cp.file("stackbench/coverage", "".join(f"{fn}\n" for fn in coverage).encode())
    data = cp.finish()

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", delete=False) as tf,
        gzip.GzipFile(filename="", fileobj=tf, mode="wb", mtime=0, compresslevel=6) as gz,
    ):
        gz.write(data)
    if perf:
        # a second archive after the first: the kernel unpacks each in turn
        with open(tf.name, "ab") as fh:
            fh.write(perf)
    os.replace(tf.name, out)
    return out
