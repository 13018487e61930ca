"""Where the time of a series goes: unpack, apply, cold build, incremental builds, boots, guest
runs, ingest, and the orchestration overhead (everything that is not building, booting or
running), for the shipped demo stack.

    .venv/bin/python bench/pipeline_bench.py [--runs 1] [--reuse] [--unpack] [--path P]

By default the kernel object dir and ccache are fresh (a private temporary kernel cache that
borrows only the unpacked tree), so the base build is really cold and each commit after it an
incremental rebuild in the same object dir. --reuse uses the shared kernel cache as it is
(builds are reused: measures orchestration only). --unpack also times unpacking the tree.

Floors (printed with each figure): orchestration overhead < 10% of the total; the incremental
rebuild of a commit touching one mm/ file < 25% of the cold build. Exit status 1 if a floor
is missed.

--path both (the default) then runs the same series again through the default path of
``stackbench demo``: the embedded Buildbot master and its local QEMU worker. It prints that
path's overhead ratio (end-to-end time over the sum of its build, boot and run steps, from
the master's own step times; target at most 1.10) and its end-to-end time over the
in-process one (target at most 1.15). The second comparison is fair with --reuse, where
both paths reuse the same kernel builds; without it the in-process run pays the cold build.
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
BUILDBOT_OVERHEAD = 1.10  # end-to-end over build + boot + run steps
BUILDBOT_VS_INPROCESS = 1.15
INCREMENTAL_FLOOR = 0.25
JOBS = ["vm-scalability[test=anon-w-seq]", "thpscale[max_threads=2]", "stress-highalloc"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="use the shared kernel cache as is")
    ap.add_argument("--unpack", action="store_true", help="also time unpacking the tree")
    ap.add_argument("--stack", default="compaction-demo")
    ap.add_argument(
        "--path",
        choices=["in-process", "buildbot", "both"],
        default="both",
        help="which executor to measure (both: in-process, then Buildbot on the same series)",
    )
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
    from stackbench.jobs.driver import intake, pipeline
    from stackbench.jobs.executors.progress import StderrProgress
    from stackbench.kernels import trees
    from stackbench.patches import stacks
    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import Series

    t0 = time.monotonic()
    repo = trees.ensure_repo(trees.load_tree("linux-6.1"))
    unpack = time.monotonic() - t0
    figures.append(("unpack tree", unpack, "unpacked" if args.unpack else "present"))

    eng = db.engine()
    sub = intake.Submission(
        source="bench", tree="linux-6.1", mbox=stacks.stack_mbox(args.stack),
        options={"jobs": JOBS, "runs": args.runs}, runner=intake.HERE,
    )  # fmt: skip
    with db.session(eng) as s:
        sid = intake.take(s, sub).series.id
    if args.path == "buildbot":
        return measure_buildbot(eng, sid, args, None)
    t0 = time.monotonic()
    state = pipeline.run_series(eng, sid, progress=StderrProgress())
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
    if args.path == "both":
        ok &= measure_buildbot(eng, sid, args, total) == 0
    return 0 if ok else 1


def measure_buildbot(eng, sid: int, args: argparse.Namespace, in_process_s: float | None) -> int:
    """The same series through the default path of 'stackbench demo': handed to the
    dispatcher, which submits it to the embedded master and its local worker, and watched
    from what is stored. The services are started first and timed apart (as after
    'stackbench up'); figures from the master's own step times."""
    from stackbench.jobs.driver import dispatcher_service, lifecycle, watch
    from stackbench.jobs.executors import services as bb
    from stackbench.jobs.executors.buildbot import client
    from stackbench.resultsdb import db, series_runs_store

    print("\n== the default path: dispatcher, embedded Buildbot master + local QEMU worker ==")
    t0 = time.monotonic()
    print(bb.start(), flush=True)
    print(dispatcher_service.start(), flush=True)
    master = client.embedded_master()
    try:
        client.wait_for_worker(master, bb.LOCAL_WORKER)
        up_s = time.monotonic() - t0
        t0 = time.monotonic()
        lifecycle.hand_over(eng, sid, source="bench", fresh=True)
        state = watch.follow(eng, sid, say=lambda line: None, poll=0.2)
        total = time.monotonic() - t0
        with db.session(eng) as s:
            submission = series_runs_store.dispatch(s, sid).submission
        steps, builds = step_seconds(master, submission)
    finally:
        print(dispatcher_service.stop())
        print(bb.stop())
    work = steps["build kernel"] + steps["benchmark"]
    print(f"series {sid} {state} through Buildbot ({builds} builds); services up in {up_s:.1f} s")
    for name, secs in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"  step {name:<24} {secs:9.2f} s")
    print(f"  end to end                {total:9.2f} s")
    print(f"  outside every step        {total - sum(steps.values()):9.2f} s  (scheduling, polls)")
    ok = True
    ratio = total / work if work else float("inf")
    verdict = "ok" if ratio <= BUILDBOT_OVERHEAD else "MISSED"
    ok &= ratio <= BUILDBOT_OVERHEAD
    print(
        f"buildbot overhead ratio: {total:.1f} s / {work:.1f} s (build + boot + run steps) = "
        f"{ratio:.3f} (target <= {BUILDBOT_OVERHEAD}) {verdict}"
    )
    if in_process_s:
        vs = total / in_process_s
        verdict = "ok" if vs <= BUILDBOT_VS_INPROCESS else "MISSED"
        ok &= vs <= BUILDBOT_VS_INPROCESS
        print(
            f"buildbot / in-process: {total:.1f} s / {in_process_s:.1f} s = {vs:.3f} "
            f"(target <= {BUILDBOT_VS_INPROCESS}) {verdict}"
        )
    return 0 if ok else 1


def step_seconds(master, submission: str) -> tuple[dict[str, float], int]:
    """Seconds per step name over the kernel and benchmark builds of a submission (the
    master's timestamps; they hold the machine lock, so they never overlap), and how many
    builds the submission made."""
    out: dict[str, float] = {"build kernel": 0.0, "benchmark": 0.0}
    names = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    n = 0
    for b in master.get("builds?property=submission")["builds"]:
        if (b.get("properties") or {}).get("submission", [None])[0] != submission:
            continue
        n += 1
        if not names.get(b["builderid"], "").startswith(("build-", "bench-")):
            continue  # the series coordinator waits on the others: not the worker's time
        for st in master.get(f"builds/{b['buildid']}/steps")["steps"]:
            if st.get("started_at") and st.get("complete_at"):
                secs = float(st["complete_at"]) - float(st["started_at"])
                out[st["name"]] = out.get(st["name"], 0.0) + secs
    return out, n


if __name__ == "__main__":
    sys.exit(main())
