"""stackbench dispatcher: the service that runs every submitted series (``stackbench up``
starts it in the background)."""

from __future__ import annotations

import argparse
import logging
import signal

NAME = "dispatcher"
HELP = "(started by 'stackbench up') take every submitted series to done or failed"
DESCRIPTION = """\
Applies every series a front door stored (web form, POST /api/series, git push,
'stackbench submit --no-wait'), hands it to the Buildbot master ($STACKBENCH_BUILDBOT_URL or
the embedded one), or runs it here when there is no master, follows its builds and stored
runs to 'done' or 'failed' (with the reason), and queues its report mail. One dispatcher
works on a database at a time; a second one waits. SIGTERM stops it; a series it was
following is picked up again by the next one."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    # no default here: importing the dispatcher for its POLL_S would slow every command
    p.add_argument(
        "--poll", type=float, help="seconds between looks when nothing wakes it (default 10)"
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", force=True)
    logging.getLogger("stackbench").setLevel(logging.INFO)
    from stackbench.jobs.driver.dispatch import Dispatcher
    from stackbench.resultsdb import db

    disp = Dispatcher(db.engine())
    signal.signal(signal.SIGTERM, lambda *_: disp.stop.set())
    disp.serve(**({"poll": args.poll} if args.poll else {}))
    return 0
