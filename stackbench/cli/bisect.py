"""stackbench bisect: find the commit that made a metric worse, on real kernels."""

from __future__ import annotations

import argparse
import sys

NAME = "bisect"
HELP = "bisect a performance regression between two commits with repeated runs"
DESCRIPTION = """\
Bisect METRIC of JOB between a good and a bad commit of TREE. Each step builds the commit
(reusing stored kernels), runs the job as often as stackbench's verdict needs against the
good kernel (reusing stored runs), and calls the commit good, bad, or skip (does not build
or boot, or still undecided at --runs-cap). The first bad commit is confirmed against its
parent with extra runs and reported with a confidence; when skipped commits hide the
answer the bisect is inconclusive and lists the candidates. Everything is recorded.

  --job     one sub-job, e.g. 'vm-scalability[test=anon-w-seq,runtime=10s]'
  --metric  e.g. vm-scalability.throughput (its direction says what "worse" is)

Exit status: 0 when a culprit was found, 1 otherwise."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--good", required=True, help="a commit where the metric is fine")
    p.add_argument("--bad", required=True, help="a commit where it is worse")
    p.add_argument("--job", required=True, help="job spec (one sub-job)")
    p.add_argument("--metric", required=True)
    p.add_argument("--tree", default="linux-6.1", help="kernel tree (kernels/trees/NAME.yaml)")
    p.add_argument("--runs", type=int, default=None, help="runs per step to start with")
    p.add_argument("--runs-cap", type=int, default=None, help="most runs per kernel")
    p.add_argument("--regression", type=int, default=None, help="record it for this regression")
    p.add_argument("--cpus", type=int, default=2, help="guest CPUs (default 2)")
    p.add_argument("--mem-mb", type=int, default=1024, help="guest memory (default 1024)")
    p.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    p.add_argument(
        "--buildbot",
        action="store_true",
        help="measure on the Buildbot master's workers, rounds shared out (default: here)",
    )


def policy_from(runs: int | None, cap: int | None):
    from dataclasses import replace

    from stackbench.errors import InputError
    from stackbench.resultsdb.verdict import DEFAULT

    p = DEFAULT
    if cap is not None:
        if cap < 2:
            raise InputError("--runs-cap", f"must be at least 2, not {cap}")
        p = replace(p, max_runs=cap, looks=tuple(x for x in p.looks if x < cap) + (cap,))
        if p.start_runs > cap:
            p = p.starting_at(cap)
    if runs is not None:
        if runs < 2 or runs > p.max_runs:
            raise InputError("--runs", f"must be between 2 and the cap ({p.max_runs}), not {runs}")
        p = p.starting_at(runs)
    return p


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import InputError
    from stackbench.jobs.executors.settings import Settings
    from stackbench.jobs.tracking import bisect_runner
    from stackbench.jobs.tracking.comparison import lab_for
    from stackbench.resultsdb import db

    policy = policy_from(args.runs, args.runs_cap)
    eng = db.engine()
    if args.buildbot and (args.cpus, args.mem_mb, args.accel) != (2, 1024, "auto"):
        raise InputError("--buildbot", "the workers' machine kind sets the guest: "
                         "--cpus, --mem-mb and --accel are for runs here")  # fmt: skip
    settings = Settings(cpus=args.cpus, mem_mb=args.mem_mb, accel=args.accel)
    lab = lab_for(settings, args.buildbot)

    def progress(msg: str) -> None:
        print(f"bisect: {msg}", file=sys.stderr, flush=True)

    done = bisect_runner.run_bisect(
        eng, lab, tree=args.tree, good=args.good, bad=args.bad, job=args.job,
        metric=args.metric, policy=policy, regression_id=args.regression, progress=progress,
    )  # fmt: skip
    res = done.result
    print(f"bisect {done.bisect_id}: {res.state} over {len(done.commits)} commit(s)")
    for st in res.steps:
        pct = f" {st.change_pct:+.1f}%" if st.change_pct is not None else ""
        why = f" ({st.reason})" if st.reason else ""
        print(f"  {st.commit[:12]} {st.verdict}{pct}, {st.runs} runs{why}")
    if res.culprit:
        conf = f" (confidence {res.confidence:.1%})" if res.confidence is not None else ""
        print(f"first bad commit: {res.culprit}{conf}; parent {res.parent}")
    elif res.candidates:
        print("candidates: " + " ".join(c[:12] for c in res.candidates))
    if res.message:
        print(res.message)
    print(f"{res.kernels_built} kernel(s) built")
    return 0 if res.state == "found" else 1
