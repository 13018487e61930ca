"""The binary wire forms must reach the server as exactly the numbers that were sent:
a byte out of place in the strided encoding would shift every value after it."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text

from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import pgbinary

EDGE_FLOATS = [0.0, -0.0, 1.5, -2.25e-300, 1.7976931348623157e308, 5e-324, math.inf, -math.inf]
EDGE_INTS = [0, 1, -1, 2**31 - 1, -(2**31), 256, 65535]


def _roundtrip(eng, sql: str, *params):
    with eng.connect() as conn:
        raw = conn.connection.driver_connection
        pgbinary.register(raw)
        return raw.execute(sql, params).fetchone()[0]


@pytest.mark.parametrize("values", [[], [7.0], EDGE_FLOATS, [i / 7 for i in range(5000)]])
def test_float8_array_reaches_the_server_bit_exact(eng, values):
    got = _roundtrip(eng, "SELECT %b::float8[]", pgbinary.Float8Array.of(values))
    assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in values]
    assert got == values


def test_float8_array_keeps_nan(eng):
    got = _roundtrip(eng, "SELECT %b::float8[]", pgbinary.Float8Array.of([1.0, math.nan]))
    assert got[0] == 1.0 and math.isnan(got[1])


@pytest.mark.parametrize("values", [[], [42], EDGE_INTS])
def test_int4_array_reaches_the_server_exact(eng, values):
    assert _roundtrip(eng, "SELECT %b::int4[]", pgbinary.Int4Array.of(values)) == values


def test_int4_array_rejects_values_outside_int4():
    with pytest.raises(OverflowError):
        pgbinary.Int4Array.of([2**31])


def test_copy_rows_store_the_given_columns(eng):
    mids, seqs, values = [3, 3, 9, 2**31 - 1], [0, 1, 0, 7], [1.25, -0.0, 1e300, 5e-324]
    with eng.begin() as conn:
        raw = conn.connection.driver_connection
        sql = "COPY sample (run_id, metric_id, seq, value) FROM STDIN (FORMAT BINARY)"
        with raw.cursor() as cur, cur.copy(sql) as cp:
            cp.write(pgbinary.COPY_HEADER)
            cp.write(pgbinary.copy_rows(77, mids, seqs, values))
            cp.write(pgbinary.COPY_TRAILER)
    with eng.connect() as conn:
        rows = conn.execute(
            text("SELECT run_id, metric_id, seq, value FROM sample ORDER BY metric_id, seq")
        ).all()
    assert [tuple(r) for r in rows] == [
        (77, m, s, v) for m, s, v in zip(mids, seqs, values, strict=True)
    ]


def _run(samples, iteration=0):
    return ig.RunData(
        job=ig.JobSpec("bench", "t", {"t": 1}),
        kernel=ig.KernelSpec("c" * 40),
        machine=ig.MachineSpec("vm"),
        iteration=iteration,
        samples=samples,
    )


def _stored(eng) -> dict[str, list[float]]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT m.name, s.value FROM sample s JOIN metric m ON m.id = s.metric_id "
                "ORDER BY m.name, s.seq"
            )
        ).all()
    out: dict[str, list[float]] = {}
    for name, value in rows:
        out.setdefault(name, []).append(value)
    return out


@pytest.mark.parametrize("threshold", [0, 10_000], ids=["copy", "single-statement"])
def test_mixed_runs_store_every_value_in_order(eng, monkeypatch, threshold):
    """Scalars, empty metrics, integer values and long series in one run, through both
    paths: each metric keeps its own values, in their order."""
    monkeypatch.setattr(ig, "COPY_THRESHOLD", threshold)
    samples = {
        "a.scalar": [3],
        "b.empty": [],
        "c.series": [float(i) * 0.5 for i in range(3000)],
        "d.edges": EDGE_FLOATS,
        "e.scalar": [-1.0],
    }
    res = ig.ingest(eng, [_run(samples)])
    assert res.samples == 1 + 3000 + len(EDGE_FLOATS) + 1
    want = {k: [float(x) for x in v] for k, v in samples.items() if v}
    assert _stored(eng) == want


def test_scalar_only_runs_keep_each_value_with_its_metric(eng):
    samples = {f"m.{i:03d}": [float(1000 - i)] for i in range(300)}
    ig.ingest(eng, [_run(samples)])
    assert _stored(eng) == samples


def test_a_non_numeric_sample_is_refused_before_anything_is_written(eng):
    with pytest.raises(TypeError):
        ig.ingest(eng, [_run({"a.ok": [1.0], "b.bad": ["fast"]})])
    assert ig.count(eng, "run") == 0 and ig.count(eng, "sample") == 0


def _read_back(eng, sql: str):
    with eng.connect() as conn:
        raw = conn.connection.driver_connection
        with raw.cursor(binary=True) as cur:
            pgbinary.register_numpy_loaders(cur)
            return cur.execute(sql).fetchone()[0]


@pytest.mark.parametrize("values", [[], [7.0], EDGE_FLOATS, [i / 7 for i in range(5000)]])
def test_float8_array_comes_back_as_numpy_bit_exact(eng, values):
    literal = "ARRAY[" + ",".join(f"'{v!r}'::float8" for v in values) + "]::float8[]"
    got = _read_back(eng, f"SELECT {literal}")
    assert got.dtype.name == "float64"
    assert got.tolist() == values
    assert [math.copysign(1, v) for v in got.tolist()] == [math.copysign(1, v) for v in values]


def test_int4_array_comes_back_as_numpy(eng):
    got = _read_back(eng, f"SELECT ARRAY[{','.join(map(str, EDGE_INTS))}]::int4[]")
    assert got.dtype.name == "int64" and got.tolist() == EDGE_INTS


def test_array_with_nulls_is_refused(eng):
    # samples are read with NULL values turned into NaN; a NULL reaching here is a bug
    with pytest.raises(ValueError, match="without NULLs"):
        _read_back(eng, "SELECT ARRAY[1.0, NULL]::float8[]")


def test_samples_arrive_in_run_metric_seq_order(eng):
    from stackbench.resultsdb import query

    job = ig.JobSpec("s", "t", {})
    runs = [
        ig.RunData(
            job,
            ig.KernelSpec("a" * 40),
            ig.MachineSpec("m"),
            it,
            {"s.b": [3.0, 1.0, 2.0], "s.a": [float(it)], "s.c": [9.0, 8.0]},
        )
        for it in range(3)
    ]
    ig.ingest(eng, runs)
    with eng.connect() as conn:
        (k,) = query.resolve_kernels(conn, ["a" * 40])
        ds = query.load(conn, [k])
    smp = ds.samples()
    assert len(smp.value) == 3 * 6
    names = {m.id: m.name for m in ds.metrics.values()}
    per_run: dict[int, list[tuple[str, float]]] = {}
    for r, m, v in zip(smp.run.tolist(), smp.metric.tolist(), smp.value.tolist(), strict=True):
        per_run.setdefault(r, []).append((names[m], v))
    for it, (_run, got) in enumerate(sorted(per_run.items())):
        # samples of one metric keep their seq order; metrics follow their ids
        assert [v for n, v in got if n == "s.b"] == [3.0, 1.0, 2.0]
        assert [v for n, v in got if n == "s.c"] == [9.0, 8.0]
        assert [v for n, v in got if n == "s.a"] == [float(it)]
    assert sorted(ds.values) == sorted((j, m) for j in ds.jobs for m in names)
