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


def test_failed_run_ingest_leaves_nothing(eng, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("connection lost during COPY")

    monkeypatch.setattr(ig, "_copy_samples", boom)
    with pytest.raises(RuntimeError):
        ig.ingest(eng, [_run(0)])
    assert ig.count(eng, "run") == 0 and ig.count(eng, "sample") == 0
