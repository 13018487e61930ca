"""stackbench compare beside the tools it replaces, on the same generated data, in one run.

Data sets (``--scale 1`` as issue 16 names them, ``--scale 10`` ten times the data):
- LKP: 10 commits x 5 runs x 2,000 stats (scale 10: 20,000 stats), one vm-scalability job;
  ``lkp ncompare`` (default rows and ``-a``) against ``stackbench compare --style lkp``.
- mmtests thpscale: two runs (base, new) of 5 iterations x 9 thread counts with fault
  latencies (about 900,000 samples; scale 10: ten times the faults per log);
  ``compare-mmtests.pl`` (latency table and ``--print-monitor mmtests-vmstat``) against
  ``stackbench compare --style mmtests``.

Both sides run as a user runs them: one process per comparison, start-up included;
``stackbench import`` is done once beforehand and not timed. stackbench is timed twice:
``cold`` computes the table (its stored copy is deleted before each run) and ``cached`` is
the same command again on unchanged runs, which prints the text stored by content. The
upstream tools come from the bundles in ../shared/upstream (run as its README says); a tool
that cannot run here is skipped with the reason. Outputs are compared byte for byte (LKP:
the table rows). The floors of issue 28 (COLD_FLOORS at scale 10, CACHED_MAX_S, HELP_MAX_S)
are printed beside the figures as met or MISSED; the exit status is 1 when one is missed or
an output differs.

    .venv/bin/python bench/compare_bench.py [--scale 1,10] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a git worktree elsewhere names the shared folder with STACKBENCH_SHARED
UPSTREAM = Path(os.environ.get("STACKBENCH_SHARED") or ROOT.parent / "shared") / "upstream"
STACKBENCH = [str(ROOT / ".venv" / "bin" / "stackbench")]
# issue 28's floors: at scale 10, cold, how many times faster than the tool (the -a table
# and the vmstat block: tools whose time barely grows with the data); any kept table and
# the help text, at most this many seconds end to end
COLD_FLOORS = {
    "lkp ncompare": 10.0,
    "lkp ncompare -a": 5.0,
    "compare-mmtests.pl latency": 20.0,
    "compare-mmtests.pl mmtests-vmstat": 5.0,
}
FLOOR_SCALE = 10
CACHED_MAX_S = 0.5
HELP_MAX_S = 0.3

LKP_AXES = ("vm-scalability", "300s-anon-w-seq-mt", "bench-vm", "debian-12", "x86_64-defconfig")
LKP_COMPILER = "gcc-12"
THREADS = (1, 2, 4, 6, 8, 10, 12, 14, 16)
MMTESTS_NAMES = ("base", "new")


# -- data sets ------------------------------------------------------------------------------


def lkp_commits(n: int) -> list[str]:
    return [f"{0xC0FFEE + k:040x}" for k in range(n)]


# what LKP's merge-remote-result needs to file a run under the result root it sits in
_LKP_JOB = """\
suite: vm-scalability
testcase: vm-scalability
category: benchmark
runtime: 300s
vm-scalability:
  test: anon-w-seq-mt
