"""Import LKP result trees: ``<testcase>/<path_params>/<tbox_group>/<rootfs>/<kconfig>/
<compiler>/<commit>/<run>/stats.json`` and ``<commit>/matrix.json`` (FORMATS.md section 2).

Each LKP run becomes one stackbench run (iteration = run number) of the job
(suite = testcase, runner ``lkp``, params = the job's parameters), on the kernel
(commit, kconfig, compiler) and machine (tbox_group) its path names. Every stat is one sample
of the metric of the same name (``vm-scalability.throughput``, ``proc-vmstat.pgfault``...).
A commit with run directories is read from their stats.json; its matrix.json (one list
element per run) is used only when no run has a stats.json.

Trees are read the way LKP's ``unite-stats`` leaves them (lib/matrix.rb): stats that are the
integer 0 in every run of a commit and per-CPU ``sched_debug`` stats are dropped, as LKP drops
them from the commit's matrix.json; a stat a run lacks is no sample of that run (a sparse stat:
in matrix.json its list stops at the last run that has it). What unite-stats writes beside the
results (``avg.json``, ``stddev.json``, the cross-commit matrix.json at the ``<compiler>`` level,
per-run monitor matrices) and any other file is skipped, with a note for ``--verbose``.

Everything is read and checked before anything is written: a bad file stops the import with
its path and what is wrong, and the database is left as it was.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine

from stackbench.errors import InputError
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

log = logging.getLogger(__name__)

RUNNER = "lkp"
SOURCE = "lkp"
LAYOUT = "<testcase>/<path_params>/<tbox_group>/<rootfs>/<kconfig>/<compiler>/<commit>/<run>"
AXES = ("testcase", "path_params", "tbox_group", "rootfs", "kconfig", "compiler")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_RUN = re.compile(r"^\d+$")
# characters LKP keeps in a path_params component (others become "_")
_PATH_PARAM_UNSAFE = re.compile(r"[^-a-zA-Z0-9+=:.%]")
# job.yaml keys that are path components or bookkeeping, never path parameters
_NOT_PARAMS = frozenset(AXES) | {
    "commit",
    "suite",
    "category",
    "job_origin",
    "testbox",
    "queue",
    "id",
    "result_root",
    "arch",
}
_RAW_LOG_LIMIT = 4 << 20
_ROOTFS_SEP = re.compile(r"[^a-zA-Z0-9._-]")
_MATRIX_NAMES = ("matrix.json", "matrix.json.gz")
# unite-stats' summaries of a matrix (lib/matrix.rb unite_to): derived, never read
_SUMMARY_NAMES = frozenset({"avg.json", "stddev.json", "avg.csv", "stddev.csv", "matrix.csv"})
# unite_remove_denylist_stats: per-CPU sched_debug stats never reach a matrix
_DENYLISTED_STAT = re.compile(r"^sched_debug.*\.[0-9]+$")


@dataclass
class ResultRoot:
    """The axes of one ``_result_root`` (everything but the run number)."""

    commit_dir: Path
    testcase: str
    path_params: str
    tbox_group: str
    rootfs: str
    kconfig: str
    compiler: str
    commit: str


@dataclass
class LkpRun:
    root: ResultRoot
    run: int
    stats: dict[str, list[float]]
    source_file: Path
    job: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, bytes] = field(default_factory=dict)
    # stats whose value in this run is the JSON integer 0 (unite-stats drops a stat that is
    # one in every run of a commit; 0.0 is kept, as LKP keeps it)
    int_zeros: frozenset[str] = frozenset()


# -- finding files -------------------------------------------------------------------------


def find_result_files(
    paths: Iterable[str], notes: list[str] | None = None
) -> tuple[list[Path], list[Path]]:
    """Every run's stats.json and every commit's matrix.json under the given paths (files or
    folders); what else unite-stats writes, and any other file, is skipped (noted in
    ``notes``)."""
    stats: list[Path] = []
    matrices: list[Path] = []
    notes = notes if notes is not None else []
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise InputError(given, "no such file or directory")
        found_here = 0
        skipped = 0
        for f in [p] if p.is_file() else _walk(p):
            kind = _classify(f)
            if kind == "stats":
                stats.append(f.resolve())
                found_here += 1
            elif kind == "matrix":
                matrices.append(f.resolve())
                found_here += 1
            elif p.is_file() and kind == "other":
                raise InputError(given, "not an LKP stats.json or matrix.json")
            elif kind == "other":
                skipped += 1
            else:
                notes.append(f"skipped {f}: {kind}")
        if skipped:
            notes.append(f"skipped {_plural(skipped, 'other file')} under {given}")
        if not found_here:
            raise InputError(
                given,
                f"no LKP results found (expected {LAYOUT}/stats.json or <commit>/matrix.json)",
            )
    return sorted(set(stats)), sorted(set(matrices))


def _walk(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath, name)


def _classify(f: Path) -> str:
    """'stats', 'matrix', 'other', or why unite-stats' own file is skipped."""
    parent = f.parent
    if f.name == "stats.json":
        return "stats"  # its depth is checked when it is read
    if f.name in _SUMMARY_NAMES:
        return "a summary unite-stats derives from matrix.json"
    if f.name not in _MATRIX_NAMES:
        return "other"
    if _COMMIT.match(parent.name):
        return "matrix"
    if _RUN.match(parent.name) and _COMMIT.match(parent.parent.name):
        return "a run's monitor samples (the run's stats.json is read)"
    if _has_commit_dirs(parent):
        return "the cross-commit matrix of the <compiler> level (each commit is read instead)"
    return "matrix"  # its depth is checked, and refused, when it is read


