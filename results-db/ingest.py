"""Bulk ingest: one transaction per run, samples through COPY, idempotent by key.

Importers parse everything first and hand complete :class:`RunData` objects here, so bad
input is rejected before anything is written.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from sqlalchemy import Engine, func, select, text
from sqlalchemy.dialects.postgresql import insert

from stackbench.resultsdb import kernels_store, pgbinary
from stackbench.resultsdb import metrics as metric_rules
from stackbench.resultsdb.models import Job, Machine, RunLog, Tree
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData


@dataclass
class IngestResult:
    # each run's new id in the order given, None where its idempotency key was stored before
    ids: list[int | None] = field(default_factory=list)
    samples: int = 0

    @property
    def inserted(self) -> list[int]:
        return [rid for rid in self.ids if rid is not None]

    @property
    def skipped(self) -> int:
        return self.ids.count(None)


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
    return kernels_store.build_id(conn, values)


def machine_id(conn, m: MachineSpec) -> int:
    """The machine's id, created when new. A machine that booted the runs being stored (any
    kind but ``import``: a QEMU host, a box) is seen now: the machines page's "last seen"."""
    values = {
        "name": m.name,
        "kind": m.kind,
        "cpus": m.cpus,
        "memory_mb": m.memory_mb,
        "nodes": m.nodes,
    }
    if m.kind == "import":  # results of another time and place: nothing was seen now
        return _upsert_id(conn, Machine, values, ["name"])
    stmt = (
        insert(Machine)
        .values(**values, last_seen=func.now())
        .on_conflict_do_update(index_elements=["name"], set_={"last_seen": func.now()})
        .returning(Machine.id)
    )
    return conn.execute(stmt).scalar_one()


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


# Metric ids never change once a name exists, so they are cached per database for the
# process. Entries are added only after the transaction that created them committed.
_metric_cache: dict[str, dict[str, int]] = {}


def metric_ids(conn, names: Iterable[str]) -> dict[str, int]:
    """Ids of the named metrics, creating unknown ones (with unit and direction rules)."""
    cache = _metric_cache.get(str(conn.engine.url), {})
    wanted = set(names)
    found = {n: cache[n] for n in wanted if n in cache}
    missing = sorted(wanted - found.keys())
    if not missing:
        return found
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:
        rows = []
        for n in missing:
            mi = metric_rules.info(n)
            rows.append((n, mi.unit, mi.higher_is_better, mi.kind))
        cur.executemany(
            "INSERT INTO metric (name, unit, higher_is_better, kind) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (name) DO NOTHING",
            rows,
        )
        cur.execute("SELECT name, id FROM metric WHERE name = ANY(%s)", (missing,))
        found.update(dict(cur.fetchall()))
    return found


def _remember_metrics(eng: Engine, ids: dict[str, int]) -> None:
    _metric_cache.setdefault(str(eng.url), {}).update(ids)


def _copy_samples(
    conn, run_id: int, ids: dict[str, int], samples: dict[str, Sequence[float]]
) -> int:
    raw = conn.connection.driver_connection  # psycopg connection inside this transaction
    mids, seqs, values = _sample_columns(samples, ids)
    with (
        raw.cursor() as cur,
        cur.copy("COPY sample (run_id, metric_id, seq, value) FROM STDIN (FORMAT BINARY)") as cp,
    ):
        cp.write(pgbinary.COPY_HEADER)
        step = 100_000  # rows per write, so a huge run is not one giant buffer
        for at in range(0, len(values), step):
            end = at + step
            cp.write(pgbinary.copy_rows(run_id, mids[at:end], seqs[at:end], values[at:end]))
        cp.write(pgbinary.COPY_TRAILER)
    return len(values)


