"""Reading results back: kernels by name or commit prefix, and their samples per job.

Table renderers (LKP, mmtests, stackbench) all start from :func:`load` so they show the
same numbers for the same kernels. Samples leave PostgreSQL as one binary COPY stream read
straight into numpy arrays (:class:`Samples`); the nested per-run lists of
``Dataset.values`` are only built for the readers that ask for them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stackbench.errors import StackbenchError
from stackbench.resultsdb import kernelrefs, pgbinary

# Functions here take a SQLAlchemy Connection or a psycopg one and run their SQL on the
# psycopg connection beneath: the CLI reads a comparison without importing SQLAlchemy.
Connection = Any


def _raw(conn: Connection) -> Any:
    """The psycopg connection of ``conn`` (a SQLAlchemy Connection, or psycopg's own)."""
    pooled = getattr(conn, "connection", None)  # psycopg's own has one too: itself
    return getattr(pooled, "driver_connection", conn)


def _rows(conn: Connection, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
    return _raw(conn).execute(sql, params).fetchall()


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
        jobs carry ``suite_source`` in their params (jobs/benchmarks/suites.py)."""
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
    boot_id: str | None = None  # the run.boot_id column (the verdict's unit, boots.boot_key)
    boot_round: int | None = None  # the run.boot_round column (the verdict's block)

    @property
    def clock(self) -> str:
        """The clocksource the guest timed this run with (jobs/benchmarks/collect.py: clock_state);
        "unrecorded" for runs and imports without the record."""
        return str(self._clock.get("source") or "unrecorded")

    @property
    def coarse_clock(self) -> str:
        """Why this run's latencies cannot be trusted (a jiffies clock, a clocksource that
        changed during the run), "" when they can or nothing was recorded."""
        return str(self._clock.get("coarse") or "")

    @property
    def _clock(self) -> dict[str, Any]:
        clock = (self.sysstate or {}).get("clock") if isinstance(self.sysstate, dict) else None
        return clock if isinstance(clock, dict) else {}


def _nested() -> dict[tuple[int, int], dict[int, dict[int, list[float]]]]:
    return defaultdict(lambda: defaultdict(dict))


@dataclass
class Samples:
    """Every sample of a dataset as parallel arrays sorted by (run, metric, seq), and its
    segments: the runs of equal (run, metric), one per run and metric."""

    run: np.ndarray  # int64, per sample
    metric: np.ndarray  # int64, per sample
    value: np.ndarray  # float64, per sample

    def __post_init__(self) -> None:
        n = len(self.value)
        if n:
            change = (self.run[1:] != self.run[:-1]) | (self.metric[1:] != self.metric[:-1])
            self.start = np.concatenate(([0], np.flatnonzero(change) + 1))
        else:
            self.start = np.zeros(0, dtype=np.int64)
        self.length = np.diff(np.append(self.start, n))
        self.seg_run = self.run[self.start]
        self.seg_metric = self.metric[self.start]

    @classmethod
    def from_nested(cls, values: dict[tuple[int, int], dict[int, dict[int, Any]]]) -> Samples:
        rows = []
        for (_job, metric_id), per_build in values.items():
            for per_run in per_build.values():
                for run_id, samples in per_run.items():
                    rows.append((run_id, metric_id, samples))
        rows.sort(key=lambda r: (r[0], r[1]))
        lengths = [len(r[2]) for r in rows]
        return cls(
            np.repeat(np.array([r[0] for r in rows], dtype=np.int64), lengths),
            np.repeat(np.array([r[1] for r in rows], dtype=np.int64), lengths),
            np.array([float(v) for r in rows for v in r[2]], dtype=np.float64),
        )

    def segment(self, i: int) -> np.ndarray:
        return self.value[self.start[i] : self.start[i] + self.length[i]]

    def first(self) -> np.ndarray:
        """Per segment, its first sample."""
        return self.value[self.start]

    def last(self) -> np.ndarray:
        """Per segment, its last sample."""
        return self.value[self.start + self.length - 1]


@dataclass
class Dataset:
    """Samples of several kernels: ``values[(job_id, metric_id)][build_id][run_id]`` is the
    list of that run's samples in ``seq`` order. A loaded dataset holds them as arrays
    (:meth:`samples`) and builds ``values`` when it is first read."""

    kernels: list[Kernel]
    jobs: dict[int, JobRow] = field(default_factory=dict)
    metrics: dict[int, MetricRow] = field(default_factory=dict)
    runs: dict[int, RunRow] = field(default_factory=dict)
    _samples: Samples | None = field(default=None, repr=False)
    _values: dict | None = field(default=None, repr=False)

    @property
    def values(self) -> dict[tuple[int, int], dict[int, dict[int, list[float]]]]:
        if self._values is None:
            self._values = _nested()
            if self._samples is not None:
                self._fill(self._values, self._samples)
        return self._values

    def _fill(self, values: dict, smp: Samples) -> None:
        runs = self.runs
        lists = np.split(smp.value, smp.start[1:]) if len(smp.value) else []
        for run_id, metric_id, arr in zip(
            smp.seg_run.tolist(), smp.seg_metric.tolist(), lists, strict=True
        ):
            run = runs[run_id]
            values[(run.job_id, metric_id)][run.build_id][run_id] = arr.tolist()

    def samples(self) -> Samples:
        """The samples as arrays: as loaded, or from ``values`` for a dataset made by hand
        (a loaded dataset's ``values`` are a copy for reading; changing them changes
        nothing here)."""
        if self._samples is None:
            return Samples.from_nested(self.values)
        return self._samples

    def pooled_machines(self) -> dict[int, list[str]]:
        """Jobs whose runs come from more than one machine: job id -> machine names."""
        seen: dict[int, set[str]] = {}
        for r in self.runs.values():
            seen.setdefault(r.job_id, set()).add(r.machine)
        return {j: sorted(m) for j, m in seen.items() if len(m) > 1}

    def boxes(self) -> list[str]:
        """The boxes that ran these runs: a pool's boxes share a machine name and each run
        names the worker that ran it (``meta.worker``); a run without one ran on its
        machine."""
        return sorted({str((r.meta or {}).get("worker") or r.machine) for r in self.runs.values()})

    def mixed_clocks(self) -> dict[int, list[str]]:
        """Jobs whose runs were timed with more than one clocksource: job id -> clocksources.
        Never pooled, not even on request: a latency timed in 4 ms jiffies and one timed
        with the TSC differ by the clock, not by the kernel."""
        seen: dict[int, set[str]] = {}
        for r in self.runs.values():
            seen.setdefault(r.job_id, set()).add(r.clock)
        return {j: sorted(c) for j, c in seen.items() if len(c) > 1}

    def coarse_clocks(self) -> dict[tuple[int, int], str]:
        """(job id, build id) -> why that kernel's latencies in the job cannot be trusted (the
        first coarse run's reason); pairs whose every run had a fine clock are absent."""
        out: dict[tuple[int, int], str] = {}
        for r in sorted(self.runs.values(), key=lambda r: r.id):
            if r.coarse_clock:
                out.setdefault((r.job_id, r.build_id), r.coarse_clock)
        return out

    def runs_of(self, job_id: int, build_id: int) -> list[RunRow]:
        return sorted(
            (r for r in self.runs.values() if r.job_id == job_id and r.build_id == build_id),
            key=lambda r: (r.iteration, r.id),
        )


def resolve_kernel(conn: Connection, ref: str) -> Kernel:
    """A kernel by exact commit, exact name (mmtests run name), or unique commit prefix."""
    rows = _rows(
        conn,
        f"SELECT {kernelrefs.COLUMNS} FROM kernel_build "
        "WHERE commit = %(r)s OR name = %(r)s OR commit LIKE %(p)s ORDER BY id",
        {"r": ref, "p": kernelrefs.prefix_pattern(ref)},
    )
    return Kernel(*kernelrefs.pick(ref, rows))


def resolve_kernels(conn: Connection, refs: list[str]) -> list[Kernel]:
    return [resolve_kernel(conn, r) for r in refs]


def kernels_by_id(conn: Connection, build_ids: list[int]) -> list[Kernel]:
    """The kernels of ``build_ids`` in that order (ids not stored are left out)."""
    rows = _rows(
        conn,
        "SELECT id, commit, name, config_name, compiler FROM kernel_build WHERE id = ANY(%(ids)s)",
        {"ids": list(build_ids)},
    )
    by_id = {r[0]: Kernel(*r) for r in rows}
    return [by_id[i] for i in build_ids if i in by_id]


def load(
    conn: Connection,
    kernels: list[Kernel],
    *,
    suite: str | None = None,
    machine: str | None = None,
    statuses: tuple[str, ...] = ("done",),
    metrics: Callable[[str], bool] | None = None,
    suite_source: str | None = None,
) -> Dataset:
    """Every sample of the given kernels' runs (optionally of one suite, one machine, one
    suite source: upstream, or builtin meaning every job that is not upstream; and only of
    the metrics whose name ``metrics`` accepts)."""
    ds = Dataset(kernels=kernels)
    ids = [k.id for k in kernels]
    if not ids:
        return ds
    params: dict[str, Any] = {"ids": ids, "st": list(statuses)}
    where_sql = ""
    if suite:
        where_sql = " AND j.suite = %(suite)s"
        params["suite"] = suite
    if machine:
        where_sql += " AND m.name = %(machine)s"
        params["machine"] = machine
    if suite_source == "upstream":
        where_sql += " AND j.params->>'suite_source' = 'upstream'"
    elif suite_source == "builtin":
        where_sql += " AND coalesce(j.params->>'suite_source', '') <> 'upstream'"
    elif suite_source is not None:
        raise StackbenchError(f"unknown suite source '{suite_source}' (upstream or builtin)")
    for r in _rows(
        conn,
        "SELECT r.id, r.job_id, r.build_id, coalesce(m.name, ''), coalesce(m.kind, ''), "
        "r.iteration, r.status, r.sysstate, r.meta, j.suite, j.test, j.params, "
        "j.suite_version, j.runner, r.boot_id, r.boot_round FROM run r JOIN job j ON j.id = r.job_id "
        "LEFT JOIN machine m ON m.id = r.machine_id "
        f"WHERE r.build_id = ANY(%(ids)s) AND r.status = ANY(%(st)s){where_sql}",
        params,
    ):
        ds.runs[r[0]] = RunRow(*r[:9], boot_id=r[14], boot_round=r[15])
        ds.jobs.setdefault(r[1], JobRow(r[1], r[9], r[10], r[11], r[12], r[13]))
    if not ds.runs:
        return ds
    wanted = None
    if metrics is not None:
        every = _json_rows(conn, "json_build_array(id, name)", "metric", None)
        wanted = [mid for mid, name in every if metrics(name)]
    ds._samples = smp = read_samples(conn, sorted(ds.runs), wanted)
    metric_ids = _distinct(smp.seg_metric)
    cols = "json_build_array(id, name, unit, higher_is_better, kind)"
    for m in _json_rows(conn, cols, "metric WHERE id = ANY(%(ids)s)", {"ids": metric_ids}):
        ds.metrics[m[0]] = MetricRow(*m)
    return ds


def _distinct(values: np.ndarray) -> list[int]:
    """The sorted distinct values. Not np.unique: its hash-table path imports numpy.ma on
    first use, 10 ms of a cold ``stackbench compare``."""
    if not len(values):
        return []
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))].tolist()


