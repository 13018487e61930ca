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
  --style stackbench stackbench's verdicts: change, 95% interval, significance after
                     false-discovery-rate control; the changed and undecided headline
                     metrics, largest first, and a line counting the rest (--all: every row)
  --style alloc-latency   stress-highalloc attempt latency percentiles per kernel with the
                     pages allocated (seed 001's table); --pass K picks the pass
  --style order-success   order-N Success and Success(N) beside compact_* counters per
                     scenario (seed 003's table)
  --style per-run    --metric NAME over the run index per kernel, with whether it reaches a
                     steady state (seed 002's view); --plot FILE.svg draws it

Runs are keyed by machine: when a job's runs come from several machines, pick one with
--machine NAME or pool them with --pool-machines (the table's first line then says so)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernels", nargs="+", metavar="KERNEL", help="base first")
    p.add_argument(
        "--style",
        choices=["lkp", "mmtests", "stackbench", "alloc-latency", "order-success", "per-run"],
        default="lkp",
    )
    p.add_argument("--metric", default=None, help="per-run: the metric to follow")
    p.add_argument(
        "--pass", dest="pass_no", type=int, default=1, help="alloc-latency, order-success: pass"
    )
    p.add_argument("--plot", default=None, metavar="FILE", help="per-run: write an SVG plot")
    p.add_argument(
        "--all",
        action="store_true",
        help="lkp: every stat (as 'lkp ncompare -a'); stackbench: every metric's row",
    )
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
        help="only runs on this machine (needed when a job's runs come from several)",
    )
    p.add_argument(
        "--pool-machines",
        action="store_true",
        help="pool the runs of several machines into one column (the header says so)",
    )
    p.add_argument(
        "--suite-source",
        choices=["upstream", "builtin"],
        default=None,
        help="only runs of upstream suites, or only builtin ones (the mmtests tables refuse "
        "to put both in one column)",
    )


SEED_STYLES = ("alloc-latency", "order-success", "per-run")


def write_plot(path: str, kernels: list[str], metric: str | None, machine: str | None) -> None:
    """The per-run series as an SVG file (one line per kernel over the run index)."""
    from stackbench.errors import InputError, StackbenchError
    from stackbench.resultsdb import db, query
    from stackbench.resultsdb.tables import per_run

    if not metric:
        raise StackbenchError("--plot draws the per-run view: give --style per-run --metric NAME")
    with db.engine().connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, kernels), machine=machine)
    try:
        with open(path, "w") as fh:
            fh.write(per_run.svg(ds, metric))
    except OSError as exc:
        raise InputError(path, f"cannot write the plot: {exc.strerror}") from None
    print(f"stackbench: plot written to {path}", file=sys.stderr)


def quick(args: argparse.Namespace) -> int | None:
    """The kept table of an unchanged comparison, or an LKP ``--all`` table made of kept
    columns, printed before the CLI sets up logging: start-up, one small client's
    connection (textcache.quick_connect) and one or two queries. None on a miss or when
    this path cannot serve (a server URL, a plot to draw, no database yet): run() then
    goes on, on the connection opened here when there is one."""
    from stackbench import config

    if config.server_url() or args.plot:
        return None
    from stackbench.resultsdb.tables import textcache

    conn = textcache.quick_connect()
    if conn is None:
        return None
    if _from_columns(args):
        from stackbench.resultsdb.tables import lkp_columns

        text = lkp_columns.quick_render(conn, args.kernels, args.suite)
        if text is not None:
            conn.close()
            _print(text)
            return 0
    hit = textcache.quick_lookup(textcache.View(tuple(args.kernels), **options(args)), conn)
    if hit is None:
        args.quick_conn = conn  # the cold path computes the table on it
        return None
    conn.close()
    for line in hit.warnings:
        _warn(line)
    _print(hit.text)
    return 0


def _from_columns(args: argparse.Namespace) -> bool:
    """An LKP ``--all`` table made of kept per-kernel columns (tables/lkp_columns). It is
    not kept as a text: made of columns, it takes no longer than reading the kept text back
    would. The machine and suite-source choices take the full path."""
    return (
        args.style == "lkp"
        and args.all
        and not (args.machine or args.pool_machines or args.suite_source)
    )


def run(args: argparse.Namespace) -> int:
    import os

    from stackbench import config

    # numpy's OpenBLAS starts a thread per core when numpy is imported, and those threads
    # spin for a while: on a busy 2-core machine that doubled numpy's import (55 -> 60-160
    # ms). A table's arrays are far too small for threaded BLAS; a user's setting stays.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    if config.server_url():
        from stackbench import apiclient  # urllib's HTTP stack only when it talks HTTP

        client = apiclient.client()
        if (
            args.table
            or args.monitor
            or args.machine
            or args.pool_machines
            or args.suite_source
            or args.style in SEED_STYLES
        ):
            from stackbench.errors import StackbenchError

            raise StackbenchError(
                "--table/--monitor/--machine/--pool-machines/--suite-source and the seed "
                "styles are not available through STACKBENCH_URL; open the comparison page, "
                "or unset STACKBENCH_URL to read the database"
            )
        out = client.compare(args.kernels, style=args.style, all_rows=args.all, suite=args.suite)
    else:
        from stackbench.resultsdb.tables import textcache

        opts = options(args)
        view = textcache.View(tuple(args.kernels), **opts)
        out = None
        conn = getattr(args, "quick_conn", None)
        looked = conn is not None  # quick() looked already: a miss
        if conn is None:
            conn = textcache.quick_connect()
        if conn is not None:
            with conn:
                hit = None if looked else textcache.quick_lookup(view, conn)
                if hit is not None:
                    for line in hit.warnings:
                        _warn(line)
                    out = hit.text
                else:
                    out = _without_psycopg(conn, args.kernels, opts, view)
        if out is None:
            out = _without_sqlalchemy(args.kernels, opts, view)
        if out is None:
            from stackbench.resultsdb import db
            from stackbench.resultsdb.tables import render

            out = render.render(db.engine(), args.kernels, warn=_warn, cache=view, **opts)
        if args.plot:
            write_plot(args.plot, args.kernels, args.metric, args.machine)
    _print(out)
    return 0


def _print(out: str) -> None:
    print(out, end="" if out.endswith("\n") else "\n")


def options(args: argparse.Namespace) -> dict:
    """Every option that changes the printed table: render's arguments, and the key of the
    kept text (textcache.View), so that two commands share a kept table only when they
    would print the same one."""
    return {
        "style": args.style,
        "all_rows": args.all,
        "table": args.table,
        "monitor": args.monitor,
        "suite": args.suite,
        "machine": args.machine,
        "pool_machines": args.pool_machines,
        "metric": args.metric,
        "pass_no": args.pass_no,
        "suite_source": args.suite_source,
    }


def _warn(line: str) -> None:
    print(f"stackbench: warning: {line}", file=sys.stderr)


def _without_psycopg(conn, kernels: list[str], opts: dict, view) -> str | None:
    """The table computed and stored over ``conn`` (libpq, through pgsession): a cold
    table without psycopg's start-up. None when this path cannot serve (a schema to
    migrate, a type pgsession does not read, an error): the caller then takes psycopg's."""
    from stackbench.resultsdb import db, pgsession, pgwire
    from stackbench.resultsdb.tables import render, textcache

    session = pgsession.Session(conn)
    try:
        revision = session.execute("SELECT version_num FROM alembic_version").fetchone()
        if revision is None or revision[0] != db.head_revision():
            return None
        return render.render_on(session, kernels, warn=_warn, cache=view, **opts)
    except (textcache.Schema, pgwire.Error):
        return None


def _without_sqlalchemy(kernels: list[str], opts: dict, view) -> str | None:
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

            return render.render_on(conn, kernels, warn=_warn, cache=view, **opts)
        except (textcache.Schema, psycopg.Error):
            return None
