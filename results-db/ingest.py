"""Bulk ingest: one transaction per run, samples through COPY, idempotent by key.

Importers parse everything first and hand complete :class:`RunData` objects here, so bad
input is rejected before anything is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select, text
from sqlalchemy.dialects.postgresql import insert
from stackbench.resultsdb import metrics as metric_rules
from stackbench.resultsdb.models import Job, KernelBuild, Machine, Metric, Run, RunLog, Tree


@dataclass
class JobSpec:
    suite: str
    test: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    suite_version: str = ""
    runner: str = ""

    @property
    def params_key(self) -> str:
        return params_key(self.params)


@dataclass
class KernelSpec:
    commit: str
    name: str = ""
    config_name: str = ""
    config_hash: str = ""
    compiler: str = ""
    tree: str | None = None
    status: str = "imported"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class MachineSpec:
    name: str
    kind: str = "import"
    cpus: int | None = None
    memory_mb: int | None = None
    nodes: int | None = None


@dataclass
class RunData:
    job: JobSpec
    kernel: KernelSpec
    machine: MachineSpec
    iteration: int
    samples: dict[str, Sequence[float]]
    source: str = ""
    status: str = "done"
    error: str = ""
    logs: dict[str, bytes] = field(default_factory=dict)
    sysstate: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    idempotency_key: str | None = None

    def key(self) -> str:
        if self.idempotency_key:
            return self.idempotency_key
        ident = [
            self.source,
            self.job.suite,
            self.job.params_key,
            self.job.suite_version,
            self.job.runner,
            self.kernel.commit,
            self.kernel.config_hash,
            self.kernel.compiler,
            self.machine.name,
            self.iteration,
        ]
        return hashlib.sha256(json.dumps(ident).encode()).hexdigest()


@dataclass
class IngestResult:
    inserted: list[int] = field(default_factory=list)
    skipped: int = 0
    samples: int = 0


def params_key(params: dict[str, Any]) -> str:
    """Parameter values sorted by key and joined by '/', with their keys (stable identity)."""
    return "/".join(f"{k}={params[k]}" for k in sorted(params))


def _upsert_id(conn, model, values: dict[str, Any], keys: Sequence[str]) -> int:
    stmt = insert(model).values(**values).on_conflict_do_nothing(index_elements=list(keys))
    conn.execute(stmt)
    cond = [getattr(model, k) == values[k] for k in keys]
    return conn.execute(select(model.id).where(*cond)).scalar_one()


def tree_id(conn, name: str | None) -> int | None:
    if not name:
        return None
    return _upsert_id(conn, Tree, {"name": name}, ["name"])


def kernel_id(conn, k: KernelSpec) -> int:
    values = {
        "commit": k.commit,
        "name": k.name or k.commit,
        "config_name": k.config_name,
        "config_hash": k.config_hash,
        "compiler": k.compiler,
        "status": k.status,
        "tree_id": tree_id(conn, k.tree),
        "meta": k.meta,
    }
    return _upsert_id(conn, KernelBuild, values, ["commit", "config_hash", "compiler"])


def machine_id(conn, m: MachineSpec) -> int:
    values = {
        "name": m.name,
        "kind": m.kind,
        "cpus": m.cpus,
        "memory_mb": m.memory_mb,
        "nodes": m.nodes,
    }
    return _upsert_id(conn, Machine, values, ["name"])


def job_id(conn, j: JobSpec) -> int:
    values = {
        "suite": j.suite,
        "test": j.test,
        "params": j.params,
        "params_key": j.params_key,
        "suite_version": j.suite_version,
        "runner": j.runner,
    }
    return _upsert_id(conn, Job, values, ["suite", "params_key", "suite_version", "runner"])


def metric_ids(conn, names: Iterable[str]) -> dict[str, int]:
    names = sorted(set(names))
    if not names:
        return {}
    rows = []
    for n in names:
        mi = metric_rules.info(n)
        rows.append(
            {"name": n, "unit": mi.unit, "higher_is_better": mi.higher_is_better, "kind": mi.kind}
        )
    conn.execute(insert(Metric).values(rows).on_conflict_do_nothing(index_elements=["name"]))
    found = conn.execute(select(Metric.name, Metric.id).where(Metric.name.in_(names)))
    return {name: mid for name, mid in found}


def _copy_samples(
    conn, run_id: int, ids: dict[str, int], samples: dict[str, Sequence[float]]
) -> int:
    raw = conn.connection.driver_connection  # psycopg connection inside this transaction
    n = 0
    with (
        raw.cursor() as cur,
        cur.copy("COPY sample (run_id, metric_id, seq, value) FROM STDIN") as cp,
    ):
        buf: list[str] = []
        for name, values in samples.items():
            mid = ids[name]
            for seq, v in enumerate(values):
                buf.append(f"{run_id}\t{mid}\t{seq}\t{float(v)!r}\n")
            n += len(values)
            if len(buf) > 50000:
                cp.write("".join(buf))
                buf.clear()
        if buf:
            cp.write("".join(buf))
    return n


def ingest_run(eng: Engine, data: RunData) -> int | None:
    """Store one run and its samples in one transaction; None when its key already exists."""
    with eng.begin() as conn:
        values = {
            "job_id": job_id(conn, data.job),
            "build_id": kernel_id(conn, data.kernel),
            "machine_id": machine_id(conn, data.machine),
            "iteration": data.iteration,
            "status": data.status,
            "source": data.source,
            "error": data.error,
            "sysstate": data.sysstate,
            "meta": data.meta,
            "started_at": data.started_at,
            "finished_at": data.finished_at,
            "duration_s": data.duration_s,
            "idempotency_key": data.key(),
        }
        stmt = (
            insert(Run)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["idempotency_key"])
            .returning(Run.id)
        )
        run_id = conn.execute(stmt).scalar()
        if run_id is None:
            return None
        ids = metric_ids(conn, data.samples.keys())
        _copy_samples(conn, run_id, ids, data.samples)
        if data.logs:
            conn.execute(
                insert(RunLog),
                [{"run_id": run_id, "name": k, "content": v} for k, v in data.logs.items()],
            )
        return run_id


def ingest(eng: Engine, runs: Iterable[RunData]) -> IngestResult:
    res = IngestResult()
    for data in runs:
        rid = ingest_run(eng, data)
        if rid is None:
            res.skipped += 1
        else:
            res.inserted.append(rid)
            res.samples += sum(len(v) for v in data.samples.values())
    return res


def delete_runs(conn, run_ids: Sequence[int]) -> None:
    """Remove runs with their samples and logs (samples carry no cascading foreign key)."""
    ids = list(run_ids)
    if not ids:
        return
    conn.execute(text("DELETE FROM sample WHERE run_id = ANY(:ids)"), {"ids": ids})
    conn.execute(text("DELETE FROM run WHERE id = ANY(:ids)"), {"ids": ids})


def count(eng: Engine, table: str) -> int:
    with eng.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