def _json_rows(conn: Connection, row: str, source: str, params: dict | None) -> list[list]:
    """``SELECT row FROM source`` as one JSON value: thousands of metric rows cost a
    client a conversion per cell, one JSON document costs one parse (ints, strings,
    booleans and NULLs come back as the same Python values)."""
    sql = f"SELECT coalesce(json_agg({row}), '[]'::json)::text FROM {source}"
    text = _rows(conn, sql, params)[0][0]
    return json.loads(text)


def read_samples(
    conn: Connection, run_ids: list[int], metric_ids: list[int] | None = None
) -> Samples:
    """The samples of ``run_ids`` (optionally only of ``metric_ids``) in (run, metric, seq)
    order, read straight into numpy: no Python object per sample. Whole large runs come
    from run_samples (one packed row per run, written with it); a subset of metrics, and
    runs without such a row (small ones), from sample, one aggregated row per run."""
    empty = np.zeros(0, dtype=np.int64)
    if not run_ids:
        return Samples(empty, empty, np.zeros(0))
    raw = _raw(conn)
    if metric_ids is not None:
        return _read_rows(raw, run_ids, metric_ids)
    packed = _read_packed(raw, run_ids)
    rest = sorted(set(run_ids) - set(packed))
    if rest:
        for run_id, mids, vals in _per_run(_read_rows(raw, rest, None)):
            packed[run_id] = (mids, vals)
    runs, metrics, values = [], [], []
    for run_id in sorted(packed):
        mids, vals = packed[run_id]
        runs.append(np.full(len(mids), run_id, dtype=np.int64))
        metrics.append(mids)
        values.append(vals)
    return _samples(runs, metrics, values)


