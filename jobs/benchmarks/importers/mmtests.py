"""Import an mmtests ``work/log/<RUNNAME>`` directory: every ``iter-N`` becomes one run per
benchmark, stored under the kernel named RUNNAME (or ``--name``).

Per iteration the importer reads ``tests-timestamp`` (durations), ``tests-sysstate`` (the
/proc/vmstat snapshots before and after each benchmark) and the benchmark's ``logs/``:
thpscale (and its successors thpcompact and thpchallenge, same log format) and
stress-highalloc. Everything
is parsed and checked before the first row is written, so a bad file stops the import with
its path and what is wrong, and the database is left as it was.

Real runs hold more than this: monitor logs (``vmstat-thpscale.gz``...), ``dmesg.gz``,
benchmarks stackbench does not read, bookkeeping lines it does not know (``arch :: x86_64``).
Those are skipped, with a note for ``--verbose``; unknown ``key :: value`` lines are kept in
the run's metadata (``mmtests_sysstate``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine

from stackbench.errors import InputError
from stackbench.jobs.benchmarks.parsers import highalloc, mmtests_logs, thpscale
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

# The extraction rules implemented here are those of mmtests b0b1d143 (thpscale era); the
# version line of tests-sysstate is kept in run.meta, not in the job identity, so runs made
# with different mmtests checkouts still compare.
SUITE_VERSIONS = {
    "thpscale": "mmtests-b0b1d143",
    "thpchallenge": "mmtests-638401e0",
    "thpcompact": "mmtests-526d3138",
    "stress-highalloc": "mmtests-highalloc",
}
RUNNER = "mmtests"
MACHINE = "mmtests-import"


_ITER = re.compile(r"^iter-(\d+)$")


def find_iterations(root: Path) -> list[tuple[int, Path]]:
    if not root.exists():
        raise InputError(root, "no such directory")
    if not root.is_dir():
        raise InputError(root, "not a directory (want an mmtests work/log/RUNNAME directory)")
    iters = []
    for p in root.iterdir():
        m = _ITER.match(p.name)
        if m and p.is_dir():
            iters.append((int(m.group(1)), p))
    if not iters:
        raise InputError(root, "no iter-N directories (not an mmtests work/log/RUNNAME directory)")
    iters.sort()
    expected = list(range(len(iters)))
    if [n for n, _ in iters] != expected:
        have = ", ".join(p.name for _, p in iters)
        raise InputError(root, f"iterations are not iter-0..iter-{len(iters) - 1} (found {have})")
    return iters


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise InputError(path, "missing file")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


# what parse_iteration reads in an iteration directory besides the benchmarks' own
_BOOKKEEPING = frozenset({"tests-timestamp", "tests-sysstate", "tests-sysstate.gz"})


def _benchmarks(iter_dir: Path, notes: list[str] | None = None) -> dict[str, Path]:
    found = {}
    skipped = []
    for p in sorted(iter_dir.iterdir()):
        if p.is_dir() and p.name in SUITE_VERSIONS:
            found[p.name] = p / "logs"
        elif p.name not in _BOOKKEEPING:
            skipped.append(p.name + ("/" if p.is_dir() else ""))
    if skipped and notes is not None:
        # monitors (vmstat-<test>.gz, proc-vmstat-..., their .start files), dmesg.gz,
        # other benchmarks: not read by stackbench
        notes.append(f"skipped in {iter_dir}: {', '.join(skipped)}")
    if not found:
        raise InputError(
            iter_dir,
            "no benchmark results (want thpscale/logs, thpchallenge/logs, thpcompact/logs "
            "or stress-highalloc/logs)",
        )
    return found


def _highalloc_samples(logs_dir: Path) -> tuple[dict[str, list[float]], dict[str, bytes]]:
    if not logs_dir.is_dir():
        raise InputError(logs_dir, "missing stress-highalloc logs directory")
    files = sorted(p for p in logs_dir.iterdir() if p.name.endswith((".log", ".log.gz")))
    if len(files) != 1:
        raise InputError(
            logs_dir, f"want exactly one stress-highalloc .log file, found {len(files)}"
        )
    text = thpscale.read_log(files[0], "stress-highalloc log")
    name = files[0].name.removesuffix(".gz")
    return highalloc.parse(text, str(files[0])), {f"stress-highalloc/logs/{name}": text.encode()}


def _thp_samples(bench: str, logs_dir: Path) -> tuple[dict[str, list[float]], dict[str, bytes]]:
    samples: dict[str, list[float]] = {}
    logs: dict[str, bytes] = {}
    for n, path in thpscale.find_logs(logs_dir).items():
        text = thpscale.read_log(path)
        samples.update(thpscale.parse_log(text, n, str(path)))
        logs[f"{bench}/logs/threads-{n}.log"] = text.encode()
    return samples, logs


def _epoch(value: int | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def parse_iteration(
    iteration: int,
    iter_dir: Path,
    kernel: KernelSpec,
    run_name: str,
    notes: list[str] | None = None,
) -> list[RunData]:
    """One RunData per benchmark of one iteration, fully validated."""
    ts_path = iter_dir / "tests-timestamp"
    ss_path = iter_dir / "tests-sysstate"
    ts_text = _read_text(ts_path)
    stub = None
    if (iter_dir / "tests-sysstate.gz").is_file():
        # run-mmtests.sh gzips tests-sysstate at the end of each iteration; lines logged
        # after that (``status :: RC``) start a new, small tests-sysstate beside it
        if ss_path.is_file():
            try:
                stub = mmtests_logs.parse_sysstate(_read_text(ss_path), str(ss_path))
            except InputError as exc:  # the data is in the .gz; the stub only adds lines
                if notes is not None:
                    notes.append(f"skipped {exc}")
        ss_path = iter_dir / "tests-sysstate.gz"
        ss_text = thpscale.read_log(ss_path, "tests-sysstate")
    else:
        ss_text = _read_text(ss_path)
    timestamp = mmtests_logs.parse_timestamp(ts_text, str(ts_path))
    sysstate = mmtests_logs.parse_sysstate(ss_text, str(ss_path))
    extra = {**timestamp.extra, **sysstate.extra, **(stub.extra if stub else {})}
    if extra and notes is not None:
        keys = ", ".join(sorted(extra))
        notes.append(f"{iter_dir}: kept as run metadata (mmtests_sysstate): {keys}")
    runs = []
    for bench, logs_dir in _benchmarks(iter_dir, notes).items():
        if bench == "stress-highalloc":
            raw, logs = _highalloc_samples(logs_dir)
        else:
            raw, logs = _thp_samples(bench, logs_dir)
        samples: dict[str, list[float]] = {f"{bench}.{k}": v for k, v in raw.items()}

        rec = timestamp.tests.get(bench) or sysstate.tests.get(bench)
        if rec is None or rec.elapsed is None:
            raise InputError(ts_path, f"no 'time :: {bench} ...' line for the {bench} benchmark")
        for key, value in rec.durations().items():
            samples[f"duration.{key}"] = [value]

        sys_rec = sysstate.tests.get(bench)
        if sys_rec is None:
            raise InputError(ss_path, f"no 'test begin :: {bench}' section")
        state: dict = {
            "test": bench,
            "start": dict(sys_rec.start_files),
            "end": dict(sys_rec.end_files),
        }
        vm = mmtests_logs.find_vmstat(sys_rec, str(ss_path))
        if vm is None:
            raise InputError(
                ss_path, f"test {bench!r} has no 'file start :: /proc/vmstat' snapshot"
            )
        start, end = vm
        state["vmstat_start"] = start
        state["vmstat_end"] = end
        for key, value in mmtests_logs.vmstat_delta(start, end).items():
            samples[f"mmtests-vmstat.{key}"] = [float(value)]

        logs = {"tests-timestamp": ts_text.encode(), "tests-sysstate": ss_text.encode(), **logs}
        runs.append(
            RunData(
                job=JobSpec(
                    suite=bench,
                    test=bench,
                    suite_version=SUITE_VERSIONS[bench],
                    runner=RUNNER,
                ),
                kernel=kernel,
                machine=MachineSpec(name=MACHINE),
                iteration=iteration,
                samples=samples,
                source="mmtests",
                status="done" if (rec.rc or 0) == 0 else "failed",
                error="" if (rec.rc or 0) == 0 else f"{bench} exited with {rec.rc}",
                logs=logs,
                sysstate=state,
                meta={
                    "mmtests_run": run_name,
                    "path": str(iter_dir.resolve()),
                    "mmtests_version": sysstate.version,
                    **({"mmtests_sysstate": extra} if extra else {}),
                },
                started_at=_epoch(rec.begin),
                finished_at=_epoch(rec.end),
                duration_s=rec.elapsed,
            )
        )
    return runs


def parse_run(
    path: str | Path, name: str | None = None, notes: list[str] | None = None
) -> list[RunData]:
    """Every run of an mmtests run directory, or an InputError before anything is stored;
    what is skipped goes to ``notes``."""
    root = Path(path)
    run_name = root.resolve().name
    iters = find_iterations(root)
    kname = name or run_name
    if not kname:
        raise InputError(root, "cannot tell the run name; pass --name")
    kernel = KernelSpec(commit=kname, name=kname, meta={"mmtests_run": run_name})
    runs: list[RunData] = []
    for n, iter_dir in iters:
        runs.extend(parse_iteration(n, iter_dir, kernel, run_name, notes))
    return runs


def import_run(
    eng: Engine, path: str, name: str | None = None, notes: list[str] | None = None
) -> str:
    runs = parse_run(path, name, notes)
    res = ingest(eng, runs)
    kname = runs[0].kernel.name
    suites = sorted({r.job.suite for r in runs})
    iterations = len({r.iteration for r in runs})
    line = (
        f"mmtests run {kname}: {iterations} iteration(s) of {', '.join(suites)}, "
        f"{len(res.inserted)} run(s) and {res.samples} samples stored"
    )
    if res.skipped:
        line += f", {res.skipped} already stored"
    return line
