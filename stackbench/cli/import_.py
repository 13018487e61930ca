"""stackbench import: load existing LKP or mmtests results into the database."""

from __future__ import annotations

import argparse
import sys

NAME = "import"
HELP = "import LKP result trees or an mmtests work/log run"
DESCRIPTION = """\
Import results produced elsewhere. Each file is checked before anything is written; a bad
file stops the import with its path and what is wrong, and nothing is stored. Importing the
same data twice changes nothing.

  stackbench import lkp RESULT_ROOT...      LKP trees (<testcase>/.../<commit>/<run>/stats.json
                                             and/or <commit>/matrix.json)
  stackbench import mmtests work/log/RUN    an mmtests run directory (all iter-*)

Files the tools write beside the results (LKP's avg.json, stddev.json and cross-commit
matrix.json, mmtests' monitor logs...) are skipped; --verbose lists what was skipped."""


def _verbose_option(p: argparse.ArgumentParser) -> None:
    # also after the subcommand; SUPPRESS keeps a global -v from being reset to False
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="list the files and lines that were skipped",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    lkp = sub.add_parser("lkp", help="LKP result trees (stats.json / matrix.json)")
    lkp.add_argument("paths", nargs="+", metavar="PATH", help="a result root or any folder above")
    _verbose_option(lkp)
    mm = sub.add_parser("mmtests", help="an mmtests work/log/<RUNNAME> directory")
    mm.add_argument("path", metavar="PATH", help="work/log/<RUNNAME>")
    mm.add_argument("--name", help="kernel name to store (default: RUNNAME)")
    _verbose_option(mm)


def _parse(args: argparse.Namespace, notes: list[str]) -> list:
    if args.kind == "lkp":
        from stackbench.jobs.benchmarks.importers import lkp

        files = lkp.find_result_files(args.paths, notes)
        return lkp.to_run_data(lkp.collect_runs(*files))
    from stackbench.jobs.benchmarks.importers import mmtests

    return mmtests.parse_run(args.path, name=args.name, notes=notes)


def _print_notes(args: argparse.Namespace, notes: list[str]) -> None:
    if getattr(args, "verbose", False):
        for note in notes:
            print(f"stackbench: note: {note}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from stackbench import apiclient

    client = apiclient.client()
    notes: list[str] = []
    if client is not None:
        # parse (and validate) here, upload through the server's idempotent run API
        runs = _parse(args, notes)
        _print_notes(args, notes)
        answers = client.upload_runs(runs)
        new = sum(1 for a in answers if a.get("created"))
        print(f"uploaded {new} runs to {client.base_url}, {len(answers) - new} already present")
        return 0
    from stackbench.resultsdb import db

    if args.kind == "lkp":
        from stackbench.jobs.benchmarks.importers import lkp

        summary = lkp.import_paths(db.engine(), args.paths, notes)
    else:
        from stackbench.jobs.benchmarks.importers import mmtests

        summary = mmtests.import_run(db.engine(), args.path, name=args.name, notes=notes)
    _print_notes(args, notes)
    print(summary)
    return 0
