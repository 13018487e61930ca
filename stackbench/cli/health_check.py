"""stackbench health-check: the supervisor's event listener that restarts what stops
answering (``stackbench up`` runs it; it speaks supervisord's listener protocol)."""

from __future__ import annotations

import argparse
import logging

NAME = "health-check"
ORDER = 93
HELP = "(run by 'stackbench up's supervisor) restart services that stop answering"
DESCRIPTION = """\
An event listener of supervisord: it counts each program's restarts and notes since when
it is down, GETs each --probe URL every 5 s and restarts the program after 3 failures in a
row (refused, reset, timed out), and starts again a program supervisord gave up on.
'stackbench status' shows what it found."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="PROGRAM=URL",
        help="restart PROGRAM when URL stops answering (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench import services
    from stackbench.errors import StackbenchError

    probes = {}
    for item in args.probe:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith("http"):
            raise StackbenchError(f"--probe {item!r}: expected PROGRAM=http://...")
        probes[name] = url
    # stdout is the listener protocol: logs go to stderr
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", force=True)
    services.health_listener(probes)
    return 0