class _Ids:
    """Ids of jobs, kernels and machines resolved once per ingest() call."""

    def __init__(self) -> None:
        self.jobs: dict[tuple, int] = {}
        self.kernels: dict[tuple, int] = {}
        self.machines: dict[str, int] = {}

    def resolve(self, conn, data: RunData) -> tuple[int, int, int]:
        j = data.job
        jk = (j.suite, j.params_key, j.suite_version, j.runner)
        if jk not in self.jobs:
            self.jobs[jk] = job_id(conn, j)
        k = data.kernel
        kk = (k.commit, k.config_hash, k.compiler)
        if kk not in self.kernels:
            self.kernels[kk] = kernel_id(conn, k)
        if data.machine.name not in self.machines:
            self.machines[data.machine.name] = machine_id(conn, data.machine)
        return self.jobs[jk], self.kernels[kk], self.machines[data.machine.name]


_RUN_COLUMNS = (
    "job_id, build_id, machine_id, iteration, status, source, error, sysstate, meta, "
    "started_at, finished_at, duration_s, idempotency_key, boot_id, boot_round, series_id"
)
# a run names its series (meta ``series``) only while the series exists: a deleted one's
# late upload is stored as a run of none
_RUN_VALUES = (
    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "(SELECT id FROM series WHERE id = %s)"
)
_INSERT_RUN = (
    f"INSERT INTO run ({_RUN_COLUMNS}) VALUES ({_RUN_VALUES}) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)
# Small runs (LKP stats.json: a few hundred scalars) go in with their samples and logs in ONE
# statement: per-run round trips, not row counts, limit their rate. Large runs use COPY.
_INSERT_RUN_ALL = (
    f"WITH r AS (INSERT INTO run ({_RUN_COLUMNS}) VALUES ({_RUN_VALUES}) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id), "
    "s AS (INSERT INTO sample (run_id, metric_id, seq, value) "
    "SELECT r.id, t.m, t.q, t.v FROM r, unnest(%b::int[], %b::int[], %b::float8[]) "
    "AS t(m, q, v)), "
    "l AS (INSERT INTO run_log (run_id, name, content) "
    "SELECT r.id, t.n, t.c FROM r, unnest(%s::text[], %s::bytea[]) AS t(n, c)) "
    "SELECT id FROM r"
)
COPY_THRESHOLD = 2000
# a COPYed run's samples once more in one row (migration 0005), for whole-run reads
_INSERT_PACKED = (
    'INSERT INTO run_samples (run_id, metric_ids, counts, "values") VALUES (%s, %b, %b, %b)'
)
# Small runs are sent this many at a time in psycopg's pipeline mode: each run is still its
# own BEGIN ... COMMIT, but the client does not wait for one run's answer before sending the
# next, so a batch costs one round trip.
PIPELINE_BATCH = 200
# Imports of at least PARALLEL_MIN_SAMPLES are spread over WORKERS connections: the server's
# inserts, not the client, bound the rate, and each connection has its own backend process.
WORKERS = 2
PARALLEL_MIN_SAMPLES = 50_000

Resolved = tuple[int, int, int]  # job, kernel build, machine


def _run_params(data: RunData, job: int, build: int, machine: int) -> tuple:
    from psycopg.types.json import Jsonb

    return (
        job,
        build,
        machine,
        data.iteration,
        data.status,
        data.source,
        data.error,
        Jsonb(data.sysstate),
        Jsonb(data.meta),
        data.started_at,
        data.finished_at,
        data.duration_s,
        data.key(),
        *boot_of(data),
        series_of(data),
    )


def boot_of(data: RunData) -> tuple[str | None, int | None]:
    """(boot id, round) of a run: the runner puts them in its meta (``boot_id``,
    ``boot_round``), which also carries them through the worker's JSON payloads."""
    boot = data.meta.get("boot_id")
    rnd = data.meta.get("boot_round")
    return (
        str(boot)[:128] if boot not in (None, "") else None,
        int(rnd) if isinstance(rnd, (int, str)) and str(rnd).isdigit() else None,
    )


def series_of(data: RunData) -> int | None:
    """The series a run was booted for: the executor puts its id in the run's meta
    (``series``), stored as ``run.series_id``."""
    sid = data.meta.get("series")
    return int(sid) if isinstance(sid, (int, str)) and str(sid).isdigit() else None


def _all_params(data: RunData, resolved: Resolved, metric: dict[str, int]) -> tuple:
    return (
        *_run_params(data, *resolved),
        *_sample_arrays(data, metric),
        list(data.logs),
        list(data.logs.values()),
    )


def _store_run(conn, data: RunData, resolved: Resolved, metric: dict[str, int]) -> int | None:
    """Insert one run inside the caller's transaction; None when its key already exists."""
    raw = conn.connection.driver_connection
    pgbinary.register(raw)
    with raw.cursor() as cur:
        if _small(data):
            row = cur.execute(_INSERT_RUN_ALL, _all_params(data, resolved, metric)).fetchone()
            return row[0] if row else None
        row = cur.execute(_INSERT_RUN, _run_params(data, *resolved)).fetchone()
        if row is None:
            return None
        run_id = row[0]
        _copy_samples(conn, run_id, metric, data.samples)
        cur.execute(_INSERT_PACKED, (run_id, *_packed(data.samples, metric)))
    if data.logs:
        conn.execute(
            insert(RunLog),
            [{"run_id": run_id, "name": k, "content": v} for k, v in data.logs.items()],
        )
    return run_id


def _resolve_all(conn, runs: Sequence[RunData]) -> tuple[list[Resolved], dict[str, int]]:
    """Jobs, kernels, machines and metrics of the runs, created where missing."""
    ids = _Ids()
    # machines first, in name order: their rows are updated (last seen), and two ingests
    # taking the same rows in different orders could deadlock
    machines = {d.machine.name: d.machine for d in runs}
    for name in sorted(machines):
        ids.machines[name] = machine_id(conn, machines[name])
    resolved = [ids.resolve(conn, d) for d in runs]
    return resolved, metric_ids(conn, {n for d in runs for n in d.samples})


_SEQS: dict[int, array] = {}


def _seqs(n: int) -> array:
    """0..n-1 as int4s, cached: most runs repeat the same few lengths."""
    if n not in _SEQS:
        if n > 65536:
            return array("i", range(n))
        _SEQS[n] = array("i", range(n))
    return _SEQS[n]


def _sample_columns(
    samples: dict[str, Sequence[float]], metric: dict[str, int]
) -> tuple[array, array, array]:
    """The run's samples as three columns (metric ids, seq numbers, values)."""
    lengths = set(map(len, samples.values()))
    if lengths == {1}:  # LKP stats: one scalar per metric, the common case
        values = array("d", map(itemgetter(0), samples.values()))
        return array("i", map(metric.__getitem__, samples)), _zeros(len(values)), values
    m_ids, seqs, values = array("i"), array("i"), array("d")
    for name, vals in samples.items():
        if n := len(vals):
            m_ids.extend(array("i", (metric[name],)) * n)
            seqs.extend(_seqs(n))
            values.extend(vals)
    return m_ids, seqs, values


def _packed(samples: dict[str, Sequence[float]], metric: dict[str, int]) -> tuple[bytes, ...]:
    """The run's samples as run_samples keeps them, in (metric id, seq) order (the order
    query.read_samples returns): metric ids and sample counts as big-endian int4s, values
    as big-endian float8s, each in one bytea (as the migration's int4send and float8send
    make them)."""
    names = sorted((n for n in samples if samples[n]), key=metric.__getitem__)
    mids = array("i", map(metric.__getitem__, names))
    counts = array("i", [len(samples[n]) for n in names])
    values = array("d")
    for name in names:
        values.extend(samples[name])
    if sys.byteorder == "little":
        for packed in (mids, counts, values):
            packed.byteswap()
    return mids.tobytes(), counts.tobytes(), values.tobytes()


def _zeros(n: int) -> array:
    return array("i", bytes(4 * n))


def _sample_arrays(data: RunData, metric: dict[str, int]) -> tuple[bytes, bytes, bytes]:
    """The run's samples as three binary array parameters (see :mod:`pgbinary`)."""
    m_ids, seqs, values = _sample_columns(data.samples, metric)
    return (
        pgbinary.Int4Array.of(m_ids),
        pgbinary.Int4Array.of(seqs),
        pgbinary.Float8Array.of(values),
    )


def _n_samples(data: RunData) -> int:
    return sum(map(len, data.samples.values()))


def _small(data: RunData) -> bool:
    return _n_samples(data) < COPY_THRESHOLD


def _store_pipelined(
    conn, batch: Sequence[RunData], resolved: Sequence[Resolved], metric: dict[str, int]
) -> list[int | None]:
    import contextlib

    raw = conn.connection.driver_connection
    pgbinary.register(raw)
    raw.autocommit = True  # explicit BEGIN/COMMIT per run inside the pipeline
    cursors = []
    try:
        with raw.pipeline():
            for data, ids in zip(batch, resolved, strict=True):
                raw.execute("BEGIN")
                cur = raw.cursor()
                cur.execute(_INSERT_RUN_ALL, _all_params(data, ids, metric))
                cursors.append(cur)
                raw.execute("COMMIT")
        out = []
        for cur in cursors:
            row = cur.fetchone()
            out.append(row[0] if row else None)
        return out
    except Exception:
        # the failing run's transaction is left aborted (the runs before it are committed,
        # the ones after it were never executed): end it so the connection stays usable
        with contextlib.suppress(Exception):
            raw.execute("ROLLBACK")
        raise
    finally:
        raw.autocommit = False


def _units(runs: Sequence[RunData]) -> list[tuple[int, int]]:
    """Index ranges stored together: up to PIPELINE_BATCH small runs, or one large run."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        j = i + 1
        if _small(runs[i]):
            while j < len(runs) and j - i < PIPELINE_BATCH and _small(runs[j]):
                j += 1
        out.append((i, j))
        i = j
    return out


def ingest(eng: Engine, runs: Iterable[RunData], workers: int | None = None) -> IngestResult:
    """Store runs, each in its own transaction. A large import is spread over ``workers``
    connections (default: WORKERS when it has PARALLEL_MIN_SAMPLES samples, else one).

    If a run fails, every run is still whole or absent: on one connection the runs before
    it are stored; with several, the other connections finish their share first. The first
    error is raised; importing again (idempotent) completes the set."""
    from concurrent.futures import ThreadPoolExecutor

    runs = list(runs)
    if not runs:
        return IngestResult()
    with eng.connect() as conn:
        # rows the runs share exist, committed, before any run refers to them
        with conn.begin():
            resolved, metric = _resolve_all(conn, runs)
        _remember_metrics(eng, metric)
    units = _units(runs)
    if workers is None:
        big = sum(map(_n_samples, runs)) >= PARALLEL_MIN_SAMPLES
        workers = WORKERS if big else 1
    workers = max(1, min(workers, len(units)))
    outcome: list[int | None] = [None] * len(runs)

    def lane(mine: list[tuple[int, int]]) -> None:
        with eng.connect() as conn:
            for a, b in mine:
                if b - a == 1 and not _small(runs[a]):
                    with conn.begin():
                        outcome[a] = _store_run(conn, runs[a], resolved[a], metric)
                else:
                    outcome[a:b] = _store_pipelined(conn, runs[a:b], resolved[a:b], metric)

    if workers == 1:
        lane(units)
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="ingest") as pool:
            futures = [pool.submit(lane, units[w::workers]) for w in range(workers)]
        failed = [e for e in (f.exception() for f in futures) if e is not None]
        if failed:
            raise failed[0]
    samples = sum(_n_samples(d) for d, rid in zip(runs, outcome, strict=True) if rid is not None)
    return IngestResult(ids=outcome, samples=samples)


def delete_runs(conn, run_ids: Sequence[int]) -> None:
    """Remove runs with their samples and logs (samples carry no cascading foreign key;
    run_samples and run_log go with their run)."""
    ids = list(run_ids)
    if not ids:
        return
    conn.execute(text("DELETE FROM sample WHERE run_id = ANY(:ids)"), {"ids": ids})
    conn.execute(text("DELETE FROM run WHERE id = ANY(:ids)"), {"ids": ids})


def count(eng: Engine, table: str) -> int:
    with eng.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
