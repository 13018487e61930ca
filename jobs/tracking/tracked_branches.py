"""Tracked branches: the YAML files in ``jobs/tracking/tracked/`` (and ``$STACKBENCH_TRACKED`` folders)
and the rows of the ``tracked_branch`` table that the nightly run (jobs/tracking/nightly.py) measures.
A file's format is in jobs/tracking/nightly.py's docstring."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from stackbench import config, schema
from stackbench.errors import InputError, NotFoundError
from stackbench.resultsdb import db, trees_q

TRACKED_DIR = Path(__file__).resolve().parent / "tracked"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["tree", "branch", "jobs"],
    "properties": {
        "tree": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"},
        "branch": {"type": "string", "minLength": 1, "pattern": "^[^\\s]+$"},
        "jobs": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "runs": {"type": "integer", "minimum": 2, "maximum": 100},
        "max_runs": {"type": "integer", "minimum": 2, "maximum": 200},
        "enabled": {"type": "boolean"},
        "bisect": {"type": "boolean"},
        "description": {"type": "string"},
    },
}


@dataclass
class Tracked:
    tree: str
    branch: str
    jobs: list[str]
    runs: int | None = None
    max_runs: int | None = None
    enabled: bool = True
    bisect: bool = True
    path: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.tree}:{self.branch}"


def clean_tracked(data: Any, origin: Path) -> Tracked:
    """A validated tracked-branch document (InputError naming the file and the field)."""
    schema.check(data, SCHEMA, origin, "tracked branch")
    from stackbench.jobs.executors.jobspecs import parse_job_spec

    for spec in data["jobs"]:
        try:
            parse_job_spec(spec)
        except (InputError, NotFoundError) as exc:
            raise InputError(origin, f"jobs: {spec!r}: {one_line(exc)}") from None
    runs, cap = data.get("runs"), data.get("max_runs")
    if runs and cap and cap < runs:
        raise InputError(origin, f"max_runs ({cap}) is below runs ({runs})")
    return Tracked(
        tree=data["tree"],
        branch=data["branch"],
        jobs=list(data["jobs"]),
        runs=runs,
        max_runs=cap,
        enabled=data.get("enabled", True),
        bisect=data.get("bisect", True),
        path=origin,
    )


def one_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def parse_tracked_file(path: Path) -> Tracked:
    return clean_tracked(schema.read_yaml(path), path)


def tracked_dirs() -> list[Path]:
    extra = config.raw("STACKBENCH_TRACKED")
    if extra is not None:
        return [Path(p) for p in extra.split(os.pathsep) if p]
    return [TRACKED_DIR]


def load_tracked(dirs: Iterable[Path] | None = None) -> list[Tracked]:
    """Every tracked-branch file; all are validated before any is used."""
    out: dict[str, Tracked] = {}
    for d in tracked_dirs() if dirs is None else dirs:
        for f in sorted(Path(d).glob("*.yaml")):
            t = parse_tracked_file(f)
            if t.label in out:
                raise InputError(f, f"{t.label} is already tracked by {out[t.label].path}")
            out[t.label] = t
    return list(out.values())


def sync_tracked(eng: Engine, tracked: Iterable[Tracked]) -> list[int]:
    """Create or update the tracked_branch rows of YAML definitions (the YAML wins for jobs,
    runs and enabled; the baseline and history stay). Returns their ids."""
    from stackbench.jobs.executors.series_state import register_tree
    from stackbench.kernels import trees

    ids = []
    items = list(tracked)
    tree_defs = {t.tree: trees.load_tree(t.tree) for t in items}  # unknown trees fail first
    with db.session(eng) as s:
        for t in items:
            tree = register_tree(s, tree_defs[t.tree])
            row = trees_q.save_branch(
                s,
                tree.id,
                t.branch,
                jobs=t.jobs,
                enabled=t.enabled,
                runs=t.runs,
                max_runs=t.max_runs,
                bisect=t.bisect,
                meta={"source": str(t.path) if t.path else "api"},
            )
            s.flush()  # the new rows' ids
            ids.append(row.id)
    return ids
