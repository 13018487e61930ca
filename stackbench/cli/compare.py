"""stackbench compare: the comparison tables of stored kernels."""

from __future__ import annotations

import argparse
import sys

NAME = "compare"
ORDER = 31
HELP = "print LKP, mmtests or stackbench comparison tables for stored kernels"
DESCRIPTION = """\
Compare kernels, the first one being the base. A KERNEL is a commit (a unique prefix is
enough) or an mmtests run name.

  --style lkp        LKP's 'lkp ncompare' table (%stddev %change); rows LKP's change rule
                     selects, or every stat with --all
  --style mmtests    compare-mmtests.pl's tables (thpscale era): --table latency|counts|
                     locality|significance|highalloc,
                     or a monitor block with --monitor duration|vmstat
  --style stackbench every stat with stackbench's verdict: change, 95% interval, significance
                     after false-discovery-rate control"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernels", nargs="+", metavar="KERNEL", help="base first")
    p.add_argument("--style", choices=["lkp", "mmtests", "stackbench"], default="lkp")
    p.add_argument("--all", action="store_true", help="lkp: every stat (as 'lkp ncompare -a')")
    p.add_argument(
        "--table",
        choices=["latency", "counts", "locality", "significance", "highalloc"],
        default=None,
        help="mmtests: which table (default latency); significance adds the Significant rows "
        "(1.00 when the t-test gives p < 0.10); highalloc shows stress-highalloc passes",
    )
    p.add_argument(
        "--monitor",
        choices=["duration", "vmstat"],
        default=None,
        help="mmtests: print a monitor block instead of a table",
    )
    p.add_argument("--suite", default=None, help="only this suite (vm-scalability, thpscale...)")
    p.add_argument(
        "--machine",
        default=None,
        help="only runs on this machine (by default, runs of a job on several machines are "
        "pooled, with a warning)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench import config

    if config.server_url():
        from stackbench import apiclient  # urllib's HTTP stack only when it talks HTTP

        client = apiclient.client()
        if args.table or args.monitor or args.machine:
            from stackbench.errors import StackbenchError

            raise StackbenchError(
                "--table/--monitor/--machine are not available through STACKBENCH_URL; open the "
                "comparison page, or unset STACKBENCH_URL to read the database"
            )
        out = client.compare(args.kernels, style=args.style, all_rows=args.all, suite=args.suite)
    else:
        from stackbench.resultsdb.tables import textcache

        view = textcache.View(
            tuple(args.kernels),
            args.style,
            args.all,
            args.table,
            args.monitor,
            args.suite,
            args.machine,
        )
        out = _without_sqlalchemy(args, view)
        if out is not None:
            print(out, end="" if out.endswith("\n") else "\n")
            return 0
        from stackbench.resultsdb import db
        from stackbench.resultsdb.tables import render

        out = render.render(
            db.engine(),
            args.kernels,
            style=args.style,
            all_rows=args.all,
            table=args.table,
            monitor=args.monitor,
            suite=args.suite,
            machine=args.machine,
            warn=lambda line: print(f"stackbench: warning: {line}", file=sys.stderr),
            cache=view,
        )
    print(out, end="" if out.endswith("\n") else "\n")
    return 0


def _warn(line: str) -> None:
    print(f"stackbench: warning: {line}", file=sys.stderr)


def _without_sqlalchemy(args: argparse.Namespace, view) -> str | None:
    """The table through one psycopg connection: the stored text when the runs are
    unchanged, else computed there and stored. None when that path cannot serve (no
    running database, a schema to migrate, a connection error): the caller then goes
    through db.engine(), which starts, checks and reports."""
    import psycopg

    from stackbench.resultsdb.tables import textcache

    conn = textcache.connect_for_lookup()
    if conn is None:
        return None
    with conn:
        try:
            hit = textcache.lookup(view, conn)
            if hit is not None:
                for line in hit.warnings:
                    _warn(line)
                return hit.text
            from stackbench.resultsdb.tables import render

            return render.render_on(
                conn,
                args.kernels,
                style=args.style,
                all_rows=args.all,
                table=args.table,
                monitor=args.monitor,
                suite=args.suite,
                machine=args.machine,
                warn=_warn,
                cache=view,
            )
        except (textcache.Schema, psycopg.Error):
            return None
