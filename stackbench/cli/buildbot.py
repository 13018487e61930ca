"""stackbench buildbot: hand a series to the Buildbot master, see where its builds are."""

from __future__ import annotations

import argparse
import json

NAME = "buildbot"
ORDER = 60
HELP = "submit a series to the Buildbot master (REST API) and show its URL"
DESCRIPTION = """\
Talks to the embedded master of 'stackbench up', or to $STACKBENCH_BUILDBOT_URL with
$STACKBENCH_BUILDBOT_USER and $STACKBENCH_BUILDBOT_PASSWORD (a user of the master's web UI).

  stackbench buildbot submit 12                 the base and every commit of series 12
  stackbench buildbot submit --commit A --commit B --job thpscale --runs 5
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bb_command", metavar="ACTION", required=True)
    s = sub.add_parser("submit", help="fan a series out into builds and benchmarks")
    s.add_argument("series", nargs="?", type=int, help="series id (its commits come from the db)")
    s.add_argument("--commit", action="append", help="explicit commits instead of a series")
    s.add_argument("--job", action="append", help="jobs to run (default: the master's matrix)")
    s.add_argument("--kind", action="append", choices=["qemu", "baremetal"])
    s.add_argument("--runs", type=int)
    s.add_argument("--min-cpus", type=int)
    s.add_argument("--min-memory-mb", type=int)
    sub.add_parser("url", help="print the Buildbot web UI's address")


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import StackbenchError
    from stackbench.jobs.buildbot import client

    if args.bb_command == "url":
        url = client.buildbot_url()
        if not url:
            raise StackbenchError("no Buildbot master known: run 'stackbench up'")
        print(url)
        return 0
    if args.series is None and not args.commit:
        raise StackbenchError("give a series id or --commit")
    result = client.submit(
        client.default_master(),
        series=args.series,
        commits=args.commit,
        jobs=args.job,
        kinds=args.kind,
        runs=args.runs,
        min_cpus=args.min_cpus,
        min_memory_mb=args.min_memory_mb,
    )
    print(json.dumps(result))
    return 0
