"""stackbench demo: the whole pipeline on this machine with a shipped patch stack."""

from __future__ import annotations

import argparse
import sys

from stackbench.cli._follow import (
    add_guest_arguments,
    option_values,
    print_summary,
    run_here,
    run_through_dispatcher,
    runner,
)
from stackbench.errors import StackbenchError
from stackbench.jobs.executors.settings import DEFAULT_RUNS

NAME = "demo"
HELP = "run the shipped compaction stack end to end and show its tables (start here)"
DESCRIPTION = """\
Everything on this machine, no configuration: starts the embedded database, stores a shipped
patch stack (default compaction-demo: three mm patches on Linux 6.1) like any submission,
starts the embedded Buildbot master with one local QEMU worker and the dispatcher (as
'stackbench up') and hands the series to the dispatcher, which applies it and has the master
build a kernel for the base and every commit (tinyconfig + kernels/configs/tiny-guest.config,
ccache; the first build takes minutes, the commits after it seconds), boot each under QEMU
and run vm-scalability, thpscale and stress-highalloc in small sizes (--runs each). The demo
only watches what is stored (progress with an ETA), then prints the LKP and mmtests
comparison tables and serves the web UI. --in-process does the building and benchmarking in
this process instead.

Interrupting it (Ctrl-C) stops only the watching: the series goes on, and running the same
demo again attaches to it (never a second submission). A finished demo series is NOT run
again: its stored runs are shown at once. --rerun adds a round of runs (more samples per
kernel); changing --runs or --jobs re-runs the series with the new plan; a failed series is
tried again.

Other stacks: broken-apply, broken-build, panic-boot, hang-boot show how failures look."""

# small sizes: a demo round is a few minutes per kernel under TCG
DEMO_JOBS = [
    "vm-scalability[test=anon-w-seq|anon-w-rand]",
    "thpscale[madvise=false]",
    "stress-highalloc",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="compaction-demo", help="a shipped stack (patches/stacks)")
    p.add_argument(
        "--runs", type=int, default=DEFAULT_RUNS,
        help=f"runs of every job per kernel ({DEFAULT_RUNS})",
    )  # fmt: skip
    p.add_argument(
        "--jobs",
        default=None,
        metavar="SPEC,...",
        help="jobs instead of the demo's small ones: " + ", ".join(DEMO_JOBS),
    )
    p.add_argument(
        "--max-boots",
        type=int,
        default=None,
        metavar="N",
        help="boots per kernel that undecided headline metrics may add rounds up to "
        "(default 10; at most the runs' own boots: no more rounds)",
    )
    p.add_argument("--rerun", action="store_true", help="add a round of runs to a finished demo")
    p.add_argument(
        "--check-claims",
        action="store_true",
        help="measure the claims of the stack's cover letter (its LKP and mmtests tables) "
        "and show each claim's status",
    )
    p.add_argument("--all", action="store_true", help="LKP table: every stat, not only changes")
    p.add_argument("--no-serve", action="store_true", help="do not start the web UI afterwards")
    p.add_argument("--port", type=int, default=8080, help="web UI port (127.0.0.1)")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="build and benchmark in this process instead of through the embedded Buildbot "
        "master and its local QEMU worker (the default when Buildbot is installed)",
    )
    add_guest_arguments(p)


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.driver import claims_plan, intake
    from stackbench.patches import stacks
    from stackbench.resultsdb import db, series_store

    info = stacks.stack_info(args.stack)
    print(f"stackbench demo: stack {args.stack} ({info.get('tree', 'linux-6.1')})", flush=True)
    eng = db.engine()
    base = info.get("base")
    who = runner(args)
    sub = intake.Submission(
        source="demo",
        tree=info.get("tree") or "linux-6.1",
        base=None if base in (None, "default") else str(base),
        mbox=stacks.stack_mbox(args.stack),
        filename=f"stack {args.stack}",
        options=option_values(args, jobs=args.jobs or list(DEMO_JOBS)),
        runner=who,
    )
    # idempotent: the same stack gives the stored series back
    with db.session(eng) as s:
        taken = intake.take(s, sub)
        sid = taken.series.id
        # a demo stored before without its claims checked gets them now
        if (
            taken.options.check_claims
            and claims_plan.opt_in(s, taken.series)
            and taken.series.state == "done"
        ):
            series_store.merge_meta(taken.series, claims_rerun=True)
    fresh = _plan_changed(eng, sid, taken.options) or args.rerun
    if who == intake.WATCHER:
        state = run_through_dispatcher(eng, sid, fresh=fresh, source="demo")
    else:
        state = run_here(eng, sid, taken.options.settings(), rerun=fresh)
    print()
    print_summary(eng, sid)
    print()
    print_tables(eng, sid, all_rows=args.all)
    print_claims(eng, sid)
    link = comparison_line(eng, sid, args.port)
    if not args.no_serve:
        serve(args.port, sid, link)
    elif link:
        print(f"\n{link}")
    return 0 if state == "done" else 1


