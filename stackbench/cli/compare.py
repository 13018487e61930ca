"""stackbench compare: the comparison tables of stored kernels."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
from typing import TYPE_CHECKING

from stackbench import config
from stackbench.errors import InputError, StackbenchError
from stackbench.resultsdb import db

# every command module is imported for `stackbench --help`: the database's and the tables'
# modules (psycopg, numpy: 150-250 ms measured) are imported where a command uses them
if TYPE_CHECKING:
    import psycopg

    from stackbench.resultsdb.tables import textcache

NAME = "compare"
HELP = "print LKP, mmtests or stackbench comparison tables for stored kernels"
DESCRIPTION = """\
Compare kernels, the first one being the base. A KERNEL is a commit (a unique prefix is
enough) or an mmtests run name.

  --style lkp        LKP's 'lkp ncompare' table (%stddev %change); rows LKP's change rule
                     selects, or every stat with --all
  --style mmtests    compare-mmtests.pl's tables (thpscale era): --table latency|counts|
                     locality|significance|highalloc,
                     or a monitor block with --monitor duration|vmstat
  --style stackbench stackbench's verdicts: base and new as the test summarises the boots
                     (mean, or median for a rank-tested latency), change, the decision's
                     interval, significance after false-discovery-rate control; the changed
                     and undecided headline metrics, largest first, and a line counting the
                     rest (--all: every row)
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
    from stackbench.resultsdb import query
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


def _from_columns(args: argparse.Namespace) -> bool:
    """An LKP ``--all`` table made of kept per-kernel columns (tables/lkp_columns) when
    its text is not kept yet. The machine and suite-source choices take the full path."""
    return (
        args.style == "lkp"
        and args.all
        and not (args.machine or args.pool_machines or args.suite_source)
    )


def run(args: argparse.Namespace) -> int:
    # numpy's OpenBLAS starts a thread per core when numpy is imported, and those threads
    # spin for a while: on a busy 2-core machine that doubled numpy's import (55 -> 60-160
    # ms). A table's arrays are far too small for threaded BLAS; a user's setting stays.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    if config.server_url():
        from stackbench import apiclient  # urllib's HTTP stack: 40-85 ms measured

        client = apiclient.client()
        if (
            args.table
            or args.monitor
            or args.machine
            or args.pool_machines
            or args.suite_source
            or args.style in SEED_STYLES
        ):
            raise StackbenchError(
                "--table/--monitor/--machine/--pool-machines/--suite-source and the seed "
                "styles are not available through STACKBENCH_URL; open the comparison page, "
                "or unset STACKBENCH_URL to read the database"
            )
        out = client.compare(args.kernels, style=args.style, all_rows=args.all, suite=args.suite)
    else:
        out = _local(args)
        if args.style == "stackbench":
            out = _with_claims(out, args.kernels)
        if args.plot:
            write_plot(args.plot, args.kernels, args.metric, args.machine)
    _print(out)
    return 0


def _with_claims(out: str | bytes, refs: list[str]) -> str | bytes:
    """The table, followed by the claims section of the series these kernels are (base and
    every commit), when that series kept its cover letter's claims."""
    from stackbench.resultsdb import claims_check
    from stackbench.resultsdb.tables import claims as claims_text

    eng = db.engine()
    sid = claims_check.series_of_kernels(eng, refs)
    report = claims_check.check_series(eng, sid) if sid is not None else None
    if report is None:
        return out
    text = out.decode() if isinstance(out, bytes) else out
    return text.rstrip("\n") + "\n\n" + "\n".join(claims_text.lines(report)) + "\n"


def _print(out: str | bytes) -> None:
    # a kept table's UTF-8 bytes go out as they are, unless stdout is text only (a caller's
    # StringIO) or encodes otherwise
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    if isinstance(out, bytes) and (
        not hasattr(sys.stdout, "buffer") or codecs.lookup(encoding).name != "utf-8"
    ):
        out = out.decode()
    if isinstance(out, str):
        print(out, end="" if out.endswith("\n") else "\n")
        return
    # a kept table, as the server sent its bytes: after what was printed before it
    sys.stdout.flush()
    sys.stdout.buffer.write(out if out.endswith(b"\n") else out + b"\n")


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


def _local(args: argparse.Namespace) -> str:
    """The table from the configured database, through one psycopg connection: the kept
    text when the runs are unchanged, an LKP ``--all`` table of kept columns, or the table
    computed there and kept. A database that is not at this stackbench's revision goes
    through db.engine() once, which migrates an empty one and names the command otherwise."""
    from stackbench.resultsdb.tables import textcache

    try:
        with db.connect() as conn:
            return _on(conn, args)
    except textcache.Schema:
        db.ensure_schema(db.engine(migrate=False))
        with db.connect() as conn:
            return _on(conn, args)


def _on(conn: psycopg.Connection, args: argparse.Namespace) -> str | bytes:
    from stackbench.resultsdb.tables import textcache

    opts = options(args)
    view = textcache.View(tuple(args.kernels), **opts)
    hit = textcache.lookup(view, conn)
    if hit is not None:
        for line in hit.warnings:
            _warn(line)
        return hit.text
    if _from_columns(args):
        text = _from_kept_columns(conn, args, view)
        if text is not None:
            return text
    # the tables bring numpy (50-70 ms measured): a kept text or kept columns need none
    from stackbench.resultsdb.tables import render

    return render.render(conn, args.kernels, warn=_warn, cache=view, **opts)


def _from_kept_columns(
    conn: psycopg.Connection, args: argparse.Namespace, view: textcache.View
) -> str | None:
    """The ``--all`` table of kept columns, kept as a text for the next same command, or
    None when the columns cannot serve it."""
    import psycopg

    from stackbench.resultsdb.tables import lkp_columns, textcache

    made = None
    with conn.transaction():
        # one snapshot for the columns and the runs' fingerprint: runs added meanwhile
        # make the kept text stale, never wrong
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        made = lkp_columns.render_kept(conn, args.kernels, args.suite)
        if made is None:
            raise psycopg.Rollback()  # the full path computes the table or says why not
        fp = textcache.fingerprint(conn, made[1])
    if made is None:
        return None
    text, build_ids = made
    try:
        with conn.transaction():
            textcache.store(conn, view, build_ids, fp, text, [])
    except psycopg.Error as exc:
        _warn(textcache.not_kept(exc))
    return text
