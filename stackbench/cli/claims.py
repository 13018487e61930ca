"""stackbench claims: the performance claims a mail's tables make, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "claims"
ORDER = 33
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


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import InputError
    from stackbench.patches import claims

    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, "rb") as fh:
                text = fh.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise InputError(args.file, exc.strerror or "cannot read") from None
    found = claims.parse(text)
    if args.json:
        sys.stdout.write(json.dumps([c.as_json() for c in found], indent=1) + "\n")
    else:
        sys.stdout.write(claims.format_table(found))
    return 0
