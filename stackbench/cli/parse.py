"""stackbench parse: run one of the raw-output parsers on a file, as LKP would."""

from __future__ import annotations

import argparse
import sys

NAME = "parse"
HELP = "parse raw benchmark output and print the stats (LKP's key: value form)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="parser", metavar="PARSER", required=True)
    vms = sub.add_parser("vm-scalability", help="raw vm-scalability (usemem) output")
    vms.add_argument("file", nargs="?", default="-", help="raw output file, or - for stdin")


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import InputError
    from stackbench.jobs.benchmarks.parsers import vm_scalability

    if args.file == "-":
        data = sys.stdin.read()
    else:
        try:
            with open(args.file, errors="replace") as fh:
                data = fh.read()
        except OSError as exc:
            raise InputError(args.file, exc.strerror or "cannot read") from None
    sys.stdout.write(vm_scalability.format_stats(vm_scalability.parse(data)))
    return 0
