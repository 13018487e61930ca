"""Metric directions come from one declared table in results-db, whatever door stores a run.

The rules used to be registered when ``jobs/benchmarks/collect.py`` or the mmtests importer was
imported, so a run first stored through ``POST /api/runs`` in a process that had not imported
them created ``stress-highalloc.latency-pass1`` as "higher is better". The upload here runs in
a fresh interpreter to prove nothing but the declared table is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import metrics

CHILD = r"""
import base64, json, sys
from stackbench.resultsdb import db
from stackbench.mail import accounts
from stackbench.web import create_app
from sqlalchemy.orm import Session

eng = db.engine()
with Session(eng) as s:
    accounts.create_user(s, "w1", password="pw-worker-1", worker=True)
    s.commit()
    tok = accounts.create_token(s, accounts.find_user(s, "w1"), "test")
    s.commit()
app = create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})
body = {
    "job": {"suite": "stress-highalloc", "test": "stress-highalloc", "params": {},
            "suite_version": "v1", "runner": "builtin"},
    "kernel": {"commit": "c" * 40, "name": "v6.1-test"},
    "machine": {"name": "qemu-7", "kind": "qemu", "cpus": 2, "memory_mb": 2048},
    "iteration": 0,
    "samples": {"stress-highalloc.latency-pass1": [120.0, 130.0],
                "stress-highalloc.pass1": [80.0],
                "thpscale.uncertain-1": [1.0]},
    "logs": {"console": base64.b64encode(b"booted\n").decode()},
    "idempotency_key": "metric-rules-1",
}
r = app.test_client().post("/api/runs", json=body, headers={"Authorization": "Bearer " + tok})
print(json.dumps({"status": r.status_code,
                  "loaded": sorted(m for m in sys.modules if m in (
                      "stackbench.jobs.benchmarks.collect", "stackbench.jobs.benchmarks.importers.mmtests"))}))
"""


def test_upload_in_fresh_process_gets_declared_directions(eng, db_url):
    from stackbench.resultsdb.models import Metric

    env = {**os.environ, "STACKBENCH_DATABASE_URL": db_url}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"status": 201, "loaded": []}
    with Session(eng) as s:
        rows = {m.name: (m.unit, m.higher_is_better, m.kind) for m in s.scalars(select(Metric))}
    assert rows == {
        "stress-highalloc.latency-pass1": ("ns", False, "latency"),
        "stress-highalloc.pass1": ("%", True, "percent"),
        "thpscale.uncertain-1": ("%", False, "percent"),
    }


def test_precise_rules_win_over_generic_ones():
    assert metrics.info("stress-highalloc.latency-pass3").higher_is_better is False
    assert metrics.info("stress-highalloc.allocated-pass2") == metrics.MetricInfo(
        "count", True, "count"
    )
    assert metrics.info("thpscale.local-huge-4").unit == "%"
    assert metrics.info("thpscale.local").kind == "count"
    assert metrics.info("vm-scalability.throughput").higher_is_better is True
    assert metrics.info("no.such.thing") == metrics.UNKNOWN


def test_worker_upload_in_fresh_process_gets_declared_directions(eng, db_url, tmp_path):
    """``stackbench worker upload`` without a server stores straight into the database."""
    from stackbench.jobs.executors.buildbot.results import to_payload, write_payload
    from stackbench.resultsdb.models import Metric
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    run = RunData(
        job=JobSpec(suite="stress-highalloc", test="stress-highalloc", params={}),
        kernel=KernelSpec(commit="d" * 40, name="v6.1-test"),
        machine=MachineSpec(name="qemu-8", kind="qemu"),
        iteration=0,
        samples={"stress-highalloc.latency-pass2": [50.0, 60.0]},
    )
    write_payload(tmp_path / "results", "run-000", to_payload(run))
    env = {**os.environ, "STACKBENCH_DATABASE_URL": db_url}
    env.pop("STACKBENCH_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "stackbench", "worker", "upload", "--results", "results"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "uploaded 1 run(s)" in out.stdout
    with Session(eng) as s:
        m = s.scalars(select(Metric)).one()
    assert (m.name, m.unit, m.higher_is_better, m.kind) == (
        "stress-highalloc.latency-pass2",
        "ns",
        False,
        "latency",
    )