def _read_rows(raw: Any, run_ids: list[int], metric_ids: list[int] | None) -> Samples:
    """read_samples from the sample table: one aggregated row per run."""
    where = "run_id = ANY(%s)"
    params: list[Any] = [pgbinary.Int4Array.of(run_ids)]
    if metric_ids is not None:
        where += " AND metric_id = ANY(%s)"
        params.append(pgbinary.Int4Array.of(metric_ids))
    runs, metrics, values = [], [], []
    with raw.cursor(binary=True) as cur:
        pgbinary.register(cur)
        pgbinary.register_numpy_loaders(cur)
        for setting in _PLAN:
            cur.execute(setting)
        cur.execute(_SAMPLES_SQL.format(where=where), params)
        for run_id, mids, vals in cur:
            _check_order(run_id, mids)
            runs.append(np.full(len(mids), run_id, dtype=np.int64))
            metrics.append(mids)
            values.append(vals)
    return _samples(runs, metrics, values)


_PACKED_SQL = 'SELECT run_id, metric_ids, counts, "values" FROM run_samples WHERE run_id = ANY(%s)'


def _read_packed(raw: Any, run_ids: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Run id -> (metric id per sample, values) of the runs that have a run_samples row."""
    with raw.cursor(binary=True) as cur:
        pgbinary.register(cur)
        cur.execute(_PACKED_SQL, [pgbinary.Int4Array.of(run_ids)])
        wire = list(cur)
    # big-endian int4s and float8s, as migration 0005 and ingest pack them
    return {
        run_id: (
            np.repeat(np.frombuffer(mids, ">i4").astype(np.int64), np.frombuffer(counts, ">i4")),
            np.frombuffer(values, ">f8").astype(np.float64),
        )
        for run_id, mids, counts, values in wire
    }


def _per_run(smp: Samples) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Samples as (run id, metric ids, values) per run."""
    if not len(smp.value):
        return []
    starts = np.concatenate(([0], np.flatnonzero(smp.run[1:] != smp.run[:-1]) + 1)).tolist()
    ends = [*starts[1:], len(smp.value)]
    return [
        (int(smp.run[a]), smp.metric[a:b], smp.value[a:b])
        for a, b in zip(starts, ends, strict=True)
    ]


# one plan, in order: the primary key's index scan feeds the aggregate in (run, metric, seq)
# order, which array_agg keeps; a parallel plan could merge partial arrays out of order, and
# JIT only costs time on a query this simple
_PLAN = ("SET LOCAL max_parallel_workers_per_gather = 0", "SET LOCAL jit = off")
_SAMPLES_SQL = (
    "SELECT run_id, array_agg(metric_id), array_agg(value) FROM ("
    "SELECT run_id, metric_id, coalesce(value, 'NaN'::float8) AS value FROM sample "
    "WHERE {where} ORDER BY run_id, metric_id, seq) s GROUP BY run_id ORDER BY run_id"
)


def _check_order(run_id: int, mids: np.ndarray) -> None:
    if len(mids) > 1 and (np.diff(mids) < 0).any():  # never seen; be sure anyway
        raise RuntimeError(f"samples of run {run_id} arrived out of order")


def _samples(runs: list, metrics: list, values: list) -> Samples:
    if not runs:
        empty = np.zeros(0, dtype=np.int64)
        return Samples(empty, empty, np.zeros(0))
    return Samples(np.concatenate(runs), np.concatenate(metrics), np.concatenate(values))
