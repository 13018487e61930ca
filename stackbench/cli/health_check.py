"""stackbench health-check: restart what stops answering. The supervisor's event listener
(``stackbench up`` runs it; it speaks supervisord's listener protocol), or with --systemd
the timer-less loop of a host whose services are systemd units (Ansible)."""

from __future__ import annotations

import argparse
import logging

NAME = "health-check"
HELP = "(run by 'stackbench up's supervisor) restart services that stop answering"
DESCRIPTION = """\
An event listener of supervisord: it counts each program's restarts and notes since when
it is down, GETs each --probe URL every 5 s and restarts the program after 3 failures in a
row (refused, reset, timed out), and starts again a program supervisord gave up on.
'stackbench status' shows what it found.

With --systemd each PROGRAM is a systemd unit, restarted with 'systemctl restart' (the
stackbench-health service that Ansible installs runs it this way)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="PROGRAM=URL",
        help="restart PROGRAM when URL stops answering (repeatable)",
    )
    p.add_argument(
        "--systemd", action="store_true", help="PROGRAMs are systemd units: run as a service"
    )
    p.add_argument(
        "--every", type=float, default=5.0, metavar="S", help="seconds between probes (--systemd)"
    )
    p.add_argument("--rounds", type=int, default=0, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from stackbench import services
    from stackbench.errors import StackbenchError

    probes = {}
    for item in args.probe:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith("http"):
            raise StackbenchError(f"--probe {item!r}: expected PROGRAM=http://...")
        probes[name] = url
    if args.every <= 0:
        raise StackbenchError("--every must be a positive number of seconds")
    # stdout is the listener protocol: logs go to stderr
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", force=True)
    if args.systemd:
        if not probes:
            raise StackbenchError("--systemd needs at least one --probe UNIT=URL")
        services.systemd_health_loop(probes, every=args.every, rounds=args.rounds)
    else:
        services.health_listener(probes)
    return 0
