"""stackbench config: the settings in effect, where each comes from, secrets masked."""

from __future__ import annotations

import argparse

NAME = "config"
HELP = "print every setting in effect (environment or default), secrets masked"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--table", action="store_true", help="print the table of docs/configuration.md instead"
    )


def run(args: argparse.Namespace) -> int:
    from stackbench import config

    if args.table:
        print(config.table(), end="")
        return 0
    rows = config.effective()
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value or '-'}  ({source})")
    return 0
