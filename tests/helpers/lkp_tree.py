"""LKP result trees as LKP's own tools leave them, built from Python for the tests.

``write_runs`` lays out per-run ``stats.json`` (and ``job.yaml``) the way an LKP job writes
them; ``unite`` then does what ``sbin/unite-stats RESULT_ROOT`` does for each run, in run
order (lkp-tests lib/matrix.rb ``unite_stats``/``unite_to`` and lib/stats.rb
``add_stats_to_matrix``): it adds the run's stats to the commit's ``matrix.json`` and to the
cross-commit ``matrix.json`` of the ``<compiler>`` level, padding the runs before with 0 (so
a stat's list stops at the last run that has it), drops per-CPU sched_debug stats and stats
that are the integer 0 in every run, and writes ``avg.json`` and ``stddev.json`` beside each
matrix from the zero-filled matrix. JSON is written as Ruby's ``JSON.pretty_generate`` does.
Nothing here is LKP's code; it follows what that code does, to produce the same files.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

AXES = {
    "testcase": "vm-scalability",
    "path_params": "performance-300s-8T-anon-w-seq-mt",
    "tbox_group": "qemu-vm",
    "rootfs": "debian-12-x86_64",
    "kconfig": "x86_64-rhel-9.4",
    "compiler": "gcc-12",
}
JOB = {
    "testcase": "vm-scalability",
    "cpufreq_governor": "performance",
    "runtime": "300s",
    "vm-scalability": {"size": "8T", "test": "anon-w-seq-mt"},
    "tbox_group": "qemu-vm",
    "rootfs": "debian-12-x86_64",
    "kconfig": "x86_64-rhel-9.4",
    "compiler": "gcc-12",
}
_DENYLISTED = re.compile(r"^sched_debug.*\.[0-9]+$")


def compiler_dir(root: Path) -> Path:
    return root.joinpath(*AXES.values())


def save_json(obj: Any, path: Path) -> None:
    # Ruby's JSON.pretty_generate: two-space indent, one element per line, "[]" when empty
    path.write_text(json.dumps(obj, indent=2).replace("[\n\n  ]", "[]"))


def write_runs(root: Path, commit: str, runs: list[dict[str, Any]]) -> Path:
    """One run directory per stats dict, numbered from 0; returns the commit directory."""
    commit_dir = compiler_dir(root) / commit
    for n, stats in enumerate(runs):
        run_dir = commit_dir / str(n)
        run_dir.mkdir(parents=True)
        save_json(stats, run_dir / "stats.json")
        (run_dir / "job.yaml").write_text(yaml.safe_dump({**JOB, "commit": commit}))
    return commit_dir


def _add_stats_to_matrix(stats: dict[str, Any], matrix: dict[str, list]) -> None:
    columns = max((len(v) for v in matrix.values()), default=0)
    for k, v in stats.items():
        row = matrix.setdefault(k, [])
        row.extend([0] * (columns - len(row)))
        row.extend(v if isinstance(v, list) else [v])


def _pstddev(v: list) -> float:
    m = math.fsum(v) / len(v)
    return math.sqrt(math.fsum((x - m) ** 2 for x in v) / len(v))


def _unite_to(stats: dict[str, Any], matrix_root: Path, max_cols: int | None) -> None:
    path = matrix_root / "matrix.json"
    matrix = json.loads(path.read_text()) if path.exists() else {}
    if "stats_source" not in matrix:
        matrix = {}
    elif stats["stats_source"] in matrix["stats_source"]:
        col = matrix["stats_source"].index(stats["stats_source"])
        for v in matrix.values():
            del v[col : col + 1]
    _add_stats_to_matrix(stats, matrix)
    if max_cols is not None and len(matrix["stats_source"]) - max_cols > 1:
        n = len(matrix["stats_source"]) - max_cols
        matrix = {k: v[n:] for k, v in matrix.items() if v[n:]}
    matrix = {
        k: v
        for k, v in matrix.items()
        if not _DENYLISTED.match(k) and v and not all(type(x) is int and x == 0 for x in v)
    }
    save_json(matrix, path)
    cols = len(matrix["stats_source"])
    filled = {k: v + [0] * (cols - len(v)) for k, v in matrix.items() if k != "stats_source"}
    save_json({k: math.fsum(v) / len(v) for k, v in filled.items()}, matrix_root / "avg.json")
    save_json({k: _pstddev(v) for k, v in filled.items()}, matrix_root / "stddev.json")


def unite(run_dir: Path) -> None:
    """``unite-stats RESULT_ROOT`` for one run directory."""
    run_dir = run_dir.resolve()
    stats = json.loads((run_dir / "stats.json").read_text())
    stats["stats_source"] = f"{run_dir}/stats.json"
    _unite_to(stats, run_dir.parent, None)
    _unite_to(stats, run_dir.parent.parent, 100)


def build(root: Path, commits: dict[str, list[dict[str, Any]]]) -> Path:
    """Write and unite every run of every commit (commits in order, runs in order)."""
    for commit, runs in commits.items():
        commit_dir = write_runs(root, commit, runs)
        for n in range(len(runs)):
            unite(commit_dir / str(n))
    return compiler_dir(root)
