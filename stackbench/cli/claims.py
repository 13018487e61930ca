"""stackbench claims: the performance claims a mail's tables make, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "claims"
HELP = "list the claims (table rows, percentages) a cover letter or robot report makes"
DESCRIPTION = """\
Read a cover letter, changelog or robot report (a file, an mbox, or - for stdin) and list
every claim its tables make: LKP ncompare blocks, mmtests compare tables and monitor rows,
value tables with a column per kernel and short forms such as "mmap-pread-seq-mt: -18.3%".
printed_pct is the table's own number (LKP's %change, mmtests' gain: positive is better);
change_pct is the relative change of the value, the kernel against its base column."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the mail or text file, or - for stdin")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per claim")
    p.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="NAME",
        help="map the claims to our jobs and to these kernels (repeat it, base first; a sha or "
        "a name as the tables print it)",
    )
    p.add_argument("--cpus", type=int, default=2, help="with --kernel: the guest's CPUs")
    p.add_argument("--mem-mb", type=int, default=1024, help="with --kernel: the guest's memory")


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import InputError
    from stackbench.patches import claims

    if args.file == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            with open(args.file, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise InputError(args.file, exc.strerror or "cannot read") from None
    text = claims.mail_text(data)
    if args.cpus < 1 or args.mem_mb < 64:
        raise InputError("guest", f"{args.cpus} CPUs and {args.mem_mb} MB is too small a guest")
    found = claims.parse(text)
    if args.kernel:
        from stackbench.jobs.driver import claims_map

        kernels = [(k, k) for k in args.kernel]
        mapped = claims_map.map_claims(found, kernels, cpus=args.cpus, mem_mb=args.mem_mb)
        if args.json:
            sys.stdout.write(json.dumps([m.as_json() for m in mapped], indent=1) + "\n")
        else:
            sys.stdout.write(claims_map.format_table(mapped))
        return 0
    if args.json:
        sys.stdout.write(json.dumps([c.as_json() for c in found], indent=1) + "\n")
    else:
        sys.stdout.write(claims.format_table(found))
    return 0
