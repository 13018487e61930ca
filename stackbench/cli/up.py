"""stackbench up: start the embedded services."""

from __future__ import annotations

import argparse

NAME = "up"
HELP = "start the embedded PostgreSQL (and, when installed, Buildbot and the web UI)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db-only", action="store_true", help="start only the database")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="run N local Buildbot workers, each its own process (default: those set up, 1)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench import services
    from stackbench.cli._services import listed
    from stackbench.errors import StackbenchError

    if args.workers < 0:
        raise StackbenchError("--workers must be at least 1")
    for line in services.up(listed(), db_only=args.db_only, workers=args.workers):
        print(line)
    return 0
