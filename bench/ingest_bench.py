"""Ingest throughput: 1,000,000 samples through results-db's bulk ingest.

Shape: many runs x many stats with one sample each (LKP stats.json style: 2,000 runs x 300
stats) plus latency-style runs with many samples per metric (40 runs x 10 metrics x 1,000
samples). Uses a fresh embedded PostgreSQL cluster in a temporary STACKBENCH_HOME, or
STACKBENCH_DATABASE_URL if set (its rows are deleted again afterwards).

    .venv/bin/python bench/ingest_bench.py [--samples N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

FLOOR = 200_000  # samples per second
SUITE = "bench-ingest"


def make_runs(total: int):
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    rnd = random.Random(1)
    machine = MachineSpec("bench-vm", cpus=8)
    kernels = [KernelSpec(f"{i:040x}", name=f"bench-k{i}", compiler="gcc-13") for i in range(10)]
    stats_job = JobSpec(SUITE, "anon-w-seq-mt", {"test": "anon-w-seq-mt", "size": "8T"})
    lat_job = JobSpec(SUITE, "thpscale", {"test": "thpscale"})
    stat_names = [f"{SUITE}.throughput"] + [f"proc-vmstat.bench_{i}" for i in range(299)]
    lat_names = [f"{SUITE}.fault-huge-{t}" for t in range(10)]

    runs = []
    n_stats_runs = int(total * 0.6) // len(stat_names)
    for i in range(n_stats_runs):
        samples = {name: [rnd.uniform(1e3, 1e7)] for name in stat_names}
        runs.append(RunData(stats_job, kernels[i % 10], machine, i // 10, samples, source="bench"))
    per_lat_run = len(lat_names) * 1000
    n_lat_runs = (total - n_stats_runs * len(stat_names)) // per_lat_run
    for i in range(n_lat_runs):
        samples = {name: [rnd.expovariate(1 / 50.0) for _ in range(1000)] for name in lat_names}
        runs.append(RunData(lat_job, kernels[i % 10], machine, i // 10, samples, source="bench"))
    return runs


def timed_ingest(eng, runs) -> tuple[int, float, list[int]]:
    from stackbench.resultsdb import ingest

    n = sum(len(v) for r in runs for v in r.samples.values())
    t0 = time.perf_counter()
    res = ingest.ingest(eng, runs)
    took = time.perf_counter() - t0
    assert res.samples == n and not res.skipped
    return n, took, res.inserted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    args = ap.parse_args()

    from benchdb import bench_database

    t0 = time.perf_counter()
    with bench_database() as bdb:
        eng = bdb.eng
        setup = time.perf_counter() - t0
        runs = make_runs(args.samples)
        print(f"database: {bdb.where} (ready in {setup:.1f} s)")
        total_n, total_t, inserted = 0, 0.0, []
        for label, part in (
            ("stats-style (1 sample/metric)", [r for r in runs if len(r.samples) > 10]),
            ("latency-style (1000 samples/metric)", [r for r in runs if len(r.samples) <= 10]),
        ):
            n, took, ids = timed_ingest(eng, part)
            total_n, total_t = total_n + n, total_t + took
            inserted += ids
            print(
                f"  {label}: {n:,} samples in {len(part):,} runs, {took:.2f} s, "
                f"{n / took:,.0f} samples/s"
            )
        rate = total_n / total_t
        print(f"ingested {total_n:,} samples in {len(runs):,} runs: {total_t:.2f} s")
        print(f"{rate:,.0f} samples/s; ratio to the {FLOOR:,}/s floor: {rate / FLOOR:.2f}")
        bdb.run_ids += inserted
    return 0


if __name__ == "__main__":
    sys.exit(main())
