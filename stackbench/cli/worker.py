"""stackbench worker: the steps Buildbot runs on a worker (their logic: jobs.executors.worker)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from stackbench import config
from stackbench.jobs.executors.settings import DEFAULT_RUNS

NAME = "worker"
HELP = "worker-side steps run by Buildbot (build, bench, baremetal, upload, mark-lost)"
DESCRIPTION = """\
Each step does one part of the pipeline on this machine and leaves files for the next:
'build' writes out/kernel.tar, 'bench' writes one JSON payload per run into results/,
'upload' sends them to stackbench, 'mark-lost' records attempts whose worker vanished;
on a bare-metal box 'baremetal' queues the job and kexecs into its kernel.
--dry-kernel replaces the kernel build and the guest run by synthetic ones."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="worker_command", metavar="STEP", required=True)

    b = sub.add_parser("build", help="build one commit into out/kernel.tar")
    b.add_argument("--commit", required=True)
    b.add_argument("--tree", default="linux-6.1")
    b.add_argument("--config", default="tiny-guest")
    b.add_argument("--series", default="")
    b.add_argument("--name", default="", help="display name of the kernel")
    b.add_argument("--out", type=Path, default=Path("out"))
    _dry(b)

    for name, helptext in (
        ("bench", "run jobs N times each in one boot of a built kernel; one payload per run"),
        ("baremetal", "queue one job on this bare-metal box and kexec into its kernel"),
        ("mark-lost", "record attempts of this benchmark that lost their worker"),
        ("await-box", "wait for a queued bare-metal job's runs; mark the attempt lost"),
    ):
        c = sub.add_parser(name, help=helptext)
        if name == "bench":
            # a round boots several kernels in this one process, in order, each its boot
            c.add_argument("--kernel", type=Path, action="append", required=True,
                           help="kernel.tar from 'build'; repeat for the boots of a round")  # fmt: skip
        else:
            c.add_argument("--kernel", type=Path, required=True, help="kernel.tar from 'build'")
        if name == "bench":
            # a boot of a round runs every job of the series, as the in-process executor does
            c.add_argument("--job", action="append", required=True, help="repeat for more jobs")
        else:
            c.add_argument("--job", required=True)
        c.add_argument("--submission", required=True)
        c.add_argument("--kind", default="qemu", choices=["qemu", "baremetal"])
        c.add_argument("--machine", default=socket.gethostname())
        c.add_argument("--cpus", type=int, help="the worker's CPUs (its capacity)")
        c.add_argument("--memory-mb", type=int, help="the worker's memory (its capacity)")
        c.add_argument(
            "--guest-cpus", type=int, help="guest CPUs the job asks for (default: the kind's, 2)"
        )
        c.add_argument(
            "--guest-memory-mb",
            type=int,
            help="guest memory the job asks for (default: the kind's, 1024)",
        )
        c.add_argument("--series", default="")
        c.add_argument("--buildbot-build", default="")
        if name in ("bench", "baremetal"):
            c.add_argument("--runs", type=int, default=DEFAULT_RUNS)
            _dry(c)
        if name == "bench":
            c.add_argument(
                "--round", type=int, default=1, help="the plan's round this boot belongs to (1)"
            )
            c.add_argument(
                "--first",
                type=int,
                action="append",
                help="iteration number of this boot's first run in the kernel's plan (0); "
                "one per --kernel",
            )
            c.add_argument("--worker", default="", help="the Buildbot worker (recorded per run)")
            c.add_argument(
                "--boot-index", type=int, help="this boot's place in its round's build (none)"
            )
            c.add_argument(
                "--skip-stored",
                action="store_true",
                help="boot only when this boot's runs are not stored yet (a retried round)",
            )
            c.add_argument("--out", type=Path, default=Path("results"))
            c.add_argument(
                "--upload",
                action="store_true",
                help="send the payloads too, as 'upload' does (one process per benchmark)",
            )
            c.add_argument("--url", help="with --upload: as 'upload --url'")
            c.add_argument(
                "--evidence",
                default="",
                metavar="FUNCTIONS",
                help="an evidence boot of each --kernel instead: count calls of these "
                "comma-separated functions, store no run, print the counts as JSON",
            )
        elif name == "baremetal":
            c.add_argument(
                "--spool",
                type=Path,
                default=Path(config.get("STACKBENCH_BAREMETAL_DIR")),
                help="the box's job spool (default $STACKBENCH_BAREMETAL_DIR or %(default)s)",
            )
            c.add_argument(
                "--kexec",
                default=config.get("STACKBENCH_KEXEC"),
                help="the stackbench-kexec helper (default $STACKBENCH_KEXEC or %(default)s)",
            )
            c.add_argument(
                "--kexec-delay",
                type=int,
                default=10,
                help="seconds between queueing and the kexec (this step must end first)",
            )
        elif name == "mark-lost":
            c.add_argument(
                "--lost", action="append", default=[], metavar="BUILDID:WORKER", required=True
            )
            _lost_detail(c)
        else:
            c.add_argument(
                "--queued",
                type=Path,
                required=True,
                help="the JSON line 'worker baremetal' printed, in a file",
            )
            c.add_argument("--timeout", type=float, default=4 * 3600.0)
            c.add_argument("--poll", type=float, default=30.0)
            c.add_argument("--url", help="stackbench server (default $STACKBENCH_URL)")
            _lost_detail(c)  # fmt: skip

    u = sub.add_parser("upload", help="send the run payloads of a results directory")
    u.add_argument("--results", type=Path, default=Path("results"))
    u.add_argument("--url", help="stackbench server (default $STACKBENCH_URL; none: database)")


def _lost_detail(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", default="", help="why the attempt is lost (stored with it)")
    p.add_argument("--console", type=Path, help="the box's console log; its tail is stored")


def _dry(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-kernel", action="store_true", help="synthetic kernel and samples")
    p.add_argument("--dry-seconds", type=float, default=0.0, help="time a dry step takes")


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.executors import worker, worker_box

    return {
        "build": worker.cmd_build,
        "bench": worker.cmd_bench,
        "baremetal": worker_box.cmd_baremetal,
        "mark-lost": worker_box.cmd_mark_lost,
        "await-box": worker_box.cmd_await_box,
        "upload": worker.cmd_upload,
    }[args.worker_command](args)
