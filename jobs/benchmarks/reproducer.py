"""A reproducer a report attaches: one shell script that sets up what a run had and runs it
without stackbench (issue 29: a developer gave up on LKP's dependencies and wrote his own).

The script compiles the benchmark from the source it carries, makes an initramfs with
busybox, and boots the kernel it is given under QEMU with the run's guest size, kernel
command line, system knobs (THP, vm.* sysctls) and scenario stage; the kernel's config
fragments come with it. It prints the benchmark's headline metric as stackbench stores it.
It needs gcc, busybox-static, cpio, gzip and qemu-system-x86_64; nothing of stackbench.
stress-highalloc also needs its kernel module built against that very kernel (``make -C
<objdir> M=<module> modules``, as stackbench builds the guest's), so make and the
kernel's object dir too.

Every builtin suite has one: vm-scalability, thpscale, thpchallenge, thpcompact and
stress-highalloc, so every seed job too. A series is reproduced by its first suite in
``definitions.SUITES`` order that ran on the commit (vm-scalability first: the demo's
regression is found there).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks import definitions, knobs
from stackbench.kernels import config as kconfig
from stackbench.kernels import qemu
from stackbench.resultsdb import db, runs_q, series_q

WORKLOADS = Path(__file__).resolve().parent / "workloads"
GUEST = Path(__file__).resolve().parent / "guest"
MODULE_SOURCES = ("stackbench_highalloc.c", "Kbuild", "Makefile")


@dataclass
class Attachment:
    name: str
    text: str


@dataclass(frozen=True)
class _Suite:
    programs: tuple[str, ...]  # our programs the runner calls, each from <name>.c
    # a guest shell snippet printing "<metric>: <value>" lines from $SB_OUT after the run,
    # or "" when the host reads the metric off the console (vm-scalability's usemem lines)
    summary: str


# mean latency (us) and huge share of each thread count's faults: thpscale's headlines
# (results-db verdict.HEADLINES), the mean of the samples stackbench stores
_THP_SUMMARY = r"""for f in "$SB_OUT"/threads-*.log; do
  n=${f##*/threads-}; n=${n%.log}
  awk -v s="$SUITE" -v n="$n" '$1 == "fault" { t += $4; c++; if ($3 == "huge") h++ }
    END { if (!c) exit 1; printf "%s.fault-both-%d: %.2f\n", s, n, t / c
          printf "%s.Percentage huge-%d: %.2f\n", s, n, h * 100 / c }' "$f"
done"""
# each pass's "% Success: N" closing line: stress-highalloc.passK as stackbench stores it
_HIGHALLOC_SUMMARY = r"""for f in "$SB_OUT"/pass*.log; do
  k=${f##*/pass}; k=${k%.log}
  awk -v k="$k" '/^ *% Success:/ { printf "stress-highalloc.pass%d: %d\n", k, $3 }' "$f"
done"""
SUITES: dict[str, _Suite] = {
    "vm-scalability": _Suite(("usemem", "readfile"), ""),
    "thpscale": _Suite(("thpfaults",), _THP_SUMMARY),
    "thpchallenge": _Suite(("thpfaults",), _THP_SUMMARY),
    "thpcompact": _Suite(("thpfaults",), _THP_SUMMARY),
    "stress-highalloc": _Suite(("usemem",), _HIGHALLOC_SUMMARY),
}


def _heredoc(path: str, text: str, tag: str) -> str:
    if f"\n{tag}\n" in f"\n{text}\n":
        raise StackbenchError(f"{path}: holds the here-document tag {tag}")
    return f"cat > {path} <<'{tag}'\n{text.rstrip(chr(10))}\n{tag}\n"


def _fragments(config_name: str) -> str:
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


def _module_part() -> list[str]:
    mod = WORKLOADS / "highalloc"
    return [
        "# stress-highalloc allocates from stackbench's kernel module, which must be built",
        "# against this very kernel: MODULE=<its .ko> takes one built already, else",
        "# KBUILD=<the kernel's object dir (make O=...), CONFIG_MODULES=y> builds it here as",
        "# stackbench builds its guest's: make -C $KBUILD M=<module sources> modules.",
        'mkdir -p "$work/highalloc"',
        *(_heredoc(f'"$work/highalloc/{n}"', (mod / n).read_text(), "EOF_MODULE")
          for n in MODULE_SOURCES),
        'if [ -n "${MODULE:-}" ]; then cp "$MODULE" "$work/root/stackbench_highalloc.ko"; else',
        '  [ -n "${KBUILD:-}" ] || { echo "reproduce.sh: set KBUILD=<kernel object dir> or'
        ' MODULE=<stackbench_highalloc.ko>" >&2; exit 2; }',
        '  make -C "$KBUILD" M="$work/highalloc" modules >"$work/module.log" 2>&1 ||'
        ' { tail -n 20 "$work/module.log"; exit 1; }',
        '  cp "$work/highalloc/stackbench_highalloc.ko" "$work/root/"',
        "fi",
    ]  # fmt: skip


def script(
    *,
    commit: str,
    config_name: str,
    params: dict[str, Any],
    cpus: int,
    mem_mb: int,
    origin: str = "",
    suite: str = "vm-scalability",
) -> str:
    """The reproducer of one ``suite`` job on the kernel of ``commit``."""
    if suite not in SUITES:
        raise StackbenchError(f"no reproducer for suite {suite!r}")
    spec = SUITES[suite]
    p = {**definitions.DEFAULTS[suite], **params}
    where = SimpleNamespace(path=None, name=f"{suite} job")  # what a resolver names in errors
    try:
        env = definitions.RESOLVERS[suite](where, p, mem_mb, cpus)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise StackbenchError(f"{suite} params {p}: {exc!r}") from None
    setup = knobs.split(p)
    env = {**env, **setup.env(), "SUITE": suite}
    files: list[tuple[str, str]] = []  # (path under the root, text)
    what = suite
    if suite == "vm-scalability":
        test = str(env["TEST"])
        case = WORKLOADS / "cases" / f"case-{test}.sh"
        if not case.is_file():
            raise StackbenchError(f"no vm-scalability case named {test!r}")
        files.append((f"cases/case-{test}", case.read_text()))
        what = f"vm-scalability {test}"
    programs = spec.programs + (("fragment",) if setup.stage else ())
    files.append((f"run-{suite}.sh", (GUEST / f"run-{suite}.sh").read_text()))
    if setup.stage:
        files.append(("scenario.sh", (GUEST / "scenario.sh").read_text()))
    knob_lines = "".join(
        f"echo {shlex.quote(v)} > {knobs.knob_path(k)}\n" for k, v in sorted(setup.knobs.items())
    )
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in sorted(env.items()))
    stage_start = (
        "sh /scenario.sh start || { echo REPRO-END rc=4 scenario; reboot -f; }\n"
        if setup.stage
        else ""
    )
    stage_stop = "sh /scenario.sh stop\n" if setup.stage else ""
    init = (
        "#!/bin/busybox sh\n"
        "/bin/busybox --install -s /bin\nexport PATH=/bin\n"
        "mount -t proc proc /proc\nmount -t sysfs sysfs /sys\n"
        "mount -t devtmpfs devtmpfs /dev 2>/dev/null\nmount -t tmpfs tmpfs /tmp\n"
        "mkdir -p /tmp/work /tmp/out\n"
        "# the run's system knobs\n" + knob_lines + exports
        + "export SB_BIN=/bin SB_CASES=/cases SB_WORK=/tmp/work SB_OUT=/tmp/out"
        " SB_MODULE=/stackbench_highalloc.ko\n"
        "echo REPRO-BEGIN\n" + stage_start
        + f"sh /run-{suite}.sh\nrc=$?\n" + stage_stop
        + (spec.summary + "\n" if spec.summary else "")
        + "echo REPRO-END rc=$rc\n"
        "reboot -f  # QEMU runs with -no-reboot: this ends it\n"
    )  # fmt: skip
    if spec.summary:
        metric = (f'grep -E "^{suite}\\.[^:]+: [0-9.]+" "$work/output" ||'
                  ' { tail -n 40 "$work/console.log"; exit 1; }')  # fmt: skip
    else:
        metric = f'awk \'{_AWK}\' "$work/output" || {{ tail -n 40 "$work/console.log"; exit 1; }}'
    cmdline = " ".join(x for x in ("console=ttyS0", setup.cmdline, "panic=-1") if x)
    usage = "sh reproduce.sh BZIMAGE"
    parts = [
        "#!/bin/sh",
        f"# stackbench reproducer{': ' + origin if origin else ''}",
        f"# {what} on the kernel of commit {commit}, built with the",
        f"# config {config_name or 'of your choice'} (its fragments: $work/config-fragments).",
        f"# Guest: {cpus} CPUs, {mem_mb} MB. Params: {p}",
        f"# Usage: {usage}   (ACCEL=kvm to use KVM; KEEP=1 keeps the work dir)",
        "# Needs gcc, busybox (static), cpio, gzip and qemu-system-x86_64; not stackbench.",
        "set -eu",
        f"KERNEL=${{1:?usage: {usage}}}",
        "ACCEL=${ACCEL:-tcg}",
        f"CPUS={cpus}",
        f"MEM_MB={mem_mb}",
        f"CMDLINE={shlex.quote(cmdline)}",
        "work=$(mktemp -d)",
        '[ -n "${KEEP:-}" ] || trap \'rm -rf "$work"\' EXIT',
        'mkdir -p "$work/root/bin" "$work/root/cases" "$work/root/proc" "$work/root/sys" '
        '"$work/root/dev" "$work/root/tmp"',
        _heredoc('"$work/config-fragments"', _fragments(config_name), "EOF_CONFIG"),
    ]
    for prog in programs:
        parts += [
            _heredoc(f'"$work/{prog}.c"', (WORKLOADS / f"{prog}.c").read_text(), "EOF_SOURCE"),
            f'gcc -O2 -static -pthread -o "$work/root/bin/{prog}" "$work/{prog}.c"',
        ]
    if suite == "stress-highalloc":
        parts += _module_part()
    parts += [_heredoc(f'"$work/root/{path}"', text, "EOF_FILE") for path, text in files]
    parts += [
        _heredoc('"$work/root/init"', init, "EOF_INIT"),
        'chmod +x "$work/root/init"',
        'cp "$(command -v busybox || echo /bin/busybox)" "$work/root/bin/busybox"',
        '(cd "$work/root" && find . | cpio -o -H newc --quiet | gzip) > "$work/initrd.gz"',
        'if [ "$ACCEL" = kvm ]; then cpu="-accel kvm -cpu host"; else cpu="-accel tcg -cpu max"; '
        f'CMDLINE="$CMDLINE {qemu.TCG_CLOCK_CMDLINE}"; fi',
        "# shellcheck disable=SC2086",
        'qemu-system-x86_64 $cpu -smp "$CPUS" -m "$MEM_MB" -nodefaults -no-reboot '
        '-display none -monitor none -serial "file:$work/console.log" '
        '-kernel "$KERNEL" -initrd "$work/initrd.gz" -append "$CMDLINE"',
        "sed -n '/^REPRO-BEGIN/,/^REPRO-END/p' \"$work/console.log\" | tr -d '\\r' > \"$work/output\"",
        metric,
    ]
    return "\n".join(parts) + "\n"


def for_series(eng: Engine, series_id: int, commit: str | None = None) -> Attachment | None:
    """The reproducer of the series' first job on ``commit`` (else its top commit) of a
    suite in ``SUITES`` order, or None when that kernel ran none."""
    with db.session(eng) as s:
        commits = series_q.kernel_commits(s, series_id)
        target = commit or (commits[-1] if commits else None)
        found, suite = None, ""
        for suite in SUITES if target else ():
            found = runs_q.first_of_suite(s, target, suite)
            if found is not None:
                break
        if found is None or target is None:
            return None
        job, build, machine = found
        cpus = (machine.cpus if machine is not None else None) or 2
        mem_mb = (machine.memory_mb if machine is not None else None) or 1024
        params, config_name = {"test": job.test, **(job.params or {})}, build.config_name
    origin = f"series {series_id}"
    text = script(commit=target, config_name=config_name, params=params, cpus=cpus,
                  mem_mb=mem_mb, origin=origin, suite=suite)  # fmt: skip
    return Attachment(f"reproduce-{target[:12]}.sh", text)