tbox_group: bench-vm
testbox: bench-vm
rootfs: debian-12
kconfig: x86_64-defconfig
compiler: gcc-12
commit: {commit}
"""


def gen_lkp(root: Path, commits: int, runs: int, stats: int, seed: int = 16) -> list[str]:
    """LKP result trees, one stats.json per run; returns the commits (base first)."""
    rnd = random.Random(seed)
    names = ["vm-scalability.throughput", "vm-scalability.free_time", "vm-scalability.stddev%"]
    monitors = ("proc-vmstat", "meminfo", "vmstat.system", "perf-stat", "time")
    names += [f"{monitors[i % len(monitors)]}.stat_{i}" for i in range(stats - len(names))]
    level = {n: rnd.uniform(1, 1e7) for n in names}
    shas = lkp_commits(commits)
    for sha in shas:
        shift = {n: rnd.choice((1.0, 1.0, 1.0, 0.8, 1.3)) for n in names}
        for r in range(runs):
            d = root.joinpath(*LKP_AXES, LKP_COMPILER, sha, str(r))
            d.mkdir(parents=True)
            data = {n: round(level[n] * shift[n] * rnd.gauss(1, 0.02), 2) for n in names}
            (d / "stats.json").write_text(json.dumps(data, indent=2))
            (d / "job.yaml").write_text(_LKP_JOB.format(commit=sha))
    return shas


def gen_mmtests(log: Path, iterations: int, faults: int, seed: int = 16) -> None:
    """mmtests work/log/{base,new}: thpscale logs, tests-timestamp and tests-sysstate per
    iteration (the layout of ../shared/fixtures/mmtests/golden-thpscale-b0b1d143)."""
    rnd = random.Random(seed)
    for k, name in enumerate(MMTESTS_NAMES):
        for it in range(iterations):
            d = log / name / f"iter-{it}"
            logs = d / "thpscale" / "logs"
            logs.mkdir(parents=True)
            for t in THREADS:
                lines = [f"Running with {t} thread ", "Using default advice", ""]
                lines += ["anoninit 0       183810", "fileinit 0        57296"]
                stamp = 1_700_000_000.0
                for i in range(faults):
                    huge = rnd.random() < 0.8
                    lat = int(rnd.lognormvariate(7.5 if huge else 5.0, 0.5) * (1 + 0.1 * k))
                    stamp += rnd.random()
                    kind = "huge" if huge else "base"
                    lines.append(f"fault {i % t} {kind} {lat:12d} {stamp:.6f} 1")
                (logs / f"threads-{t}.log.gz").write_bytes(
                    gzip.compress(("\n".join(lines) + "\n").encode(), 1)
                )
            begin = 1_700_000_001 + it * 400
            # mmtests reads the elapsed time (for velocities) from tests-sysstate's line
            timing = f"time :: thpscale {12.5 + it:.2f} user {240 + k:.2f} system 300.00 elapsed"
            (d / "tests-timestamp").write_text(
                f"start :: {begin - 1}\ntest begin :: thpscale {begin}\n"
                f"test end :: thpscale {begin + 300} 0\n{timing}\nfinish :: {begin + 301}\n"
            )
            (d / "tests-sysstate").write_text(_sysstate(rnd, begin, timing))


_VMSTAT = [
    "nr_free_pages",
    "pgfault",
    "pgmajfault",
    "pgpgin",
    "pgpgout",
    "pswpin",
    "pswpout",
    "allocstall_normal",
    "pgscan_kswapd",
    "pgscan_direct",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "compact_stall",
    "compact_success",
    "compact_fail",
    "compact_migrate_scanned",
    "compact_free_scanned",
    "compact_isolated",
    "pgmigrate_success",
    "pgmigrate_fail",
    "thp_fault_alloc",
    "thp_fault_fallback",
    "compact_daemon_wake",
    "compact_daemon_migrate_scanned",
    "compact_daemon_free_scanned",
]


def _sysstate(rnd: random.Random, begin: int, timing: str) -> str:
    before = {k: rnd.randrange(0, 10_000_000) for k in _VMSTAT}
    after = {k: v + rnd.randrange(0, 5_000_000) for k, v in before.items()}
    out = ["start :: " + str(begin - 1), "version :: synthetic", f"test begin :: thpscale {begin}"]
    out += ["file start :: /proc/vmstat", *(f"{k} {v}" for k, v in before.items())]
    out += ["file start :: /proc/zoneinfo", "Node 0, zone   Normal"]
    out += ["file end :: /proc/vmstat", *(f"{k} {v}" for k, v in after.items())]
    out += ["file end :: /proc/zoneinfo", "Node 0, zone   Normal"]
    out += [f"test end :: thpscale {begin + 300} 0", timing, f"finish :: {begin + 301}"]
    return "\n".join(out) + "\n"


# -- running and timing ---------------------------------------------------------------------


@dataclass
class Timed:
    seconds: list[float]
    out: str

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def timed(cmd: list[str], repeat: int, cwd: Path | None = None, env=None) -> Timed:
    times, out = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
        out = res.stdout
    return Timed(times, out)


def missing_lkp() -> str | None:
    if not (UPSTREAM / "lkp-tests.bundle").is_file():
        return f"{UPSTREAM}/lkp-tests.bundle is absent"
    if not shutil.which("ruby"):
        return "ruby is not installed (apt-get install ruby ruby-activesupport ...)"
    probe = subprocess.run(
        ["ruby", "-e", "require 'active_support'; require 'git'; require 'tty-command'"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return "ruby gems missing: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "needs root and unshare for a private /lkp mount"
    return None


def missing_mmtests() -> str | None:
    if not (UPSTREAM / "mmtests.bundle").is_file():
        return f"{UPSTREAM}/mmtests.bundle is absent"
    if not shutil.which("perl"):
        return "perl is not installed"
    if not shutil.which("Rscript"):
        return "R is not installed (apt-get install r-base-core)"
    return None


def clone(bundle: str, ref: str, dest: Path) -> Path:
    subprocess.run(
        ["git", "clone", "-q", "--branch", ref, str(UPSTREAM / bundle), str(dest)], check=True
    )
    return dest


# LKP hard-codes /lkp: give it one in a private mount namespace, under a private root made
# of bind mounts of the host's top-level folders, so the host's / is left untouched
_LKP_SHELL = r"""
set -e
new=$1; shift; scratch=$1; shift
mount --make-rprivate /
for d in /*; do
  name=${d#/}
  if [ -L "$d" ]; then cp -P "$d" "$new/$name"
  elif [ -d "$d" ]; then mkdir -p "$new/$name"; mount --rbind "$d" "$new/$name"
  fi
done
mkdir -p "$new/lkp"; mount --bind "$scratch" "$new/lkp"
exec chroot "$new" /bin/sh -c "$*"
"""


def lkp_shell(work: Path, script: str) -> list[str]:
    newroot = work / "newroot"
    newroot.mkdir(exist_ok=True)
    return ["unshare", "-m", "sh", "-c", _LKP_SHELL, "sh", str(newroot), str(work / "lkp"), script]


def prepare_lkp(work: Path, commits: list[str]) -> Path:
    """unite-stats per run and merge-remote-result, once, as LKP's own pipeline does."""
    lkp_src = clone("lkp-tests.bundle", "pinned", work / "lkp-tests")
    roots = sorted((work / "lkp" / "result").glob("*/*/*/*/*/*/*/*"))
    script = "; ".join(
        [f"export LKP_SRC={lkp_src}", "cd /"]
        + [f"ruby {lkp_src}/sbin/unite-stats /lkp/{r.relative_to(work / 'lkp')}" for r in roots]
        + [f"ruby {lkp_src}/bin/merge-remote-result /lkp/result >/dev/null"]
    )
    res = subprocess.run(lkp_shell(work, script), capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"LKP unite-stats failed: {res.stderr[-2000:]}")
    return lkp_src


