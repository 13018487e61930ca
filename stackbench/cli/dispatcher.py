"""stackbench dispatcher: the service that runs every submitted series (``stackbench up``
starts it in the background)."""

from __future__ import annotations

import argparse
import logging
import signal

NAME = "dispatcher"
ORDER = 90
HELP = "(started by 'stackbench up') take every submitted series to done or failed"
DESCRIPTION = """\
Applies every series a front door stored (web form, POST /api/series, git push,
'stackbench submit --no-wait'), hands it to the Buildbot master ($STACKBENCH_BUILDBOT_URL or
the embedded one), or runs it here when there is no master, follows its builds and stored
runs to 'done' or 'failed' (with the reason), and queues its report mail. One dispatcher
works on a database at a time; a second one waits. SIGTERM stops it; a series it was
following is picked up again by the next one."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--poll", type=float, default=2.0, help="seconds between looks (default 2)")


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.dispatch import Dispatcher, hold_lock
    from stackbench.resultsdb import db

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", force=True)
    logging.getLogger("stackbench").setLevel(logging.INFO)
    eng = db.engine()
    disp = Dispatcher(eng)
    signal.signal(signal.SIGTERM, lambda *_: disp.stop.set())
    lock = hold_lock(eng, lambda: not disp.stop.is_set())
    if lock is None:
        return 0
    logging.getLogger("stackbench").info(
        "dispatcher: working on %s", eng.url.render_as_string(hide_password=True)
    )
    try:
        disp.run(poll=args.poll)
    finally:
        lock.close()
    return 0
