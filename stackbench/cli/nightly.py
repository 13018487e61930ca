"""stackbench nightly: re-run the tracked branches (what the Buildbot Nightly scheduler does)."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "nightly"
HELP = "run the tracked branches: build heads, compare with baselines, bisect regressions"
DESCRIPTION = """\
For every enabled tracked branch (jobs/tracking/tracked/*.yaml, $STACKBENCH_TRACKED, and branches
added from the web admin): build the head, run the tracked jobs (runs already stored count),
compare with the branch's last good baseline, open a regression for every metric judged
worse, bisect each new regression, queue the report mails and the nightly summary.

The first night of a branch only records its baseline. A branch whose head was already
judged in the last 20 hours is skipped unless --now is given (Buildbot may retry a night
without measuring twice; --now measures whatever is missing and judges again).

  --branch TREE:BRANCH   only this branch (repeatable)
  --no-bisect            open regressions but do not bisect them
  --buildbot             measure on the Buildbot master's workers: each comparison's
                         rounds shared out over every idle worker of the machine kind
  --aa N                 then boot each branch's baseline 2 x N more times, judge the two
                         interleaved sets against each other and keep the figures on the
                         machines (the machines page's A/A table)
  --json                 print the summary as JSON

Exit status: 0 when every branch ran (regressions found or not), 1 when one failed."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--now", action="store_true", help="run every branch again, even if judged")
    p.add_argument("--branch", action="append", default=[], metavar="TREE:BRANCH")
    p.add_argument("--no-bisect", action="store_true", help="do not bisect new regressions")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--aa", type=int, default=0, metavar="N", help="A/A: 2 x N boots (0: none)")
    p.add_argument("--cpus", type=int, default=2, help="guest CPUs (default 2)")
    p.add_argument("--mem-mb", type=int, default=1024, help="guest memory (default 1024)")
    p.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    p.add_argument(
        "--buildbot",
        action="store_true",
        help="measure on the Buildbot master's workers, rounds shared out (default: here)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import InputError
    from stackbench.jobs.executors.settings import Settings
    from stackbench.jobs.tracking import nightly
    from stackbench.jobs.tracking.comparison import lab_for
    from stackbench.resultsdb import db

    for b in args.branch:
        if ":" not in b:
            raise InputError(f"--branch {b}", "expected TREE:BRANCH")
    if args.aa and not 2 <= args.aa <= 100:
        raise InputError(f"--aa {args.aa}", "expected 2 to 100 boots per set (0: no A/A)")
    eng = db.engine()
    if args.buildbot and (args.cpus, args.mem_mb, args.accel) != (2, 1024, "auto"):
        raise InputError("--buildbot", "the workers' machine kind sets the guest: "
                         "--cpus, --mem-mb and --accel are for runs here")  # fmt: skip
    settings = Settings(cpus=args.cpus, mem_mb=args.mem_mb, accel=args.accel)
    lab = lab_for(settings, args.buildbot)
    tracked = nightly.load_tracked()
    if args.no_bisect:
        for t in tracked:
            t.bisect = False

    def progress(msg: str) -> None:
        print(f"nightly: {msg}", file=sys.stderr, flush=True)

    summary = nightly.run_nightly(
        eng,
        now=args.now,
        branches=args.branch or None,
        progress=progress,
        lab=lab,
        tracked=tracked,
        aa_boots=args.aa,
    )
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print_summary(summary)
    return 1 if any(b["state"] in ("error", "build-failed") for b in summary["branches"]) else 0


def print_summary(summary: dict, out=sys.stdout) -> None:
    if not summary["branches"]:
        print("no tracked branches", file=out)
    for b in summary["branches"]:
        head = (b.get("head") or "")[:12] or "-"
        print(
            f"{b['tree']}:{b['branch']} at {head}: {b['state']}  {b.get('message', '')}", file=out
        )
        for bi in b.get("bisects", []):
            who = (bi.get("culprit") or "")[:12] or ", ".join(
                c[:12] for c in bi.get("candidates", [])
            )
            print(
                f"  bisect of regression {bi['regression']}: {bi['state']} {who}"
                f" ({bi.get('kernels_built', 0)} kernels built)",
                file=out,
            )
    print(
        f"{summary.get('kernels_built', 0)} kernel(s) built in {summary.get('seconds', 0)}s; "
        f"summary mail: {summary.get('mail') or 'not queued'}",
        file=out,
    )