def table_rows(text: str) -> list[str]:
    """The stat rows of an ncompare table (headers differ in how axes are named)."""
    return [line for line in text.splitlines() if line.startswith(" ") and "  " in line.strip()]


# -- the benchmark --------------------------------------------------------------------------


@dataclass
class Pair:
    name: str
    kind: str
    tool: Timed | None
    ours: Timed  # computed
    cached: Timed  # the same command again: the stored text
    same: bool | None
    note: str = ""


def forget_cached(home: Path) -> None:
    """Delete the comparisons' stored texts, so the next command computes its table."""
    import psycopg

    from stackbench.resultsdb.embedded import Cluster

    url = Cluster(home).url().replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM kept_table")


def settle(home: Path) -> None:
    """Vacuum and analyze what the imports wrote, untimed: otherwise autovacuum works
    through the fresh tables during the first timings, and they measure it."""
    import psycopg

    from stackbench.resultsdb.embedded import Cluster

    url = Cluster(home).url().replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def ours(cmd: list[str], repeat: int, env: dict[str, str]) -> tuple[Timed, Timed]:
    home = Path(env["STACKBENCH_HOME"])
    cold = []
    out = ""
    for _ in range(repeat):
        forget_cached(home)
        t = timed(cmd, 1, env=env)
        cold.append(t.seconds[0])
        out = t.out
    cached = timed(cmd, repeat, env=env)
    if cached.out != out:
        raise RuntimeError(f"{' '.join(cmd)}: the stored text differs from the computed one")
    return Timed(cold, out), cached


