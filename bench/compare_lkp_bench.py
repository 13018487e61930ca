"""LKP table speed: 10 kernels x 5 runs x 2,000 stats stored, then ``lkp ncompare --all``
rendered from the database (query.load + tables.lkp.render).

Uses a fresh embedded PostgreSQL cluster in a temporary STACKBENCH_HOME, or
STACKBENCH_DATABASE_URL if set (its rows are deleted again afterwards).

    .venv/bin/python bench/compare_lkp_bench.py [--kernels 10] [--runs 5] [--stats 2000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

FLOOR_S = 1.0
SUITE = "bench-lkp"


def make_runs(kernels: int, runs: int, stats: int):
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    rnd = random.Random(2)
    job = JobSpec(SUITE, "anon-w-seq-mt", {"test": "anon-w-seq-mt", "runtime": "300s"})
    machine = MachineSpec("bench-vm", cpus=8)
    names = [f"{SUITE}.throughput", f"{SUITE}.stddev%"]
    monitors = ("proc-vmstat", "meminfo", "vmstat", "perf-stat", "perf-profile.self.cycles-pp")
    names += [f"{monitors[i % len(monitors)]}.stat_{i}" for i in range(stats - len(names))]
    level = {n: rnd.uniform(1, 1e9) for n in names}
    out = []
    for k in range(kernels):
        kernel = KernelSpec(f"{k + 1:040x}", name=f"bench-kernel-{k}", compiler="gcc-13")
        shift = {n: rnd.choice((1.0, 1.0, 1.0, 0.9, 1.2)) for n in names}
        for r in range(runs):
            samples = {n: [level[n] * shift[n] * rnd.gauss(1, 0.02)] for n in names}
            out.append(RunData(job, kernel, machine, r, samples, source="bench"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--stats", type=int, default=2000)
    args = ap.parse_args()

    from benchdb import bench_database

    from stackbench.resultsdb import ingest, query
    from stackbench.resultsdb.tables import lkp

    with bench_database() as bdb:
        eng = bdb.eng
        runs = make_runs(args.kernels, args.runs, args.stats)
        t0 = time.perf_counter()
        res = ingest.ingest(eng, runs)
        setup = time.perf_counter() - t0
        refs = [f"bench-kernel-{k}" for k in range(args.kernels)]
        print(
            f"stored {args.kernels} kernels x {args.runs} runs x {args.stats} stats "
            f"({res.samples:,} samples) in {setup:.1f} s"
        )

        t0 = time.perf_counter()
        with eng.connect() as conn:
            kernels = query.resolve_kernels(conn, refs)
            ds = query.load(conn, kernels, suite=SUITE)
        t_query = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = lkp.render(ds, all_rows=True)
        t_render = time.perf_counter() - t0
        t0 = time.perf_counter()
        changed = lkp.render(ds)
        t_changed = time.perf_counter() - t0

        rows = sum(1 for line in table.splitlines() if line.endswith(tuple(ds_names(ds))))
        total = t_query + t_render
        print(f"table: {rows} rows x {args.kernels} columns, {len(table):,} characters")
        print(f"  query.load   {t_query:6.3f} s")
        print(f"  render --all {t_render:6.3f} s")
        print(f"total {total:.3f} s; ratio to the {FLOOR_S:.0f} s floor: {total / FLOOR_S:.2f}")
        print(
            f"(default rows, LKP's change rule over {args.kernels - 1} columns: "
            f"{t_changed:.3f} s render, {len(changed.splitlines())} lines)"
        )
        bdb.run_ids += res.inserted
    return 0


def ds_names(ds) -> set[str]:
    return {"  " + m.name for m in ds.metrics.values()}


if __name__ == "__main__":
    sys.exit(main())
