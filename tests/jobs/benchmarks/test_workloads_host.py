"""Our benchmark programs and case scripts, compiled and run on the host with tiny sizes.

The outputs go through the same parsers the guest's results go through (LKP's rules for
usemem and dd lines, mmtests' for thpscale logs), so a format slip fails here.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from stackbench import proc
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks.guest import initramfs
from stackbench.jobs.benchmarks.parsers import thpscale, vm_scalability

BUSYBOX = shutil.which("busybox") or "/bin/busybox"
USEMEM_LINE = re.compile(r"^(\d+) bytes / (\d+) usecs = (\d+) KB/s$")
CASE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \./case-([a-z-]+)$")
CASES = [
    "anon-w-seq",
    "anon-w-seq-mt",
    "anon-wx-seq-mt",
    "anon-w-rand",
    "anon-w-rand-mt",
    "anon-cow-seq",
    "anon-cow-rand",
    "lru-file-readtwice",
    "lru-file-mmap-read",
    "mmap-pread-seq",
    "mmap-pread-seq-mt",
    "mmap-xread-seq-mt",
]
MB = 1 << 20


@pytest.fixture(scope="module")
def bins(tmp_path_factory) -> dict[str, Path]:
    return initramfs.compile_programs(tmp_path_factory.mktemp("guest-bin"))


def run(argv, **kw):
    return proc.run([os.fspath(a) for a in argv], check=False, timeout=120, **kw)


def test_programs_are_static_and_cached(bins, tmp_path_factory):
    for path in bins.values():
        assert initramfs.is_static_elf(path)
    assert not initramfs.is_static_elf(Path(shutil.which("python3") or "/usr/bin/python3"))
    cache = bins["usemem"].parent.parent
    mtime = bins["usemem"].stat().st_mtime_ns
    again = initramfs.compile_programs(cache)
    assert again == bins
    assert bins["usemem"].stat().st_mtime_ns == mtime


def test_usemem_lines_follow_the_lkp_format(bins):
    res = run([bins["usemem"], "-n", "2", "4m"])
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    rates = []
    for m in filter(None, map(USEMEM_LINE.match, lines)):
        nbytes, usecs, kbps = map(int, m.groups())
        assert nbytes == 4 * MB
        assert kbps == ((nbytes * 1000000) >> 10) // usecs
        rates.append(kbps)
    assert len(rates) == 2
    assert sum(1 for line in lines if re.fullmatch(r"\d+ usecs to free memory", line)) == 2
    stats = dict(vm_scalability.parse(res.stdout))
    assert stats["throughput"] == sum(rates)
    assert stats["workload"] == 2 * 4 * MB / 1024
    assert "free_time" in stats


def test_usemem_threads_share_a_preallocated_mapping(bins):
    # --prealloc: one mapping shared by the threads, so there is nothing per task to free
    res = run([bins["usemem"], "-t", "3", "--prealloc", "2m"])
    assert res.returncode == 0, res.stdout
    assert sum(1 for ln in res.stdout.splitlines() if USEMEM_LINE.match(ln)) == 3
    assert "to free memory" not in res.stdout


def test_usemem_reads_files_and_counts_random_steps(bins, tmp_path):
    f = tmp_path / "sparse"
    f.write_bytes(b"")
    os.truncate(f, 8 * MB)
    res = run([bins["usemem"], "-t", "2", "-f", f, "--readonly", "1m"])
    assert res.returncode == 0, res.stdout
    assert [int(m.group(1)) for m in map(USEMEM_LINE.match, res.stdout.splitlines()) if m] == [
        MB,
        MB,
    ]
    res = run([bins["usemem"], "--random", "-s", "8192", "-r", "2", "1m"])
    assert res.returncode == 0, res.stdout
    assert USEMEM_LINE.match(res.stdout.splitlines()[0]).group(1) == str(2 * MB)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0", "1m"], "-n must be a positive integer"),
        (["1x"], "bad size '1x'"),
        (["--prefault", "1m"], "--prefault needs --prealloc"),
        (["-f", "/nonexistent/file", "1m"], "stat /nonexistent/file"),
        (["--bogus", "1m"], "usage: usemem"),
    ],
)
def test_usemem_rejects_bad_arguments(bins, args, message):
    res = run([bins["usemem"], *args])
    assert res.returncode != 0
    assert message in res.stdout


def test_readfile_prints_gnu_dd_lines_lkp_parses(bins, tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"x" * (3 * MB))
    res = run([bins["readfile"], "-b", "4096", f])
    assert res.returncode == 0, res.stdout
    m = re.fullmatch(
        r"(\d+) bytes \(3\.1 MB, 3\.0 MiB\) copied, ([0-9.]+) s, [0-9.]+ MB/s\n", res.stdout
    )
    assert m and int(m.group(1)) == 3 * MB
    stats = dict(vm_scalability.parse(res.stdout))
    assert stats["throughput"] == int((3 * MB >> 10) / float(m.group(2)))


def test_thpscale_log_shape(bins, tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"")
    os.truncate(f, 16 * MB)
    res = run([bins["thpfaults"], "scale", "2", str(16 * MB), f, "1"])
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert sorted(ln.split()[1] for ln in lines if ln.startswith("anoninit")) == ["0", "1"]
    assert sorted(ln.split()[1] for ln in lines if ln.startswith("fileinit")) == ["0", "1"]
    faults = [ln.split() for ln in lines if ln.startswith("fault ")]
    # 16 MB over 2 threads: 8 MB each, half of it faulted in 2 MB steps -> 2 faults per thread
    assert len(faults) == 4
    for w in faults:
        assert w[1] in ("0", "1") and w[2] in ("huge", "base")
        assert w[3].isdigit() and re.fullmatch(r"\d+\.\d{6}", w[4]) and w[5] in ("1", "0", "-1")
    samples = thpscale.parse_log(res.stdout, 2)
    assert len(samples["fault-both-2"]) == 4
    assert 0 <= samples["Percentage huge-2"][0] <= 100


def test_thpscale_rejects_a_too_small_map(bins, tmp_path):
    res = run([bins["thpfaults"], "scale", "4", str(8 * MB), tmp_path / "nofile", "1"])
    assert res.returncode == 2
    assert "too small for 4 threads" in res.stdout


def stage_cases(dest: Path) -> Path:
    """The case scripts as the initramfs installs them: case-<name>, no suffix."""
    dest.mkdir()
    for case in (d.WORKLOADS_DIR / "cases").glob("case-*.sh"):
        shutil.copy(case, dest / case.stem)
    return dest


def run_case(bins, tmp_path, test, *, size=0, nr_task=2, mem=8 * MB):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cases = tmp_path / "cases"
    if not cases.exists():
        stage_cases(cases)
    env = {
        "TEST": test,
        "NR_TASK": str(nr_task),
        "RUNTIME_S": "60",
        "SIZE_BYTES": str(size),
        "MEM_PERMILLE": "1",
        "MEM_BYTES": str(mem),
        "SB_BIN": str(bins["usemem"].parent),
        "SB_CASES": str(cases),
        "SB_WORK": str(work),
    }
    # every program lives in its own cache dir; gather them like the guest's /stackbench/bin
    sbin = tmp_path / "bin"
    if not sbin.exists():
        sbin.mkdir()
        for name, path in bins.items():
            shutil.copy(path, sbin / name)
    env["SB_BIN"] = str(sbin)
    res = run([BUSYBOX, "sh", d.GUEST_DIR / "run-vm-scalability.sh"], env=env)
    return res, work


@pytest.mark.parametrize("test", CASES)
def test_cases_run_under_busybox_and_parse(bins, tmp_path, test):
    res, work = run_case(bins, tmp_path, test)
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    m = CASE_LINE.match(lines[0])
    assert m and m.group(1) == test, lines[0]
    stats = dict(vm_scalability.parse(res.stdout))
    assert stats["throughput"] > 0
    if test.startswith("anon-"):
        # each of the 2 tasks works on mem / nr_task / 2 = 2 MB (shared or its own)
        assert stats["workload"] == 2 * 2 * MB / 1024
    assert list(work.iterdir()) == []  # the cases clean up their files


def test_driver_repeats_a_case_per_unit_of_size(bins, tmp_path):
    res, _ = run_case(bins, tmp_path, "anon-w-seq", size=3 * 4 * MB)  # unit = mem/2 = 4 MB
    assert res.returncode == 0, res.stdout
    assert sum(1 for ln in res.stdout.splitlines() if CASE_LINE.match(ln)) == 3
    stats = dict(vm_scalability.parse(res.stdout))
    assert stats["workload"] == 3 * 2 * 2 * MB / 1024


def test_driver_reports_a_failing_case(bins, tmp_path):
    # 1 task over a 4 KB "mem" leaves usemem less than a page: it must fail, not print a rate
    res, _ = run_case(bins, tmp_path, "anon-w-seq", nr_task=1, mem=4096)
    assert res.returncode != 0
    assert "smaller than the step" in res.stdout


def test_thpscale_runner_writes_one_log_per_thread_count(bins, tmp_path):
    sbin = tmp_path / "bin"
    sbin.mkdir()
    shutil.copy(bins["thpfaults"], sbin / "thpfaults")
    out = tmp_path / "out"
    out.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "THREADS": "1 2",
        "MAP_PERMILLE": "1",
        "MAP_BYTES": str(16 * MB),
        "MADVISE": "1",
        "SB_BIN": str(sbin),
        "SB_WORK": str(work),
        "SB_OUT": str(out),
    }
    res = run([BUSYBOX, "sh", d.GUEST_DIR / "run-thpscale.sh"], env=env)
    assert res.returncode == 0, res.stdout
    assert sorted(p.name for p in out.iterdir()) == ["threads-1.log", "threads-2.log"]
    samples = thpscale.parse_dir(out)
    assert len(samples["fault-both-1"]) == 4 and len(samples["fault-both-2"]) == 4
    assert list(work.iterdir()) == []
