"""Buildbot with nothing replaced: the master hands a real commit to a worker, which builds
the kernel from Debian's linux-source-6.1 (reused from the shared test cache when it is
already built), ships it through the master to the benchmark builder, boots it under QEMU,
runs a small vm-scalability job and posts the samples to the web API.

The fan-out logic, locks and lost workers are covered with dry kernels in
test_buildbot_fanout.py; this test proves the real build and bench commands work when
Buildbot runs them (their own environment, working directory and artifact transfer).
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from helpers.kernelkit import base_kernel  # noqa: E402
from helpers.lifecycle import wait_for  # noqa: E402
from test_buildbot_fanout import connected, start_web, start_worker  # noqa: E402

from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402

JOB = "vm-scalability[test=anon-w-seq,mem_fraction=0.05]"
SUCCESS = 0

pytestmark = pytest.mark.slow


def test_real_kernel_is_built_booted_and_measured_through_buildbot(eng, tmp_path, monkeypatch):
    _repo, built = base_kernel(monkeypatch)  # the shared cache, so the build step reuses it
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    worker = {"name": "qemu-1", "kind": "qemu", "cpus": 2, "memory_mb": 1024}
    cfg = services.create_master(
        base / "master",
        [worker],
        extra={
            "jobs": [JOB],
            "runs": 1,
            "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}],
        },
    )
    started = []
    try:
        services.start_master(base / "master")
        started.append((services.stop_master, base / "master"))
        wb = start_worker(base, cfg, worker["name"], web_url)
        started.append((services.stop_worker, wb))
        master = client.embedded_master_at(base / "master")
        wait_for("the worker to connect", lambda: connected(master) == ["qemu-1"], timeout=60)

        sub = client.submit(master, commits=[built.commit])
        assert sub["commits"] == [built.commit]
        wait_for(
            "the build and the benchmark to finish",
            lambda: (
                len(master.get("buildrequests")["buildrequests"]) == 3
                and not master.get("buildrequests?complete=false")["buildrequests"]
            ),
            timeout=900,
            every=2,
        )
        builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
        results = {builders[b["builderid"]]: b["results"] for b in master.get("builds")["builds"]}
        assert {"series", "bench-qemu"} < set(results) and len(results) == 3, results
        assert set(results.values()) == {SUCCESS}, results
    finally:
        for stop, path in reversed(started):
            stop(path)
        server.shutdown()

    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT k.commit, k.compiler, r.status, m.name, count(s.value) "
                "FROM run r JOIN kernel_build k ON k.id = r.build_id "
                "JOIN machine m ON m.id = r.machine_id JOIN sample s ON s.run_id = r.id "
                "GROUP BY k.commit, k.compiler, r.status, m.name"
            )
        ).all()
        throughput = (
            conn.execute(
                text(
                    "SELECT s.value FROM sample s JOIN metric mt ON mt.id = s.metric_id "
                    "WHERE mt.name = 'vm-scalability.throughput'"
                )
            )
            .scalars()
            .all()
        )
    assert len(rows) == 1
    commit, compiler, status, machine, n_samples = rows[0]
    assert (commit, status, machine) == (built.commit, "done", "qemu-1")
    assert compiler.startswith("gcc") and n_samples > 10
    assert len(throughput) == 1 and throughput[0] > 0
