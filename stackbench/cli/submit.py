"""stackbench submit: store a patch series and (by default) run it on this machine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stackbench.cli._follow import (
    add_guest_arguments,
    option_values,
    print_summary,
    run_here,
    run_through_dispatcher,
    runner,
)
from stackbench.errors import InputError

NAME = "submit"
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
        "--max-boots",
        type=int,
        default=None,
        metavar="N",
        help="boots per kernel that undecided headline metrics may add rounds up to",
    )
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
    add_guest_arguments(p)


def read_mbox(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.driver import intake
    from stackbench.resultsdb import db, kernels_store

    data = read_mbox(args.mbox)
    eng = db.engine()
    # the series is the dispatcher's at once only with --no-wait (else lifecycle.hand_over)
    who = intake.DISPATCHER if args.no_wait else runner(args)
    sub = intake.Submission(
        source="mbox", tree=args.tree, base=args.base, mbox=data, filename=args.mbox,
        options=option_values(args), runner=who,
    )  # fmt: skip
    with db.session(eng) as s:
        taken = intake.take(s, sub)
        sid = taken.series.id
    print(taken.note or f"series {sid} stored")
    if args.no_wait:
        if not taken.note:
            print(f"series {sid} handed to the dispatcher ('stackbench up' runs it)")
        return 0
    if who == intake.WATCHER:
        state = run_through_dispatcher(eng, sid, fresh=args.rerun, source="submit")
    else:
        state = run_here(eng, sid, taken.options.settings(), rerun=args.rerun)
    print_summary(eng, sid)
    with db.session(eng) as s:
        kernels = [k.commit[:12] for k in kernels_store.series_kernels(s, sid)]
    if len(kernels) > 1:
        print(f"compare: stackbench compare --style lkp {' '.join(kernels)}")
    return 0 if state == "done" else 1