def bench_scale(scale: int, repeat: int, work: Path, env: dict[str, str]) -> list[Pair]:
    pairs: list[Pair] = []
    lkp_root = work / "lkp" / "result"
    commits = gen_lkp(lkp_root, 10, 5, 2000 * scale)
    mm_log = work / "mmtests" / "work" / "log"
    gen_mmtests(mm_log, 5, 5_000 * scale)
    sb = dict(env)
    t0 = time.perf_counter()
    subprocess.run([*STACKBENCH, "import", "lkp", str(lkp_root)], env=sb, check=True)
    for name in MMTESTS_NAMES:
        subprocess.run(
            [*STACKBENCH, "import", "mmtests", str(mm_log / name), "--name", name],
            env=sb,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    print(f"  (stackbench import of both data sets: {time.perf_counter() - t0:.1f} s, untimed)")
    settle(Path(sb["STACKBENCH_HOME"]))

    why = missing_lkp()
    lkp_src = None
    if why is None:
        try:
            lkp_src = prepare_lkp(work, commits)
        except RuntimeError as exc:
            why = str(exc).splitlines()[0]
    for flag, label in (([], "lkp ncompare"), (["-a"], "lkp ncompare -a")):
        mine, cached = ours(
            [*STACKBENCH, "compare", "--style", "lkp", *(["--all"] if flag else [])] + commits,
            repeat,
            sb,
        )
        tool = None
        same = None
        if lkp_src is not None:
            script = (
                f"export LKP_SRC={lkp_src}; cd /; ruby {lkp_src}/sbin/ncompare {' '.join(flag)} "
                + " ".join(commits)
            )
            tool = timed(lkp_shell(work, script), repeat)
            same = table_rows(tool.out) == table_rows(mine.out)
            (work / f"lkp{'-a' if flag else ''}.tool.txt").write_text(tool.out)
        (work / f"lkp{'-a' if flag else ''}.stackbench.txt").write_text(mine.out)
        pairs.append(Pair(label, "lkp", tool, mine, cached, same, why or ""))

    why = missing_mmtests()
    mmtests = None
    if why is None:
        mmtests = clone("mmtests.bundle", "thpscale-era", work / "mmtests-src")
        stub = work / "perl5" / "List"
        stub.mkdir(parents=True)
        (stub / "BinarySearch.pm").write_text("package List::BinarySearch;\n1;\n")
    for extra, ours_args, label in (
        ([], ["--table", "latency"], "compare-mmtests.pl latency"),
        (
            ["--print-monitor", "mmtests-vmstat"],
            ["--monitor", "vmstat"],
            "compare-mmtests.pl mmtests-vmstat",
        ),
    ):
        mine, cached = ours(
            [*STACKBENCH, "compare", "--style", "mmtests", *MMTESTS_NAMES, *ours_args], repeat, sb
        )
        tool = None
        same = None
        if mmtests is not None:
            penv = dict(os.environ, PERL5LIB=str(work / "perl5"))
            cmd = [
                "perl",
                str(mmtests / "bin" / "compare-mmtests.pl"),
                "-d",
                ".",
                "-b",
                "thpscale",
                "-n",
                ",".join(MMTESTS_NAMES),
                *extra,
            ]
            tool = timed(cmd, repeat, cwd=mm_log, env=penv)
            same = tool.out == mine.out
            (work / f"{ours_args[-1]}.tool.txt").write_text(tool.out)
        (work / f"{ours_args[-1]}.stackbench.txt").write_text(mine.out)
        pairs.append(Pair(label, "mmtests", tool, mine, cached, same, why or ""))
    return pairs


def report(scale: int, pairs: list[Pair]) -> list[str]:
    """Print the figures of one scale; returns the floors missed (and outputs that differ)."""
    missed = []
    print(f"\nscale {scale}x: medians in seconds, end to end (process start included)")
    print(
        f"  {'comparison':34} {'tool':>7} {'cold':>7} {'ratio':>7} {'floor':>6}"
        f" {'cached':>7} {'<=':>4}  same output"
    )
    for p in pairs:
        floor = COLD_FLOORS[p.name] if scale == FLOOR_SCALE else None
        kept = "met" if p.cached.median <= CACHED_MAX_S else "MISSED"
        if kept != "met":
            missed.append(f"scale {scale} {p.name}: kept table {p.cached.median:.3f} s")
        if p.tool is None:
            print(
                f"  {p.name:34} {'-':>7} {p.ours.median:7.3f} {'-':>7} {'-':>6}"
                f" {p.cached.median:7.3f} {CACHED_MAX_S:4.1f} {kept}  skipped: {p.note}"
            )
            if floor is not None:
                missed.append(f"scale {scale} {p.name}: tool skipped ({p.note})")
            continue
        ratio = p.tool.median / p.ours.median
        verdict = "-"
        if floor is not None:
            verdict = f"{floor:4.0f}x {'met' if ratio >= floor else 'MISSED'}"
            if ratio < floor:
                missed.append(f"scale {scale} {p.name}: cold {ratio:.1f}x < {floor:.0f}x")
        if not p.same:
            missed.append(f"scale {scale} {p.name}: output differs from the tool's")
        print(
            f"  {p.name:34} {p.tool.median:7.3f} {p.ours.median:7.3f} {ratio:6.1f}x"
            f" {verdict:>10} {p.cached.median:7.3f} {CACHED_MAX_S:4.1f} {kept}"
            f"  {'yes' if p.same else 'NO'}"
        )
    return missed


def help_floor(repeat: int, env: dict[str, str]) -> list[str]:
    t = timed([*STACKBENCH, "--help"], max(repeat, 5), env=env)
    ok = t.median <= HELP_MAX_S
    print(
        f"\nstackbench --help: {t.median:.3f} s (floor {HELP_MAX_S} s: {'met' if ok else 'MISSED'})"
    )
    return [] if ok else [f"stackbench --help: {t.median:.3f} s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="1,10", help="data set sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the data and outputs in this folder")
    args = ap.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    missed = help_floor(args.repeat, dict(os.environ))
    for scale in (int(s) for s in args.scale.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"stackbench-cmp{scale}-", dir=args.keep))
        home = work / "home"
        env = dict(os.environ, STACKBENCH_HOME=str(home))
        env.pop("STACKBENCH_DATABASE_URL", None)
        env.pop("STACKBENCH_URL", None)
        # an installed stackbench runs from its bytecode (pip compiles it; an editable
        # install writes it on first use): a shell that forbids writing it (as some CI and
        # sandboxes do) would time compiling every module in every command instead
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        try:
            missed += report(scale, bench_scale(scale, args.repeat, work, env))
        finally:
            subprocess.run([*STACKBENCH, "down"], env=env, capture_output=True)
            if args.keep is None:
                from stackbench.resultsdb.embedded import Cluster, destroy

                # the cluster's files may live outside the home (/var/lib as root)
                destroy(Cluster(home))
                shutil.rmtree(work, ignore_errors=True)
    if missed:
        print("\nfloors missed:\n  " + "\n  ".join(missed))
        return 1
    print("\nevery floor met, every output byte-identical to the tool's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
