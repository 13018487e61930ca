"""stackbench buildbot: hand a series to the dispatcher, which submits it to Buildbot."""

from __future__ import annotations

import argparse

NAME = "buildbot"
HELP = "hand a stored series to Buildbot again, or show the master's URL"
DESCRIPTION = """\
'submit' hands a stored series to the dispatcher as every front door does (a new attempt,
even of a finished series): the dispatcher submits it to the Buildbot master, plans its
rounds, follows it to 'done' or 'failed' and queues its report mail; its page shows where
it is. The master is the embedded one of 'stackbench up', or $STACKBENCH_BUILDBOT_URL with
$STACKBENCH_BUILDBOT_USER and $STACKBENCH_BUILDBOT_PASSWORD (a user of the master's web UI).

  stackbench buildbot submit 12                 the base and every commit of series 12
  stackbench buildbot submit 12 --job thpscale --runs 5
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bb_command", metavar="ACTION", required=True)
    s = sub.add_parser("submit", help="hand a series to the dispatcher and its Buildbot master")
    s.add_argument("series", type=int, help="series id")
    s.add_argument("--job", action="append", help="jobs to run (default: the series' own)")
    s.add_argument("--runs", type=int, help="runs of each job per kernel (default: the series')")
    sub.add_parser("url", help="print the Buildbot web UI's address")


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import StackbenchError

    if args.bb_command == "url":
        from stackbench.jobs.executors.buildbot import client

        url = client.buildbot_url()
        if not url:
            raise StackbenchError("no Buildbot master known: run 'stackbench up'")
        print(url)
        return 0
    from stackbench.jobs.driver.intake import Options
    from stackbench.jobs.driver.lifecycle import hand_over_line
    from stackbench.resultsdb import db

    # the new plan is checked as a submission's, by the intake's one reading of options
    plan = Options.read({"jobs": args.job, "runs": args.runs})
    jobs = list(plan.jobs) if plan.jobs else None
    line, ok = hand_over_line(db.engine(), args.series, jobs=jobs, runs=plan.runs)
    print(line)
    return 0 if ok else 1
