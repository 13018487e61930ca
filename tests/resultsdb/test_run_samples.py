"""run_samples (migration 0005): a large run's samples again in one row, read by whole-run
queries. It must give exactly what the sample table gives, for a mix of packed and
unpacked runs, and go with its run."""

from __future__ import annotations

import numpy as np
from sqlalchemy import text

from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import query


def _run(iteration: int, big: bool) -> ig.RunData:
    rng = np.random.default_rng(iteration)
    n = ig.COPY_THRESHOLD + 1000 if big else 3
    samples = {
        "thpscale.fault-huge-1": rng.lognormal(7, 0.5, n).tolist(),
        "thpscale.fault-base-1": [float("nan"), *rng.lognormal(5, 0.5, n - 1).tolist()],
        "thpscale.Percentage huge-1": [99.0],
        "thpscale.empty": [],
    }
    return ig.RunData(
        job=ig.JobSpec("thpscale", "thpscale", {"test": "thpscale", "threads": 1}),
        kernel=ig.KernelSpec("b" * 40, name="base"),
        machine=ig.MachineSpec("qemu-vm", cpus=2),
        iteration=iteration,
        samples=samples,
    )


def _same(a: query.Samples, b: query.Samples) -> None:
    assert a.run.tolist() == b.run.tolist()
    assert a.metric.tolist() == b.metric.tolist()
    np.testing.assert_array_equal(a.value, b.value)  # NaN where NaN, bit for bit elsewhere


def test_whole_runs_read_as_the_sample_table_gives_them(eng):
    res = ig.ingest(eng, [_run(0, True), _run(1, False), _run(2, True)], workers=1)
    ids = sorted(res.inserted)
    assert ig.count(eng, "run_samples") == 2  # only the COPYed (large) runs
    with eng.connect() as conn:
        raw = query._raw(conn)
        mixed = query.read_samples(raw, ids)
        rows = query._read_rows(raw, ids, None)
        assert len(rows.value) == 2 * (2 * (ig.COPY_THRESHOLD + 1000) + 1) + 7
        _same(mixed, rows)
        # a large run stored before its packed row existed is read from sample alone
        conn.execute(text("DELETE FROM run_samples WHERE run_id = :r"), {"r": ids[0]})
        conn.commit()
        _same(query.read_samples(raw, ids), rows)


def test_the_migration_packs_what_ingest_packs(eng):
    res = ig.ingest(eng, [_run(0, True), _run(1, False)], workers=1)
    packed = 'SELECT run_id, metric_ids, counts, "values" FROM run_samples ORDER BY run_id'
    with eng.begin() as conn:
        by_ingest = conn.execute(text(packed)).all()
        conn.execute(text("DELETE FROM run_samples"))
        from importlib import import_module

        from alembic.migration import MigrationContext
        from alembic.operations import Operations

        mig = import_module("stackbench.resultsdb.migrations.versions.0005_run_samples")
        with Operations.context(MigrationContext.configure(conn)):
            conn.execute(text("DROP TABLE run_samples"))
            mig.upgrade()
        assert conn.execute(text(packed)).all() == by_ingest
    assert len(by_ingest) == 1 and by_ingest[0][0] == min(res.inserted)


def test_deleted_runs_take_their_row(eng):
    res = ig.ingest(eng, [_run(0, True), _run(1, False)], workers=1)
    with eng.begin() as conn:
        ig.delete_runs(conn, res.inserted)
    assert ig.count(eng, "run_samples") == 0 and ig.count(eng, "sample") == 0
