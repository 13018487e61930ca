from __future__ import annotations

import pytest
from sqlalchemy import text

from stackbench.resultsdb import ingest as ig


def _run(iteration=0, values=(1.0, 2.0, 3.0), commit="a" * 40):
    return ig.RunData(
        job=ig.JobSpec("thpscale", "thpscale", {"test": "thpscale", "threads": 1}),
        kernel=ig.KernelSpec(commit, name="baseline"),
        machine=ig.MachineSpec("qemu-vm", cpus=2),
        iteration=iteration,
        samples={"thpscale.fault-huge-1": list(values), "thpscale.Percentage huge-1": [99.0]},
        logs={"threads-1.log": b"fault 0 huge 12 1.0 1\n"},
    )


def test_ingest_stores_every_sample_and_metric_direction(eng):
    res = ig.ingest(eng, [_run(0), _run(1, (4.0, 5.0))])
    assert len(res.inserted) == 2 and res.samples == 7
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT m.name, m.unit, m.higher_is_better, s.seq, s.value FROM sample s "
                "JOIN metric m ON m.id = s.metric_id JOIN run r ON r.id = s.run_id "
                "WHERE r.iteration = 0 ORDER BY m.name, s.seq"
            )
        ).all()
    assert [(r.name, r.seq, r.value) for r in rows] == [
        ("thpscale.Percentage huge-1", 0, 99.0),
        ("thpscale.fault-huge-1", 0, 1.0),
        ("thpscale.fault-huge-1", 1, 2.0),
        ("thpscale.fault-huge-1", 2, 3.0),
    ]
    directions = {r.name: (r.unit, r.higher_is_better) for r in rows}
    assert directions["thpscale.fault-huge-1"] == ("usecs", False)
    assert directions["thpscale.Percentage huge-1"] == ("%", True)


def test_reimport_changes_nothing(eng):
    ig.ingest(eng, [_run(0)])
    before = {t: ig.count(eng, t) for t in ("run", "sample", "kernel_build", "job", "run_log")}
    res = ig.ingest(eng, [_run(0)])
    assert res.inserted == [] and res.skipped == 1
    assert {t: ig.count(eng, t) for t in before} == before


@pytest.mark.parametrize("path", ["copy", "single-statement"])
def test_failed_run_ingest_leaves_nothing(eng, monkeypatch, path):
    def boom(*a, **k):
        raise RuntimeError("connection lost mid-run")

    if path == "copy":
        # large runs stream their samples with COPY
        monkeypatch.setattr(ig, "COPY_THRESHOLD", 0)
        monkeypatch.setattr(ig, "_copy_samples", boom)
    else:
        # small runs go in as one statement each; fail before any of them is sent
        monkeypatch.setattr(ig, "insert", boom)
    with pytest.raises(RuntimeError):
        ig.ingest(eng, [_run(0)])
    assert ig.count(eng, "run") == 0 and ig.count(eng, "sample") == 0


def test_database_error_in_a_pipelined_batch_keeps_earlier_runs_whole(eng, monkeypatch):
    """Small runs are pipelined, each in its own transaction: when the server rejects the
    second run, the first is stored whole, nothing of the second or third is, and importing
    again completes the set."""
    import psycopg

    real = ig._run_params
    calls = []

    def bad_second(data, *a):
        calls.append(1)
        params = real(data, *a)
        if len(calls) == 2:  # a status too long for its column: the server refuses the run
            params = (*params[:4], "x" * 100, *params[5:])
        return params

    monkeypatch.setattr(ig, "_run_params", bad_second)
    with pytest.raises(psycopg.Error):
        ig.ingest(eng, [_run(0), _run(1), _run(2)])
    assert ig.count(eng, "run") == 1 and ig.count(eng, "sample") == 4
    assert ig.count(eng, "run_log") == 1
    monkeypatch.setattr(ig, "_run_params", real)
    res = ig.ingest(eng, [_run(0), _run(1), _run(2)])
    assert res.skipped == 1 and len(res.inserted) == 2
    assert ig.count(eng, "run") == 3 and ig.count(eng, "sample") == 12


def test_large_runs_go_through_copy(eng, monkeypatch):
    monkeypatch.setattr(ig, "COPY_THRESHOLD", 2)
    calls = []
    real = ig._copy_samples
    monkeypatch.setattr(ig, "_copy_samples", lambda *a: calls.append(1) or real(*a))
    ig.ingest(eng, [_run(0)])
    assert calls == [1] and ig.count(eng, "sample") == 4


def test_ingest_survives_a_database_restart_between_runs(pg_cluster, eng):
    """A server restart between two ingests (e.g. during a long import) loses nothing: the
    pool reconnects and the re-run import skips what was already stored."""
    ig.ingest(eng, [_run(0)])
    pg_cluster.stop()
    pg_cluster.start()
    res = ig.ingest(eng, [_run(0), _run(1)])
    assert res.skipped == 1 and len(res.inserted) == 1
    assert ig.count(eng, "run") == 2 and ig.count(eng, "sample") == 8


