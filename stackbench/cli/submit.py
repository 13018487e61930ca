"""stackbench submit: store a patch series and (by default) run it on this machine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stackbench.errors import InputError

NAME = "submit"
ORDER = 21
HELP = "submit an mbox patch series: apply, build every commit, boot, benchmark, store"
DESCRIPTION = """\
Store the series in FILE (an mbox, e.g. from `git format-patch --stdout` or `b4 am`; '-' reads
stdin) and see it run: it is applied on the base with git am, a kernel is built for the base
and for every commit, and each is booted under QEMU in rounds (at least 3 boots per kernel,
more while a headline metric is undecided), every run stored. With Buildbot installed the
dispatcher runs it through the embedded master and its local worker (started as by
`stackbench up`) and this command only watches: Ctrl-C leaves it running, and the same
command again attaches to it. --in-process runs it in this process instead. Submitting the
same series again (same Message-ID, tree and base) finds the stored one: a finished series
is not run again (use --rerun to add a round of runs).

  --jobs    job definitions (jobs/benchmarks/defs), with optional parameter overrides:
            --jobs 'thpscale[madvise=false],vm-scalability[test=anon-w-seq,runtime=10s]'
  --no-wait store the series and hand it to the dispatcher of `stackbench up`, which applies
            it, has Buildbot (or, without a master, itself) build and measure every commit,
            and queues the report mail; follow it on the series page. Without `stackbench
            up` running, nothing happens until it is started.

Exit status: 0 when every kernel was built and measured, 1 otherwise."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mbox", required=True, metavar="FILE", help="the series ('-': stdin)")
    p.add_argument("--tree", default="linux-6.1", help="kernel tree (kernels/trees/NAME.yaml)")
    p.add_argument("--base", default=None, help="base ref (default: base-commit or the tree's)")
    p.add_argument("--jobs", default=None, metavar="NAME,...", help="default: all three suites")
    p.add_argument("--runs", type=int, default=None, help="runs of every job per kernel")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="hand the series to the dispatcher of 'stackbench up' instead of running it here",
    )
    p.add_argument("--rerun", action="store_true", help="run a finished series again")
    p.add_argument(
        "--check-claims",
        action="store_true",
        help="measure the cover letter's claims too (its LKP / mmtests tables): their jobs "
        "join the series' and the report says which claims hold",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="build and benchmark in this process instead of handing the series to the "
        "dispatcher and the embedded Buildbot master (the default when Buildbot is installed)",
    )
    add_machine_arguments(p)


def add_machine_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("guest")
    g.add_argument("--cpus", type=int, default=2, help="guest CPUs (default 2)")
    g.add_argument("--mem-mb", type=int, default=1024, help="guest memory (default 1024)")
    g.add_argument(
        "--accel",
        choices=["auto", "kvm", "tcg"],
        default="auto",
        help="auto probes KVM and falls back to TCG",
    )


def settings_from(args: argparse.Namespace):
    from stackbench.jobs.driver.pipeline import Settings

    return Settings(cpus=args.cpus, mem_mb=args.mem_mb, accel=args.accel)


def read_mbox(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None


def print_summary(eng, series_id: int, out=None) -> None:
    out = out or sys.stdout  # looked up per call: tests and callers replace sys.stdout
    from stackbench.resultsdb import db, kernels_store, series_store

    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        print(f"series {series.id}: {series.title} [{series.state}]", file=out)
        if series.error:
            print(f"  {series.error.splitlines()[0]}", file=out)
        for k in kernels_store.stack(series):
            label, commit = k.label, k.commit
            if not commit:
                print(f"  {label:>5}  (not applied)", file=out)
                continue
            row = kernels_store.first_build(s, commit)
            status = row.status if row else "not built"
            runs = kernels_store.run_statuses(s, row.id) if row is not None else []
            counts = ", ".join(f"{runs.count(st)} {st}" for st in sorted(set(runs)))
            print(f"  {label:>5}  {commit[:12]}  {status:<12} {counts}", file=out)


def _through_dispatcher(args: argparse.Namespace) -> bool:
    """Whether a waiting submit watches the dispatcher run it at Buildbot (the executor of
    record when installed) instead of running it here. Guest sizes other than the machine
    kind's are an --in-process choice: a worker's guest is the job's and the kind's."""
    from stackbench.cli.demo import buildbot_installed

    if args.in_process:
        return False
    if (args.cpus, args.mem_mb) != (2, 1024):
        print("submit: --cpus/--mem-mb given: running it in this process", file=sys.stderr)
        return False
    return buildbot_installed()


def store(eng, data: bytes, args: argparse.Namespace, *, here: bool) -> tuple[int, str]:
    """The series through the one validation and creation of every front door; ``here``:
    this process runs it, so the dispatcher leaves it alone. Returns its ID and, when the
    same series was stored before, what to say about it (else "")."""
    from stackbench.jobs.driver import lifecycle, pipeline
    from stackbench.patches.parser import parse_mbox
    from stackbench.resultsdb import db

    jobs = pipeline.split_job_specs(args.jobs) if args.jobs else None
    parsed = parse_mbox(data, source=args.mbox)
    with db.session(eng) as s:
        checked = lifecycle.check(s, tree=args.tree, base=args.base, jobs=jobs, runs=args.runs)
        stored = lifecycle.already_stored(s, parsed, checked)
        note = lifecycle.resubmission_note(stored, parsed) if stored is not None else ""
        series = lifecycle.create(
            s, parsed, checked, source="mbox", mbox=data, foreground=here,
            check_claims=getattr(args, "check_claims", False),
        )  # fmt: skip
        return series.id, note


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.driver import pipeline
    from stackbench.resultsdb import db

    data = read_mbox(args.mbox)
    eng = db.engine()
    # the series is the dispatcher's only when handed over (lifecycle.hand_over)
    sid, same = store(eng, data, args, here=not args.no_wait)
    print(same or f"series {sid} stored")
    if args.no_wait:
        if not same:
            print(f"series {sid} handed to the dispatcher ('stackbench up' runs it)")
        return 0
    if _through_dispatcher(args):
        from stackbench.cli.demo import run_through_dispatcher

        state = run_through_dispatcher(eng, sid, fresh=args.rerun, source="submit")
    else:
        state = pipeline.run_series(
            eng, sid, progress=pipeline.StderrProgress(), settings=settings_from(args),
            rerun=args.rerun,
        )  # fmt: skip
    print_summary(eng, sid)
    kernels = [k.commit[:12] for k in pipeline.series_kernels(eng, sid)]
    if len(kernels) > 1:
        print(f"compare: stackbench compare --style lkp {' '.join(kernels)}")
    return 0 if state == "done" else 1
