"""stackbench intake-push: the git intake hooks' command (stackbench.jobs.driver.push_intake)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

NAME = "intake-push"
HELP = "(used by the git intake hook) register pushed commits as a series"
DESCRIPTION = """\
Run by the hooks that stackbench.patches.intake.install_hook writes into the intake
repository; reads git's hook input ('<old> <new> <ref>' lines) on stdin.

  --hook pre-receive   check only: refuse refs outside refs/for/<tree>/<base>, unknown
                       trees, deletions, merges, empty ranges and unknown push options
  --hook post-receive  register each pushed range as a series (one patch per commit),
                       keep it under refs/stackbench/series/<ID>, print its ID and URL

Push options are the submission's options (stackbench.jobs.driver.intake.Options), validated
like every submission's (runs 1..30, jobs with overrides, max_boots, adaptive):
  git push -o runs=5 -o 'jobs=thpscale,vm-scalability[test=anon-w-seq]' ..."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hook",
        choices=["pre-receive", "post-receive"],
        default="post-receive",
        help="which hook is running (default post-receive: register)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=None,
        help="the bare intake repository (default: $GIT_DIR, as git sets it for hooks)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench.jobs.driver import push_intake
    from stackbench.patches import intake

    repo = (args.repo or Path(os.environ.get("GIT_DIR", "."))).resolve()
    updates = intake.read_hook_input(sys.stdin.read())
    options = intake.read_push_options(os.environ)
    if args.hook == "pre-receive":
        push_intake.check(repo, updates, options)
        return 0
    for line in push_intake.register(repo, updates, options, os.environ.get("REMOTE_USER")):
        print(line)
    return 0