def _has_commit_dirs(d: Path) -> bool:
    try:
        return any(c.is_dir() and _COMMIT.match(c.name) for c in d.iterdir())
    except OSError:
        return False


def parse_result_root(commit_dir: Path, file: Path) -> ResultRoot:
    """The axes from the path of a ``<commit>`` directory, checking the layout's depth."""
    parts = commit_dir.parts
    if not _COMMIT.match(commit_dir.name):
        raise InputError(
            file, f"not at LKP result depth: '{commit_dir.name}' is not a 40-hex commit ({LAYOUT})"
        )
    above = [x for x in parts[:-1] if x not in ("/", "")]
    if len(above) < len(AXES):
        raise InputError(file, f"not at LKP result depth: too few path components ({LAYOUT})")
    values = above[-len(AXES) :]
    return ResultRoot(commit_dir, *values, commit=commit_dir.name)


# -- reading and checking -----------------------------------------------------------------


def _load_json(path: Path) -> tuple[Any, str]:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode()
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    try:
        return json.loads(text), text
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}:{exc.lineno}", f"malformed JSON: {exc.msg} at line {exc.lineno}"
        ) from None


def _where(path: Path, text: str, stat: str) -> str:
    """``file:line`` of a stat's key (LKP pretty-prints its JSON, a key per line)."""
    at = text.find(json.dumps(stat, ensure_ascii=False) + ":")
    return f"{path}:{text.count(chr(10), 0, at) + 1}" if at >= 0 else str(path)