def test_migrations_match_the_models(eng):
    """Every model change has its migration: autogenerate finds nothing to add."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from stackbench.resultsdb.models import Base

    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def _runs_by_iteration(eng) -> dict[int, int]:
    """Stored runs: iteration -> number of its samples."""
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.iteration, count(s.value) FROM run r "
                "LEFT JOIN sample s ON s.run_id = r.id GROUP BY r.iteration"
            )
        ).all()
    return dict(rows)


def test_parallel_ingest_stores_every_run_in_input_order(eng, monkeypatch):
    monkeypatch.setattr(ig, "PIPELINE_BATCH", 3)
    monkeypatch.setattr(ig, "COPY_THRESHOLD", 4)  # every third run streams through COPY
    runs = [_run(i, values=(1.0, 2.0, 3.0, float(i)) if i % 3 else (1.0,)) for i in range(20)]
    res = ig.ingest(eng, runs, workers=2)
    assert len(res.inserted) == 20 and res.skipped == 0
    with eng.connect() as conn:
        by_id = dict(conn.execute(text("SELECT id, iteration FROM run")).all())
    assert [by_id[rid] for rid in res.inserted] == list(range(20))
    assert _runs_by_iteration(eng) == {i: 5 if i % 3 else 2 for i in range(20)}
    again = ig.ingest(eng, runs, workers=2)
    assert again.inserted == [] and again.skipped == 20


def test_parallel_ingest_failure_leaves_each_run_whole_or_absent(eng, monkeypatch):
    """One connection's run is refused by the server: the error reaches the caller, no run
    is stored in part, and importing again stores the rest."""
    import psycopg

    monkeypatch.setattr(ig, "PIPELINE_BATCH", 2)
    real = ig._run_params

    def bad_seventh(data, *a):
        params = real(data, *a)
        if data.iteration == 7:
            params = (*params[:4], "x" * 100, *params[5:])
        return params

    monkeypatch.setattr(ig, "_run_params", bad_seventh)
    runs = [_run(i) for i in range(12)]
    with pytest.raises(psycopg.Error):
        ig.ingest(eng, runs, workers=2)
    stored = _runs_by_iteration(eng)
    assert 7 not in stored and 6 in stored  # 6 precedes 7 in the same pipelined batch
    assert set(stored.values()) == {4}
    monkeypatch.setattr(ig, "_run_params", real)
    res = ig.ingest(eng, runs, workers=2)
    assert res.skipped == len(stored) and len(res.inserted) == 12 - len(stored)
    assert _runs_by_iteration(eng) == {i: 4 for i in range(12)}


def test_large_imports_use_several_connections(eng, monkeypatch):
    monkeypatch.setattr(ig, "PARALLEL_MIN_SAMPLES", 10)
    monkeypatch.setattr(ig, "PIPELINE_BATCH", 1)
    lanes = set()
    real = ig._store_pipelined

    def spy(conn, *a):
        lanes.add(conn.connection.driver_connection.info.backend_pid)
        return real(conn, *a)

    monkeypatch.setattr(ig, "_store_pipelined", spy)
    ig.ingest(eng, [_run(i) for i in range(6)])
    assert len(lanes) == ig.WORKERS


def test_a_boot_that_stores_runs_sets_its_machines_last_seen(eng):
    """Every path that stores a boot's runs (the in-process pipeline, a worker's upload into
    the database and the API: ingest) says when the machine was last seen; imported results
    do not (they come from another time)."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from stackbench.web import create_app

    def seen(name):
        with eng.connect() as conn:
            return conn.execute(
                text("SELECT last_seen FROM machine WHERE name = :n"), {"n": name}
            ).scalar_one()

    qemu = ig.MachineSpec("qemu-tcg-2cpu@host", kind="qemu", cpus=2)
    ig.ingest(eng, [replace(_run(0), machine=qemu), _run(1)])
    first = seen(qemu.name)
    assert first is not None and datetime.now(UTC) - first < timedelta(minutes=1)
    assert seen("qemu-vm") is None  # kind "import"
    with eng.begin() as conn:  # as if the machine was last heard of an hour ago
        conn.execute(
            text("UPDATE machine SET last_seen = now() - interval '1 hour' WHERE name = :n"),
            {"n": qemu.name},
        )
    ig.ingest(eng, [replace(_run(2), machine=qemu)])
    assert seen(qemu.name) > first
    app = create_app({"ENGINE": eng, "SECRET_KEY": "test", "TESTING": True})
    page = app.test_client().get("/machines").get_data(as_text=True)
    row = next(r for r in page.split("<tr>") if qemu.name in r)
    assert "s ago" in row, row


def test_ingest_gives_each_runs_id_in_order_and_none_for_a_stored_key(eng):
    """The API answers each uploaded run with its id and whether it is new: ingest's ids
    follow the runs as given, None where the key was stored before."""
    first = ig.ingest(eng, [_run(0), _run(1)])
    assert first.ids == first.inserted and len(set(first.ids)) == 2
    again = ig.ingest(eng, [_run(2), _run(1), _run(3)])
    assert again.ids[1] is None and again.skipped == 1
    assert [again.ids[0], again.ids[2]] == again.inserted
