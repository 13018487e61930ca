"""stackbench migrate: apply database migrations."""

from __future__ import annotations

import argparse

NAME = "migrate"
HELP = "apply the schema migrations (automatic only for an empty database)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("revision", nargs="?", default="head", help="target revision (default head)")


def run(args: argparse.Namespace) -> int:
    from stackbench.resultsdb import db

    eng = db.engine(migrate=False)
    db.upgrade(eng, args.revision)
    print(f"database at revision {db.current_revision(eng)}")
    return 0
