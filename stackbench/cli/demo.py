"""stackbench demo: the whole pipeline on this machine with a shipped patch stack."""

from __future__ import annotations

import argparse
import sys

from stackbench.cli.submit import add_machine_arguments, print_summary, settings_from
from stackbench.errors import StackbenchError

NAME = "demo"
ORDER = 5
HELP = "run the shipped compaction stack end to end and show its tables (start here)"
DESCRIPTION = """\
Everything on this machine, no configuration: starts the embedded database, submits a
shipped patch stack (default compaction-demo: three mm patches on Linux 6.1) and applies it,
starts the embedded Buildbot master with one local QEMU worker (as 'stackbench up'), which
builds a kernel for the base and every commit (tinyconfig + kernels/configs/tiny-guest.config,
ccache; the first build takes minutes, the commits after it seconds), boots each once under
QEMU and runs vm-scalability, thpscale and stress-highalloc in small sizes (--runs each) and
stores every sample; then prints the LKP and mmtests comparison tables and serves the web
UI. --in-process does the building and benchmarking in this process instead.

Running it again reuses what exists: kernels are never rebuilt (artifact store), and a demo
series that already finished is NOT run again: its stored runs are shown at once. --rerun
boots every kernel again and adds a round of runs (more samples per kernel); changing --runs
or --jobs re-runs the series with the new plan.

Other stacks: broken-apply, broken-build, panic-boot, hang-boot show how failures look."""

# small sizes: a demo round is a few minutes per kernel under TCG
DEMO_JOBS = [
    "vm-scalability[test=anon-w-seq|anon-w-rand]",
    "thpscale[madvise=false]",
    "stress-highalloc",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="compaction-demo", help="a shipped stack (patches/stacks)")
    p.add_argument("--runs", type=int, default=3, help="runs of every job per kernel (3)")
    p.add_argument(
        "--jobs",
        default=None,
        metavar="SPEC,...",
        help="jobs instead of the demo's small ones: " + ", ".join(DEMO_JOBS),
    )
    p.add_argument("--rerun", action="store_true", help="add a round of runs to a finished demo")
    p.add_argument("--all", action="store_true", help="LKP table: every stat, not only changes")
    p.add_argument("--no-serve", action="store_true", help="do not start the web UI afterwards")
    p.add_argument("--port", type=int, default=8080, help="web UI port (127.0.0.1)")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="build and benchmark in this process instead of through the embedded Buildbot "
        "master and its local QEMU worker (the default when Buildbot is installed)",
    )
    add_machine_arguments(p)


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs import pipeline
    from stackbench.patches import stacks
    from stackbench.resultsdb import db

    info = stacks.stack_info(args.stack)
    mbox = stacks.stack_mbox(args.stack)
    jobs = pipeline.split_job_specs(args.jobs) if args.jobs else list(DEMO_JOBS)
    print(f"stackbench demo: stack {args.stack} ({info.get('tree', 'linux-6.1')})", flush=True)
    eng = db.engine()
    tree = info.get("tree") or "linux-6.1"
    base = info.get("base")
    base = None if base in (None, "default") else str(base)
    sid = pipeline.submit(eng, mbox, tree=tree, base=base, jobs=jobs, runs=args.runs)
    rerun = args.rerun or _plan_changed(eng, sid, jobs, args.runs)
    if not args.in_process and buildbot_installed():
        state = run_through_buildbot(eng, sid, jobs, args.runs, rerun=rerun)
    else:
        state = pipeline.run_series(
            eng, sid, progress=pipeline.StderrProgress(), settings=settings_from(args), rerun=rerun
        )
    print()
    print_summary(eng, sid)
    print()
    print_tables(eng, sid, all_rows=args.all)
    if not args.no_serve:
        serve(args.port, sid)
    return 0 if state == "done" else 1


def buildbot_installed() -> bool:
    import importlib.util

    found = all(importlib.util.find_spec(m) for m in ("buildbot", "buildbot_worker"))
    if not found:
        print("Buildbot is not installed here: building in this process", file=sys.stderr)
    return found


def run_through_buildbot(eng, sid: int, jobs: list[str], runs: int, *, rerun: bool) -> str:
    """Apply here, then let the embedded master build and benchmark every commit."""
    from stackbench.jobs import pipeline
    from stackbench.jobs import services as buildbot_services
    from stackbench.jobs.buildbot import client, drive
    from stackbench.resultsdb.models import Series

    with eng.connect() as conn:
        state = conn.execute(Series.__table__.select().where(Series.id == sid)).one().state
    if state == "done" and not rerun:
        return state
    applied = pipeline.apply_only(eng, sid, progress=pipeline.StderrProgress())
    if applied is None:
        return "apply-failed"
    print(buildbot_services.start(), flush=True)
    master = client.embedded_master()
    if master is None:
        raise StackbenchError("the embedded Buildbot master did not start")
    drive.wait_for_worker(master, buildbot_services.LOCAL_WORKER)
    return drive.run_series(
        eng,
        master,
        sid,
        jobs=jobs,
        runs=runs,
        names=[name for _commit, name in applied],
        say=lambda line: print(line, flush=True),
    )


def _plan_changed(eng, sid: int, jobs: list[str], runs: int) -> bool:
    """A stored demo series with another plan is re-run with the requested one."""
    from sqlalchemy.orm import Session

    from stackbench.resultsdb.models import Series

    with Session(eng) as s, s.begin():
        series = s.get(Series, sid)
        if series.meta.get("jobs") == jobs and series.meta.get("runs") == runs:
            return False
        series.meta = {**series.meta, "jobs": jobs, "runs": runs}
        return series.state == "done"


TABLES = [
    # (title, style, suite, options)
    ("vm-scalability (LKP)", "lkp", "vm-scalability", {}),
    ("thpscale (mmtests)", "mmtests", "thpscale", {}),
    ("stress-highalloc (mmtests)", "mmtests", "stress-highalloc", {}),
    ("stackbench verdicts (change, 95% interval, FDR-controlled)", "stackbench", None, {}),
]


def print_tables(eng, sid: int, *, all_rows: bool = False, out=None) -> None:
    out = out or sys.stdout  # looked up per call: tests and callers replace sys.stdout
    from sqlalchemy import func, select
    from sqlalchemy.orm import Session

    from stackbench.jobs import pipeline
    from stackbench.resultsdb.models import Patch, Run
    from stackbench.resultsdb.tables import render
    from stackbench.resultsdb.tables.mmtests import MixedSourcesError

    kernels = pipeline.series_kernels(eng, sid)
    with Session(eng) as s:
        measured = [
            k
            for k in kernels
            if s.scalar(select(func.count()).where(Run.build_id == k.id, Run.status == "done"))
        ]
    skipped = [k for k in kernels if k not in measured]
    for k in skipped:
        print(f"(no results for {k.commit[:12]} {k.name}: {k.status})", file=out)
    if not measured:
        print("no kernel of this series has results to compare", file=out)
        return
    with Session(eng) as s:
        subjects = {
            p.commit_sha: p.subject for p in s.scalars(select(Patch).where(Patch.series_id == sid))
        }
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


def serve(port: int, sid: int) -> None:
    try:
        from stackbench.web import create_app
    except ImportError:
        print("\nweb UI not installed here (stackbench.web); not serving", file=sys.stderr)
        return
    from werkzeug.serving import make_server

    app = create_app()
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(f"\nweb UI: http://127.0.0.1:{port}/series/{sid}  (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
