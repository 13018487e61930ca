"""A reproducer a report attaches: one shell script that sets up what a run had and runs it
without stackbench (issue 29: a developer gave up on LKP's dependencies and wrote his own).

The script compiles the benchmark from the source it carries, makes an initramfs with
busybox, and boots the kernel it is given under QEMU with the run's guest size, kernel
command line and system knobs (THP, vm.* sysctls); the kernel's config fragments come with
it. It prints the benchmark's headline metric as stackbench stores it. It needs gcc,
busybox-static, cpio, gzip and qemu-system-x86_64; nothing of stackbench.

vm-scalability is the suite it covers (the demo's regression is found there); for a series
that ran no vm-scalability job there is no reproducer yet.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks import definitions, knobs
from stackbench.resultsdb import db, runs_q, series_q

SUITE = "vm-scalability"
WORKLOADS = Path(__file__).resolve().parent / "workloads"
GUEST = Path(__file__).resolve().parent / "guest"


@dataclass
class Attachment:
    name: str
    text: str


def _heredoc(path: str, text: str, tag: str) -> str:
    if f"\n{tag}\n" in f"\n{text}\n":
        raise StackbenchError(f"{path}: holds the here-document tag {tag}")
    return f"cat > {path} <<'{tag}'\n{text.rstrip(chr(10))}\n{tag}\n"


def _fragments(config_name: str) -> str:
    from stackbench.kernels import config as kconfig

    out = []
    for name in (config_name or "").split("+"):
        try:
            out.append(f"# --- {name}.config\n" + kconfig.fragment_path(name).read_text())
        except StackbenchError:
            out.append(f"# --- {name}: not a fragment this stackbench knows\n")
    return "".join(out)


# LKP's throughput: per repetition (closed by each "./case-<test>" line) the sum of the
# tasks' KB/s, then the mean over repetitions, printed as an integer
_AWK = r"""/\.\/case-[a-z-]+/ { if (n) sums[k++] = s; s = 0; n = 0; next }
/^\.*[0-9]+ bytes \/ [0-9]+ usecs = [0-9]+ KB.s/ { s += $7; n++ }
END { if (n) sums[k++] = s; if (!k) exit 1; t = 0; for (i = 0; i < k; i++) t += sums[i];
      printf "vm-scalability.throughput: %d\n", t / k }"""


def script(
    *,
    commit: str,
    config_name: str,
    params: dict[str, Any],
    cpus: int,
    mem_mb: int,
    origin: str = "",
) -> str:
    """The reproducer of one vm-scalability job on the kernel of ``commit``."""
    p = {**definitions.DEFAULTS[SUITE], **params}
    try:
        env = definitions.RESOLVERS[SUITE](None, p, mem_mb, cpus)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise StackbenchError(f"vm-scalability params {p}: {exc!r}") from None
    setup = knobs.split(p)
    test = str(env["TEST"])
    case = WORKLOADS / "cases" / f"case-{test}.sh"
    if not case.is_file():
        raise StackbenchError(f"no vm-scalability case named {test!r}")
    knob_lines = "".join(
        f"echo {shlex.quote(v)} > {knobs.knob_path(k)}\n" for k, v in sorted(setup.knobs.items())
    )
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in sorted(env.items()))
    init = (
        "#!/bin/busybox sh\n"
        "/bin/busybox --install -s /bin\nexport PATH=/bin\n"
        "mount -t proc proc /proc\nmount -t sysfs sysfs /sys\n"
        "mount -t devtmpfs devtmpfs /dev 2>/dev/null\nmount -t tmpfs tmpfs /tmp\n"
        "mkdir -p /tmp/work\n"
        "# the run's system knobs\n" + knob_lines + exports
        + "export SB_BIN=/bin SB_CASES=/cases SB_WORK=/tmp/work\n"
        "echo REPRO-BEGIN\nsh /run-vm-scalability.sh\necho REPRO-END rc=$?\n"
        "reboot -f  # QEMU runs with -no-reboot: this ends it\n"
    )  # fmt: skip
    cmdline = " ".join(x for x in ("console=ttyS0", setup.cmdline, "panic=-1") if x)
    parts = [
        "#!/bin/sh",
        f"# stackbench reproducer{': ' + origin if origin else ''}",
        f"# vm-scalability {test} on the kernel of commit {commit}, built with the",
        f"# config {config_name or 'of your choice'} (its fragments: $work/config-fragments).",
        f"# Guest: {cpus} CPUs, {mem_mb} MB. Params: {p}",
        "# Usage: sh reproduce.sh BZIMAGE   (ACCEL=kvm to use KVM; KEEP=1 keeps the work dir)",
        "# Needs gcc, busybox (static), cpio, gzip and qemu-system-x86_64; not stackbench.",
        "set -eu",
        "KERNEL=${1:?usage: sh reproduce.sh BZIMAGE}",
        "ACCEL=${ACCEL:-tcg}",
        f"CPUS={cpus}",
        f"MEM_MB={mem_mb}",
        f"CMDLINE={shlex.quote(cmdline)}",
        "work=$(mktemp -d)",
        '[ -n "${KEEP:-}" ] || trap \'rm -rf "$work"\' EXIT',
        'mkdir -p "$work/root/bin" "$work/root/cases" "$work/root/proc" "$work/root/sys" '
        '"$work/root/dev" "$work/root/tmp"',
        _heredoc('"$work/config-fragments"', _fragments(config_name), "EOF_CONFIG"),
        _heredoc('"$work/usemem.c"', (WORKLOADS / "usemem.c").read_text(), "EOF_USEMEM"),
        'gcc -O2 -static -pthread -o "$work/root/bin/usemem" "$work/usemem.c"',
        _heredoc(f'"$work/root/cases/case-{test}"', case.read_text(), "EOF_CASE"),
        _heredoc(
            '"$work/root/run-vm-scalability.sh"',
            (GUEST / "run-vm-scalability.sh").read_text(),
            "EOF_RUNNER",
        ),  # fmt: skip
        _heredoc('"$work/root/init"', init, "EOF_INIT"),
        'chmod +x "$work/root/init"',
        'cp "$(command -v busybox || echo /bin/busybox)" "$work/root/bin/busybox"',
        '(cd "$work/root" && find . | cpio -o -H newc --quiet | gzip) > "$work/initrd.gz"',
        'if [ "$ACCEL" = kvm ]; then cpu="-accel kvm -cpu host"; else cpu="-accel tcg -cpu max"; fi',
        "# shellcheck disable=SC2086",
        'qemu-system-x86_64 $cpu -smp "$CPUS" -m "$MEM_MB" -nodefaults -no-reboot '
        '-display none -monitor none -serial "file:$work/console.log" '
        '-kernel "$KERNEL" -initrd "$work/initrd.gz" -append "$CMDLINE"',
        'sed -n \'/^REPRO-BEGIN/,/^REPRO-END/p\' "$work/console.log" > "$work/output"',
        f'awk \'{_AWK}\' "$work/output" || {{ tail -n 40 "$work/console.log"; exit 1; }}',
    ]
    return "\n".join(parts) + "\n"


def for_series(eng: Engine, series_id: int, commit: str | None = None) -> Attachment | None:
    """The reproducer of the series' vm-scalability job on ``commit`` (else its top commit),
    or None when that kernel ran none."""
    with db.session(eng) as s:
        commits = series_q.kernel_commits(s, series_id)
        target = commit or (commits[-1] if commits else None)
        found = runs_q.first_of_suite(s, target, SUITE) if target else None
        if found is None:
            return None
        job, build, machine = found
        cpus = (machine.cpus if machine is not None else None) or 2
        mem_mb = (machine.memory_mb if machine is not None else None) or 1024
        params, config_name = {"test": job.test, **(job.params or {})}, build.config_name
    origin = f"series {series_id}"
    text = script(commit=target, config_name=config_name, params=params, cpus=cpus,
                  mem_mb=mem_mb, origin=origin)  # fmt: skip
    return Attachment(f"reproduce-{target[:12]}.sh", text)
