"""Where the time of a series goes: unpack, apply, cold build, incremental builds, boots, guest
runs, ingest, and the orchestration overhead (everything that is not building, booting or
running), for the shipped demo stack.

    .venv/bin/python bench/pipeline_bench.py [--runs 1] [--reuse] [--unpack]

By default the kernel object dir and ccache are fresh (a private temporary kernel cache that
borrows only the unpacked tree), so the base build is really cold and each commit after it an
incremental rebuild in the same object dir. --reuse uses the shared kernel cache as it is
(builds are reused: measures orchestration only). --unpack also times unpacking the tree.

Floors (printed with each figure): orchestration overhead < 10% of the total; the incremental
rebuild of a commit touching one mm/ file < 25% of the cold build. Exit status 1 if a floor
is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

OVERHEAD_FLOOR = 0.10
INCREMENTAL_FLOOR = 0.25
JOBS = ["vm-scalability[test=anon-w-seq]", "thpscale[max_threads=2]", "stress-highalloc"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="use the shared kernel cache as is")
    ap.add_argument("--unpack", action="store_true", help="also time unpacking the tree")
    ap.add_argument("--stack", default="compaction-demo")
    args = ap.parse_args()

    shared = Path(os.environ.get("STACKBENCH_TEST_CACHE", "/var/cache/stackbench-test"))
    scratch = Path(tempfile.mkdtemp(prefix="stackbench-bench-"))
    # a private home: the bench's series and embedded database never mix with real ones
    os.environ["STACKBENCH_HOME"] = str(scratch / "home")
    figures: list[tuple[str, float, str]] = []
    try:
        if args.reuse:
            os.environ["STACKBENCH_KERNEL_CACHE"] = str(shared)
        else:
            cache = scratch / "kernel-cache"
            (cache / "trees").mkdir(parents=True)
            os.environ["STACKBENCH_KERNEL_CACHE"] = str(cache)
            os.environ.pop("CCACHE_DIR", None)
            if not args.unpack and (shared / "trees" / "linux-6.1").exists():
                # borrow the unpacked tree; the worktree, objdir and ccache stay fresh
                (cache / "trees" / "linux-6.1").symlink_to(shared / "trees" / "linux-6.1")
        return run(args, figures)
    finally:
        if not os.environ.get("STACKBENCH_DATABASE_URL"):
            from stackbench.resultsdb import db
            from stackbench.resultsdb.embedded import Cluster, destroy

            db.reset()
            destroy(Cluster())
        shutil.rmtree(scratch, ignore_errors=True)


def run(args: argparse.Namespace, figures: list[tuple[str, float, str]]) -> int:
    from stackbench.jobs import pipeline
    from stackbench.kernels import trees
    from stackbench.patches import stacks
    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import Series

    t0 = time.monotonic()
    repo = trees.ensure_repo(trees.load_tree("linux-6.1"))
    unpack = time.monotonic() - t0
    figures.append(("unpack tree", unpack, "unpacked" if args.unpack else "present"))

    eng = db.engine()
    sid = pipeline.submit(eng, stacks.stack_mbox(args.stack), jobs=JOBS, runs=args.runs)
    t0 = time.monotonic()
    state = pipeline.run_series(eng, sid, progress=pipeline.StderrProgress())
    total = time.monotonic() - t0
    from sqlalchemy.orm import Session

    with Session(eng) as s:
        t = dict(s.get(Series, sid).meta["timings"])
    print(f"\nseries {sid} {state}; repo {repo}\n")

    figures.append(("apply (git am)", t["apply_s"], ""))
    builds = t["builds"]
    for b in builds:
        how = "reused" if b["reused"] else b["outcome"]
        figures.append((f"build {b['kernel'][:40]}", b["seconds"], how))
    figures.append(("initramfs", t["initramfs_s"], ""))
    vm, guest = t["vm_s"], t["guest_runs_s"]
    figures.append(("boot + guest overhead", vm - guest, "VM wall time minus runs"))
    figures.append(("guest runs", guest, f"{args.runs} run(s) x {len(JOBS)} jobs x kernels"))
    figures.append(("ingest", t["ingest_s"], ""))
    build_s = sum(b["seconds"] for b in builds)
    overhead = total - build_s - vm
    figures.append(("orchestration overhead", overhead, "total - builds - VM time"))
    figures.append(("  of which apply", t["apply_s"], "git am in a sparse worktree"))
    figures.append(("  of which the rest", overhead - t["apply_s"], "KVM probe, DB, initramfs"))
    figures.append(("total", total, ""))

    width = max(len(f[0]) for f in figures)
    for name, secs, note in figures:
        print(f"{name:<{width}}  {secs:9.2f} s  {note}")

    ok = True
    ratio = overhead / total if total else 0.0
    verdict = "ok" if ratio < OVERHEAD_FLOOR else "MISSED"
    ok &= ratio < OVERHEAD_FLOOR
    print(f"\noverhead ratio: {ratio:.3f} (floor < {OVERHEAD_FLOOR}) {verdict}")
    rest = (overhead - t["apply_s"]) / total if total else 0.0
    print(f"overhead ratio without apply: {rest:.3f}")
    fresh = [b for b in builds if not b["reused"] and b["outcome"] == "built"]
    if len(fresh) >= 2:
        cold = fresh[0]["seconds"]
        incr = max(b["seconds"] for b in fresh[1:])
        r = incr / cold
        verdict = "ok" if r < INCREMENTAL_FLOOR else "MISSED"
        ok &= r < INCREMENTAL_FLOOR
        print(
            f"incremental/cold build: {incr:.1f} s / {cold:.1f} s = {r:.3f} "
            f"(floor < {INCREMENTAL_FLOOR}) {verdict}"
        )
    else:
        print("incremental/cold build: not measured (builds were reused; drop --reuse)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
