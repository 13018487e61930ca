"""Following a stored series from the command line, shared by ``demo`` and ``submit``: who
runs it (the dispatcher through Buildbot, watched here, or this very process), handing it
over and watching it, and the summary printed at its end. Not a command (the leading
underscore keeps it out of the command list)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_guest_arguments(p: argparse.ArgumentParser) -> None:
    """The guest of an --in-process run (intake.Options' cpus, mem_mb, accel); given with
    a run through the dispatcher, the intake refuses them."""
    g = p.add_argument_group("guest (with --in-process)")
    g.add_argument("--cpus", type=int, default=None, help="guest CPUs (default 2)")
    g.add_argument("--mem-mb", type=int, default=None, help="guest memory (default 1024)")
    g.add_argument(
        "--accel",
        choices=["auto", "kvm", "tcg"],
        default=None,
        help="auto (the default) probes KVM and falls back to TCG",
    )


def option_values(args: argparse.Namespace, **given: Any) -> dict[str, Any]:
    """The submission's options among the command's arguments, by the name of each
    intake.Options field (a later opt-in needs only its flag); ``given`` wins."""
    from stackbench.jobs.driver.intake import Options

    return {**{n: getattr(args, n) for n in Options.names() if hasattr(args, n)}, **given}


def runner(args: argparse.Namespace) -> str:
    """Who runs the series a waiting command stored: this process with --in-process or
    without Buildbot, else the dispatcher at Buildbot, watched from here."""
    from stackbench.jobs.driver import intake

    if args.in_process or not buildbot_installed():
        return intake.HERE
    return intake.WATCHER


def buildbot_installed() -> bool:
    import importlib.util

    found = all(importlib.util.find_spec(m) for m in ("buildbot", "buildbot_worker"))
    if not found:
        print("Buildbot is not installed here: building in this process", file=sys.stderr)
    return found


def run_through_dispatcher(eng, sid: int, *, fresh: bool, source: str) -> str:
    """Hand the series to the dispatcher (which applies it and submits it to the embedded
    master once) and watch what is stored until it ends. Interrupting this changes nothing:
    the same command again attaches to the same series and buildset."""
    from stackbench.jobs.driver import dispatcher_service, lifecycle, watch
    from stackbench.jobs.executors import services as buildbot_services

    how = lifecycle.hand_over(eng, sid, source=source, fresh=fresh)
    if how == "finished":
        print(f"series {sid} already done: its stored runs (--rerun adds a round)", flush=True)
        return "done"
    if how == "apply-failed":
        return how
    if how != "attached":
        # said at once: the dispatcher may take the series while its services still start
        print(f"series {sid} submitted to the dispatcher; it hands it to Buildbot", flush=True)

    def keep_alive() -> str | None:
        # the service of record must outlive this client, and come back if it died
        if dispatcher_service.running_pid():
            return None
        return dispatcher_service.start()

    try:
        print(buildbot_services.start(), flush=True)
        print(dispatcher_service.start(), flush=True)
        if how == "attached":
            _say_attached(eng, sid)
        return watch.follow(
            eng, sid, say=lambda line: print(line, flush=True), keep_alive=keep_alive
        )
    except KeyboardInterrupt:
        print(
            f"{source} interrupted: Buildbot goes on with series {sid}; run the same "
            f"'stackbench {source}' again to attach to it",
            file=sys.stderr,
        )
        raise


def _say_attached(eng, sid: int) -> None:
    from stackbench.resultsdb import db, series_runs_store

    with db.session(eng) as s:
        dispatch = series_runs_store.dispatch(s, sid)
    bsid = dispatch.buildset if dispatch is not None else None
    where = f"buildset {bsid}, " if bsid else ""
    print(f"buildbot: series {sid} attached ({where}already submitted)", flush=True)


def run_here(eng, sid: int, settings, *, rerun: bool) -> str:
    """--in-process: this process is the executor (the same plan and state code as the
    dispatcher's in-process executor). A series the dispatcher is running is watched."""
    from stackbench.jobs.driver import lifecycle, pipeline, watch
    from stackbench.jobs.executors.progress import StderrProgress
    from stackbench.resultsdb import db, series_runs_store, series_store

    with db.session(eng) as s:
        how = series_runs_store.executor(s, sid)
        state = series_store.state_of(s, sid)
    if how in ("buildbot", "in-process") and state in lifecycle.PENDING:
        print(f"series {sid} is being run by the dispatcher: watching it", flush=True)
        return watch.follow(eng, sid, say=lambda line: print(line, flush=True))
    return pipeline.run_series(eng, sid, progress=StderrProgress(), settings=settings, rerun=rerun)


def print_summary(eng, series_id: int, out=None) -> None:
    out = out or sys.stdout  # looked up per call: tests and callers replace sys.stdout
    from stackbench.resultsdb import db, kernels_store, series_store

    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        print(f"series {series.id}: {series.title} [{series.state}]", file=out)
        if series.error:
            print(f"  {series.error.splitlines()[0]}", file=out)
        for k in kernels_store.stack(series):
            label, commit = k.label, k.commit
            if not commit:
                print(f"  {label:>5}  (not applied)", file=out)
                continue
            row = kernels_store.first_build(s, commit)
            status = row.status if row else "not built"
            runs = kernels_store.run_statuses(s, row.id) if row is not None else []
            counts = ", ".join(f"{runs.count(st)} {st}" for st in sorted(set(runs)))
            print(f"  {label:>5}  {commit[:12]}  {status:<12} {counts}", file=out)
