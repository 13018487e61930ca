"""stackbench up: start the embedded services."""

from __future__ import annotations

import argparse

NAME = "up"
ORDER = 10
HELP = "start the embedded PostgreSQL (and, when installed, Buildbot and the web UI)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db-only", action="store_true", help="start only the database")


def run(args: argparse.Namespace) -> int:
    from stackbench import services

    for line in services.up(db_only=args.db_only):
        print(line)
    return 0
