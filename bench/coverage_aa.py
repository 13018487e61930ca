"""What the evidence boot's kernel option costs the measured boots: an A/A of the default
base built with the guest config (ftrace's function tracer compiled in, off, its call sites
NOPs) and without it (``tiny-guest+no-ftrace``), booted alternately under QEMU, one boot a
unit. Prints each side's boot means of the headline metric and the cost with its 95%
interval (Welch); the floor: the interval holds 0 or the cost is under 1%.

    STACKBENCH_KERNEL_CACHE=/var/cache/stackbench-test .venv/bin/python bench/coverage_aa.py --boots 8
"""

from __future__ import annotations

import argparse
import statistics
import time

from scipy import stats

from stackbench.jobs.benchmarks.highalloc import build_module
from stackbench.jobs.executors.boot_stage import boot_workdir, release_workdir, run_job
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import build, trees
from stackbench.kernels.config import compose
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec

FLOOR_PCT = 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boots", type=int, default=8, help="boots per kernel")
    ap.add_argument("--runs", type=int, default=2, help="runs per boot (averaged)")
    ap.add_argument("--job", default="vm-scalability[test=anon-w-seq]")
    ap.add_argument("--metric", default="vm-scalability.throughput")
    ap.add_argument("--config", default="tiny-guest")
    args = ap.parse_args()
    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    sides = {"with": args.config, "without": compose(args.config, "no-ftrace")}
    built = {}
    for side, config in sides.items():
        t0 = time.monotonic()
        res = build.build(repo, tree.default_base, config=config, module_builder=build_module)
        if not res.ok:
            raise SystemExit(f"{config}: {res.status}\n{res.log_tail}")
        how = "reused" if res.reused else f"built in {time.monotonic() - t0:.0f} s"
        print(f"{side:8} {config} {res.config_hash[:12]} ({how})", flush=True)
        built[side] = res
    machine = MachineSpec(name="coverage-aa", kind="qemu", cpus=2, memory_mb=1024)
    settings = Settings(accel="tcg", cpus=2, mem_mb=1024)
    means: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(args.boots):
        # alternate the order so a drift of the host's load is shared by both sides
        for side in sides if i % 2 == 0 else reversed(list(sides)):
            res = built[side]
            kernel = KernelSpec(commit=res.commit, name=side, config_name=res.config_name,
                                config_hash=res.config_hash, compiler=res.compiler)  # fmt: skip
            wd = boot_workdir()
            runs = run_job(artifact=res.artifact_dir, job=args.job, runs=args.runs,
                           kernel=kernel, machine=machine, settings=settings, workdir=wd)  # fmt: skip
            release_workdir(wd, runs)
            values = [v for r in runs if r.status == "done" for v in r.samples.get(args.metric, [])]
            if values:
                means[side].append(statistics.fmean(values))
            print(f"boot {i + 1} {side:8} {values}", flush=True)
    a, b = means["with"], means["without"]
    if len(a) < 2 or len(b) < 2:
        raise SystemExit("too few boots with results")
    test = stats.ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(0.95)
    base = statistics.fmean(b)
    cost = 100 * (statistics.fmean(a) - base) / base
    lo, hi = 100 * ci.low / base, 100 * ci.high / base
    print(f"{args.metric}: with {statistics.fmean(a):.0f} (sd {statistics.stdev(a):.0f}), "
          f"without {base:.0f} (sd {statistics.stdev(b):.0f}), {len(a)}/{len(b)} boots")  # fmt: skip
    met = lo <= 0 <= hi or abs(cost) < FLOOR_PCT
    print(f"A/A cost of ftrace compiled in (off): {cost:+.2f}% "
          f"[{lo:+.2f}%, {hi:+.2f}%] at 95% (p {test.pvalue:.2f}); floor: the interval "
          f"holds 0 or |cost| < {FLOOR_PCT:g}%: {'met' if met else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
