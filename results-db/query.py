"""Reading results back: kernels by name or commit prefix, and their samples per job.

Table renderers (LKP, mmtests, stackbench) all start from :func:`load` so they show the
same numbers for the same kernels.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from stackbench.errors import NotFoundError, StackbenchError


@dataclass(frozen=True)
class Kernel:
    id: int
    commit: str
    name: str
    config_name: str
    compiler: str

    @property
    def label(self) -> str:
        return self.name or self.commit


@dataclass
class JobRow:
    id: int
    suite: str
    test: str
    params: dict[str, Any]
    suite_version: str
    runner: str

    @property
    def suite_source(self) -> str:
        """upstream or builtin for stackbench's own runs ("" for imported results): upstream
        jobs carry ``suite_source`` in their params (jobs/suites.py)."""
        if (self.params or {}).get("suite_source") == "upstream":
            return "upstream"
        return "builtin" if self.suite_version.startswith("builtin-") else ""


@dataclass
class MetricRow:
    id: int
    name: str
    unit: str
    higher_is_better: bool | None
    kind: str


@dataclass
class RunRow:
    id: int
    job_id: int
    build_id: int
    machine: str
    machine_kind: str
    iteration: int
    status: str
    sysstate: dict[str, Any]
    meta: dict[str, Any]


@dataclass
class Dataset:
    """Samples of several kernels: ``values[(job_id, metric_id)][build_id][run_id]`` is the
    list of that run's samples in ``seq`` order."""

    kernels: list[Kernel]
    jobs: dict[int, JobRow] = field(default_factory=dict)
    metrics: dict[int, MetricRow] = field(default_factory=dict)
    runs: dict[int, RunRow] = field(default_factory=dict)
    values: dict[tuple[int, int], dict[int, dict[int, list[float]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict))
    )

    def pooled_machines(self) -> dict[int, list[str]]:
        """Jobs whose runs come from more than one machine: job id -> machine names."""
        seen: dict[int, set[str]] = {}
        for r in self.runs.values():
            seen.setdefault(r.job_id, set()).add(r.machine)
        return {j: sorted(m) for j, m in seen.items() if len(m) > 1}

    def runs_of(self, job_id: int, build_id: int) -> list[RunRow]:
        return sorted(
            (r for r in self.runs.values() if r.job_id == job_id and r.build_id == build_id),
            key=lambda r: (r.iteration, r.id),
        )


def resolve_kernel(conn: Connection, ref: str) -> Kernel:
    """A kernel by exact commit, exact name (mmtests run name), or unique commit prefix."""
    cols = "id, commit, name, config_name, compiler"
    for where in ("commit = :r", "name = :r"):
        rows = conn.execute(
            text(f"SELECT {cols} FROM kernel_build WHERE {where} ORDER BY id"), {"r": ref}
        ).all()
        if len(rows) >= 1:
            return Kernel(*rows[0])
    if len(ref) >= 4:
        rows = conn.execute(
            text(f"SELECT {cols} FROM kernel_build WHERE commit LIKE :p ORDER BY id"),
            {"p": ref.replace("%", r"\%").replace("_", r"\_") + "%"},
        ).all()
        if len(rows) == 1:
            return Kernel(*rows[0])
        if len(rows) > 1:
            names = ", ".join(r.commit[:12] for r in rows[:5])
            raise NotFoundError(f"kernel '{ref}' is ambiguous: {names}")
    raise NotFoundError(f"unknown kernel '{ref}' (not a stored commit, prefix or run name)")


def resolve_kernels(conn: Connection, refs: list[str]) -> list[Kernel]:
    return [resolve_kernel(conn, r) for r in refs]


def load(
    conn: Connection,
    kernels: list[Kernel],
    *,
    suite: str | None = None,
    machine: str | None = None,
    statuses: tuple[str, ...] = ("done",),
    suite_source: str | None = None,
) -> Dataset:
    """Every sample of the given kernels' runs (optionally of one suite, one machine, one
    suite source: upstream, or builtin meaning every job that is not upstream)."""
    ds = Dataset(kernels=kernels)
    ids = [k.id for k in kernels]
    if not ids:
        return ds
    params: dict[str, Any] = {"ids": ids, "st": list(statuses)}
    where_sql = ""
    if suite:
        where_sql = " AND j.suite = :suite"
        params["suite"] = suite
    if machine:
        where_sql += " AND m.name = :machine"
        params["machine"] = machine
    if suite_source == "upstream":
        where_sql += " AND j.params->>'suite_source' = 'upstream'"
    elif suite_source == "builtin":
        where_sql += " AND coalesce(j.params->>'suite_source', '') <> 'upstream'"
    elif suite_source is not None:
        raise StackbenchError(f"unknown suite source '{suite_source}' (upstream or builtin)")
    for r in conn.execute(
        text(
            "SELECT r.id, r.job_id, r.build_id, coalesce(m.name, ''), coalesce(m.kind, ''), "
            "r.iteration, r.status, r.sysstate, r.meta, j.suite, j.test, j.params, "
            "j.suite_version, j.runner FROM run r JOIN job j ON j.id = r.job_id "
            "LEFT JOIN machine m ON m.id = r.machine_id "
            f"WHERE r.build_id = ANY(:ids) AND r.status = ANY(:st){where_sql}"
        ),
        params,
    ):
        ds.runs[r[0]] = RunRow(*r[:9])
        ds.jobs.setdefault(r[1], JobRow(r[1], r[9], r[10], r[11], r[12], r[13]))
    if not ds.runs:
        return ds
    run_ids = list(ds.runs)
    with conn.connection.driver_connection.cursor() as cur:
        # a comparison's samples fit in memory: sort them there, not in temporary files
        cur.execute("SET LOCAL work_mem = '64MB'")
        cur.execute(
            "SELECT run_id, metric_id, value FROM sample WHERE run_id = ANY(%s) "
            "ORDER BY run_id, metric_id, seq",
            (run_ids,),
        )
        runs = ds.runs
        values = ds.values
        for run_id, metric_id, value in cur:
            run = runs[run_id]
            per_run = values[(run.job_id, metric_id)][run.build_id]
            lst = per_run.get(run_id)
            if lst is None:
                per_run[run_id] = [value]
            else:
                lst.append(value)
    metric_ids = sorted({metric_id for _, metric_id in values})
    for m in conn.execute(
        text("SELECT id, name, unit, higher_is_better, kind FROM metric WHERE id = ANY(:ids)"),
        {"ids": metric_ids},
    ):
        ds.metrics[m[0]] = MetricRow(*m)
    return ds
