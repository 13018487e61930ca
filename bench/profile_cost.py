"""What perf costs the evidence boot, and how far one boot's profile moves on its own: the
default base (tiny-guest) booted alternately with and without perf in the initramfs under
QEMU TCG, each boot running the job once. Prints the initramfs sizes, each side's boot
wall time, the samples per profiled boot and, between consecutive profiled boots of the same
kernel (an A/A), the largest move of a symbol's self share: the size a move must exceed
before the report's profile section means anything. The measured boots never carry perf, so
they pay nothing (CONFIG_PERF_EVENTS is on in every x86 guest already). Floor: a profiled
boot takes under twice the plain one.

    STACKBENCH_KERNEL_CACHE=/var/cache/stackbench-test .venv/bin/python bench/profile_cost.py --boots 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from stackbench.jobs.benchmarks.highalloc import build_module
from stackbench.jobs.executors import jobspecs
from stackbench.jobs.executors.boot_stage import boot_workdir, release_workdir, run_kernel
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import build, trees
from stackbench.resultsdb import profile_store
from stackbench.resultsdb.rundata import KernelSpec

FLOOR_RATIO = 2.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boots", type=int, default=3, help="boots per side")
    ap.add_argument("--job", default="vm-scalability[test=anon-w-seq]")
    args = ap.parse_args()
    tree = trees.load_tree("linux-6.1")
    res = build.build(trees.ensure_repo(tree), tree.default_base, module_builder=build_module)
    if not res.ok:
        raise SystemExit(f"build: {res.status}\n{res.log_tail}")
    settings = Settings(accel="tcg", cpus=2, mem_mb=1024)
    plan = jobspecs.plan_for(jobspecs.resolve_jobs([args.job], 1), settings)
    kernel = KernelSpec(commit=res.commit, name="base")
    system_map = Path(res.artifact_dir) / "System.map"
    wall: dict[str, list[float]] = {"with": [], "without": []}
    size: dict[str, int] = {}
    profiles = []
    for i in range(args.boots):
        for side in ("without", "with"):
            workdir = boot_workdir()
            t0 = time.monotonic()
            _r, runs = run_kernel(
                res.bzimage, res.modules, plan, kernel=kernel, settings=settings,
                workdir=workdir, boot_id=f"profile-cost-{side}-{i}",
                profile=system_map if side == "with" else None,
            )  # fmt: skip
            wall[side].append(time.monotonic() - t0)
            size[side] = (workdir / "initrd.cpio.gz").stat().st_size
            release_workdir(workdir, runs)
            bad = [r.error for r in runs if r.status != "done"]
            if bad:
                raise SystemExit(f"boot {side} {i}: {bad[0]}")
            if side == "with":
                prof = runs[0].meta["profile"]
                if prof.get("error"):
                    raise SystemExit(f"profile: {prof['error']}")
                profiles.append(prof)
            print(f"boot {i} {side:7} {wall[side][-1]:6.1f} s", flush=True)
    for side in ("without", "with"):
        mean = statistics.mean(wall[side])
        print(
            f"{side:7} initramfs {size[side] / 1e6:6.1f} MB  boot {mean:6.1f} s (mean of {args.boots})"
        )
    print(f"samples per profiled boot: {[p['samples'] for p in profiles]}")
    for a, b in zip(profiles, profiles[1:], strict=False):
        top = profile_store.moved(b, a, set(), top=1)[0]
        print(f"A/A: largest self-share move {100 * top.delta:+.2f} points ({top.symbol})")
    ratio = statistics.mean(wall["with"]) / statistics.mean(wall["without"])
    verdict = "met" if ratio < FLOOR_RATIO else "MISSED"
    print(f"profiled / plain boot time: {ratio:.2f} (floor < {FLOOR_RATIO}: {verdict})")


if __name__ == "__main__":
    main()
