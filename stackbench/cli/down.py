"""stackbench down: stop the embedded services."""

from __future__ import annotations

import argparse

NAME = "down"
HELP = "stop the embedded services started by 'stackbench up' or 'stackbench demo'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from stackbench import services
    from stackbench.cli._services import listed

    for line in services.down(listed()):
        print(line)
    return 0