def comparison_line(eng, sid: int, port: int) -> str:
    """The line that links the series' public comparison (made once by the service when the
    series ended; made here for a series that ended before that), "" when there is none."""
    from stackbench.jobs.driver import lifecycle

    if _state(eng, sid) not in ("done", "failed"):
        return ""
    key = lifecycle.publish_comparison(eng, sid)
    if not key:
        return ""
    return (
        f"comparison of the base and every commit (public, no account needed): "
        f"http://127.0.0.1:{port}/compare/{key}"
    )


def _state(eng, sid: int) -> str:
    from stackbench.resultsdb import db, series_store

    with db.session(eng) as s:
        return series_store.state_of(s, sid)


def _plan_changed(eng, sid: int, options) -> bool:
    """A stored demo series with another plan is re-run with the requested one; a new
    --max-boots is its cap from now on."""
    from stackbench.resultsdb import claims_store, db, series_runs_store, series_store

    jobs = list(options.jobs or ())
    with db.session(eng) as s:
        series = series_store.get(s, sid)
        plan = series_runs_store.current(s, sid)
        if plan is None:  # stored before any attempt held its plan: this one waits for us
            plan = series_runs_store.begin(
                s, sid, source="demo", executor=series_runs_store.WAITING
            )
        for name in ("max_boots", "adaptive"):
            if getattr(options, name) is not None:
                setattr(plan, name, getattr(options, name))
        own, added = claims_store.own_jobs(series), series.meta.get("claims_jobs") or []
        rerun = series.meta.get("claims_rerun")  # its claims' jobs joined a finished demo
        if own == jobs and plan.runs == options.runs and not rerun:
            return False
        plan.jobs, plan.runs = [*jobs, *added], options.runs
        series_store.merge_meta(series, claims_rerun=False)
        return series.state == "done"


TABLES = [
    # (title, style, suite, options)
    ("vm-scalability (LKP)", "lkp", "vm-scalability", {}),
    ("thpscale (mmtests)", "mmtests", "thpscale", {}),
    ("stress-highalloc (mmtests)", "mmtests", "stress-highalloc", {}),
    ("stackbench verdicts (change, decision's interval, FDR-controlled)", "stackbench", None, {}),
]


def print_claims(eng, sid: int) -> None:
    """The claims section of the report, when the series kept its cover letter's claims."""
    from stackbench.resultsdb import claims_check
    from stackbench.resultsdb.tables import claims as claims_text

    report = claims_check.check_series(eng, sid)
    if report is not None:
        print("\n" + "\n".join(claims_text.lines(report)))


def print_tables(eng, sid: int, *, all_rows: bool = False, out=None) -> None:
    out = out or sys.stdout  # looked up per call: tests and callers replace sys.stdout
    from stackbench.resultsdb import db, kernels_store, series_store
    from stackbench.resultsdb.tables import render
    from stackbench.resultsdb.tables.mmtests import MixedSourcesError

    with db.session(eng) as s:
        kernels = kernels_store.series_kernels(s, sid)
        measured = [k for k in kernels if kernels_store.done_run_count(s, k.id)]
    skipped = [k for k in kernels if k not in measured]
    for k in skipped:
        print(f"(no results for {k.commit[:12]} {k.name}: {k.status})", file=out)
    if not measured:
        print("no kernel of this series has results to compare", file=out)
        return
    with db.session(eng) as s:
        subjects = series_store.patch_subjects(s, sid)
    print("kernels:", file=out)
    for k in measured:
        print(f"  {k.name:<14} {k.commit[:12]}  {subjects.get(k.commit, 'base')}", file=out)
    refs = [k.commit for k in measured]
    for title, style, suite, opts in TABLES:
        if style == "lkp":
            opts = {**opts, "all_rows": all_rows}
        try:
            text = render.render(eng, refs, style=style, suite=suite, **opts)
        except MixedSourcesError:
            # upstream and builtin runs of the suite: a table for each, never one pooled
            for source in ("upstream", "builtin"):
                text = render.render(eng, refs, style=style, suite=suite, suite_source=source)
                print(f"\n== {title}, suite_source={source} ==", file=out)
                print(text.rstrip("\n"), file=out)
            continue
        except StackbenchError as exc:
            text = f"(none: {exc})"
        print(f"\n== {title} ==", file=out)
        print(text.rstrip("\n"), file=out)


def serve(port: int, sid: int, link: str = "") -> None:
    try:
        from stackbench.web import create_app
    except ImportError:
        print("\nweb UI not installed here (stackbench.web); not serving", file=sys.stderr)
        return
    from werkzeug.serving import make_server

    app = create_app()
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(f"\nweb UI: http://127.0.0.1:{port}/series/{sid}  (Ctrl-C stops)", flush=True)
    if link:
        print(link, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