def _number(path: Path, text: str, stat: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(
            _where(path, text, stat), f"stat '{stat}' has a non-numeric value {json.dumps(v)[:40]}"
        )
    if not math.isfinite(v):
        raise InputError(_where(path, text, stat), f"stat '{stat}' is not a finite number")
    return float(v)


def _is_int_zero(v: Any) -> bool:
    return type(v) is int and v == 0


def _read_stats(path: Path) -> tuple[dict[str, list[float]], frozenset[str]]:
    data, text = _load_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object of stat: value")
    if not data:
        raise InputError(path, "no stats")
    out: dict[str, list[float]] = {}
    zeros = set()
    for stat, v in data.items():
        if not stat:
            raise InputError(path, "empty stat name")
        if isinstance(v, list):
            if not v:
                raise InputError(_where(path, text, stat), f"stat '{stat}' is an empty list")
            out[stat] = [_number(path, text, stat, x) for x in v]
            if all(map(_is_int_zero, v)):
                zeros.add(stat)
        else:
            out[stat] = [_number(path, text, stat, v)]
            if _is_int_zero(v):
                zeros.add(stat)
    return out, frozenset(zeros)


def read_matrix(path: Path) -> tuple[list[int], dict[str, list[float]]]:
    """matrix.json: stat -> one value per run; returns (run numbers, matrix).

    A stat's list may be shorter than the run count: LKP appends a run's value after padding
    the runs before it with 0 (lib/stats.rb add_stats_to_matrix), so a list stops at the last
    run that has the stat. Such a stat has no value for the runs past its end."""
    data, text = _load_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object of stat: [value per run]")
    sources = data.get("stats_source")
    if sources is not None and (
        not isinstance(sources, list) or not all(isinstance(s, str) for s in sources)
    ):
        raise InputError(_where(path, text, "stats_source"), "stats_source must be a list of paths")
    lists = {k: v for k, v in data.items() if k != "stats_source"}
    for stat, values in lists.items():
        if not isinstance(values, list):
            raise InputError(
                _where(path, text, stat), f"stat '{stat}' is not a list (one value per run)"
            )
    width = len(sources) if sources is not None else max(map(len, lists.values()), default=0)
    matrix: dict[str, list[float]] = {}
    for stat, values in lists.items():
        if len(values) > width:
            raise InputError(
                _where(path, text, stat),
                f"stat '{stat}' has {len(values)} values, more than the {width} runs in "
                "stats_source (one value per run)",
            )
        if values:  # unite-stats removes empty lists; one left over says nothing
            matrix[stat] = [_number(path, text, stat, x) for x in values]
    if not matrix or not width:
        raise InputError(path, "no runs in matrix")
    return _run_numbers(path, sources, width), matrix


def _run_numbers(path: Path, sources: list[str] | None, width: int) -> list[int]:
    # stats_source names the run directories, so a run keeps its number (and its identity)
    # whether it is imported from its stats.json or from the matrix
    if sources:
        nums = []
        for s in sources:
            run = Path(s).parent.name
            if not _RUN.match(run):
                break
            nums.append(int(run))
        if len(nums) == width and len(set(nums)) == width:
            return nums
    return list(range(width))


def read_job(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(path, f"malformed YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(path, "expected a YAML mapping")
    return data


def check_job_matches(path: Path, job: dict[str, Any], root: ResultRoot) -> None:
    """A job.yaml must describe the result root it sits in (catches misplaced trees)."""
    for key in ("testcase", "tbox_group", "rootfs", "kconfig", "compiler", "commit"):
        v = job.get(key)
        if v is None:
            continue
        if key == "rootfs":
            # the path holds the rootfs file's name (lib/job.rb rootfs_filename)
            v = _ROOTFS_SEP.split(str(v))[-1]
        if str(v) != getattr(root, key):
            raise InputError(
                path, f"job.yaml has {key} '{v}' but the path has '{getattr(root, key)}'"
            )


# -- job parameters -----------------------------------------------------------------------


def clean_path_param(value: Any) -> str:
    return _PATH_PARAM_UNSAFE.sub("_", str(value)[:31])


def _param_candidates(job: dict[str, Any]) -> list[tuple[str, Any]]:
    """Scalar leaves of job.yaml (program sections are nested: ``vm-scalability: {test: ..}``)."""
    out: dict[str, Any] = {}

    def visit(d: dict[str, Any], depth: int) -> None:
        for k, v in d.items():
            k = str(k)
            if isinstance(v, dict) and depth < 2:
                visit(v, depth + 1)
            elif isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "":
                if k not in _NOT_PARAMS and not k.startswith("_") and k not in out:
                    out[k] = v
            elif isinstance(v, bool) and k not in out and k not in _NOT_PARAMS:
                out[k] = v

    visit(job, 0)
    return sorted(out.items())


def params_from_job(job: dict[str, Any], path_params: str) -> dict[str, str] | None:
    """The job.yaml parameters whose values make up ``path_params`` (LKP joins the values
    sorted by key with '-'); None when no subset reproduces it."""
    cands = _param_candidates(job)
    tokens = []
    for k, v in cands:
        val = "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
        tokens.append((k, val, {clean_path_param(val), clean_path_param(f"{k}={val}")}))
    memo: dict[tuple[int, int], list[int] | None] = {}

    def search(i: int, pos: int) -> list[int] | None:
        if pos == len(path_params):
            return []
        if i == len(tokens):
            return None
        key = (i, pos)
        if key in memo:
            return memo[key]
        result = None
        start = pos + 1 if pos else 0  # skip the '-' between values
        for form in tokens[i][2]:
            end = start + len(form)
            if (
                form
                and path_params.startswith(form, start)
                and (end == len(path_params) or path_params[end] == "-")
            ):
                rest = search(i + 1, end)
                if rest is not None:
                    result = [i, *rest]
                    break
        if result is None:
            result = search(i + 1, pos)
        memo[key] = result
        return result

    if path_params == "defaults":
        return {}
    chosen = search(0, 0)
    if chosen is None:
        return None
    return {tokens[i][0]: tokens[i][1] for i in chosen}


# -- building runs ------------------------------------------------------------------------


def collect_runs(stats_files: list[Path], matrix_files: list[Path]) -> list[LkpRun]:
    runs: list[LkpRun] = []
    commits_with_runs: set[Path] = set()
    for f in stats_files:
        run_dir = f.parent
        if not _RUN.match(run_dir.name):
            raise InputError(
                f, f"not at LKP result depth: '{run_dir.name}' is not a run number ({LAYOUT})"
            )
        root = parse_result_root(run_dir.parent, f)
        stats, zeros = _read_stats(f)
        run = LkpRun(root, int(run_dir.name), stats, f, int_zeros=zeros)
        job_file = run_dir / "job.yaml"
        if job_file.is_file():
            run.job = read_job(job_file)
            check_job_matches(job_file, run.job, root)
            run.logs["job.yaml"] = job_file.read_bytes()
        raw = run_dir / root.testcase
        if raw.is_file() and raw.stat().st_size <= _RAW_LOG_LIMIT:
            run.logs[root.testcase] = raw.read_bytes()
        runs.append(run)
        commits_with_runs.add(root.commit_dir)
    unite_like_lkp(runs)
    for f in matrix_files:
        root = parse_result_root(f.parent, f)
        numbers, matrix = read_matrix(f)  # checked even when the runs' stats.json win
        if root.commit_dir in commits_with_runs:
            continue
        job: dict[str, Any] = {}
        for jf in sorted(root.commit_dir.glob("*/job.yaml")):
            job = read_job(jf)
            check_job_matches(jf, job, root)
            break
        for col, num in enumerate(numbers):
            stats = {stat: [v[col]] for stat, v in matrix.items() if col < len(v)}
            runs.append(LkpRun(root, num, stats, f, job=job))
    return runs


def unite_like_lkp(runs: list[LkpRun]) -> None:
    """Drop, per commit, the stats unite-stats keeps out of the commit's matrix.json (lib/
    matrix.rb unite_to): per-CPU sched_debug stats, and stats that are the integer 0 in every
    run that has them. ncompare reads that matrix, so such a stat is no row of its table (not
    a ``0.00 -100.0% 0.00`` one)."""
    by_commit: dict[Path, list[LkpRun]] = {}
    for r in runs:
        by_commit.setdefault(r.root.commit_dir, []).append(r)
    for group in by_commit.values():
        seen: set[str] = set()
        nonzero: set[str] = set()
        for r in group:
            seen.update(r.stats)
            nonzero.update(k for k in r.stats if k not in r.int_zeros)
        drop = {k for k in seen if k not in nonzero or _DENYLISTED_STAT.match(k)}
        if drop:
            for r in group:
                r.stats = {k: v for k, v in r.stats.items() if k not in drop}


def _job_params(runs: list[LkpRun]) -> dict[tuple[str, str], dict[str, str]]:
    """Real parameter names per (testcase, path_params), from any job.yaml that explains it,
    so runs with and without job.yaml of one job stay one job."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for r in runs:
        key = (r.root.testcase, r.root.path_params)
        if key in found or not r.job:
            continue
        params = params_from_job(r.job, r.root.path_params)
        if params is not None:
            found[key] = params
    return found


def to_run_data(runs: list[LkpRun]) -> list[RunData]:
    params_by_job = _job_params(runs)
    out = []
    for r in runs:
        root = r.root
        params = params_by_job.get((root.testcase, root.path_params))
        if params is None:
            params = {"path_params": root.path_params}
        params = {**params, "rootfs": root.rootfs}
        out.append(
            RunData(
                job=JobSpec(
                    suite=root.testcase,
                    test=str(params.get("test", "")),
                    params=params,
                    runner=RUNNER,
                ),
                kernel=KernelSpec(
                    commit=root.commit,
                    config_name=root.kconfig,
                    # LKP trees carry the kconfig's name, not the .config: it stands in for
                    # the hash so two kconfigs of one commit stay two kernels
                    config_hash=f"lkp:{root.kconfig}"[:64],
                    compiler=root.compiler,
                ),
                machine=MachineSpec(name=root.tbox_group, kind="import"),
                iteration=r.run,
                samples=r.stats,
                source=SOURCE,
                logs=r.logs,
                meta={
                    "lkp_result_root": str(root.commit_dir / str(r.run)),
                    "path_params": root.path_params,
                    "imported_from": str(r.source_file),
                },
            )
        )
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def keep_columns(eng: Engine, run_ids: list[int]) -> None:
    """Make the LKP columns of the kernels just imported (tables/lkp_columns), as LKP writes
    a commit's matrix.json on upload: the first ``--all`` table of them is then as quick as
    the next. A failure here loses nothing: the table makes a missing column itself."""
    if not run_ids:
        return
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from stackbench.resultsdb.tables import lkp_columns

    try:
        with eng.begin() as conn:
            builds = conn.execute(
                text("SELECT DISTINCT build_id FROM run WHERE id = ANY(:ids)"), {"ids": run_ids}
            ).scalars()
            lkp_columns.refresh(conn, sorted(builds))
    except SQLAlchemyError as exc:
        log.warning("LKP columns not kept (the first table makes them): %s", exc)


def import_paths(eng: Engine, paths: list[str], notes: list[str] | None = None) -> str:
    """Import every LKP run under ``paths``; a one-line summary of what happened (what was
    skipped goes to ``notes``)."""
    if not paths:
        raise InputError("lkp", "no paths given")
    stats_files, matrix_files = find_result_files(paths, notes)
    data = to_run_data(collect_runs(stats_files, matrix_files))
    kernels = {(d.kernel.commit, d.kernel.config_hash, d.kernel.compiler) for d in data}
    jobs = {(d.job.suite, d.job.params_key) for d in data}
    res = ingest(eng, data)
    keep_columns(eng, res.inserted)
    return (
        f"imported {_plural(len(res.inserted), 'run')} ({_plural(len(kernels), 'kernel')}, "
        f"{_plural(len(jobs), 'job')}), {res.skipped} already present"
    )
