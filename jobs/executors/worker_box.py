"""The bare-metal box's side of ``stackbench worker`` (``baremetal``, ``mark-lost``,
``await-box``): queueing a job for the box and kexec'ing into its kernel, and recording the
attempts that never reported back. The command line is parsed in stackbench/cli/worker.py."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path

from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.executors.worker import read_kernel, run_specs

# -- baremetal ------------------------------------------------------------------------------


def _bench_argv(args: argparse.Namespace) -> list[str]:
    """The ``stackbench worker bench`` command the box runs after booting the test kernel."""
    from stackbench.jobs.executors.services import stackbench_argv

    argv = [*stackbench_argv(), "worker", "bench", "--kernel", "kernel.tar", "--job", args.job]
    argv += ["--submission", args.submission, "--kind", args.kind, "--machine", args.machine]
    for flag, value in (
        ("--cpus", args.cpus),
        ("--memory-mb", args.memory_mb),
        ("--guest-cpus", args.guest_cpus),
        ("--guest-memory-mb", args.guest_memory_mb),
        ("--series", args.series),
        ("--buildbot-build", args.buildbot_build),
    ):
        if value not in (None, ""):
            argv += [flag, str(value)]
    argv += ["--runs", str(args.runs), "--out", "results"]
    if args.dry_kernel:
        argv += ["--dry-kernel", "--dry-seconds", str(args.dry_seconds)]
    return argv


def find_kexec_image(kernel_dir: Path) -> Path:
    """The bzImage of an unpacked kernel.tar (a real build keeps it under artifact/)."""
    for rel in ("artifact/bzImage", "bzImage"):
        if (kernel_dir / rel).is_file():
            return kernel_dir / rel
    raise InputError(kernel_dir, "no bzImage in the kernel artifact: nothing to kexec")


def cmd_baremetal(args: argparse.Namespace) -> int:
    """Queue the job for the box's next boot and arm the kexec; print what to wait for.

    The last line of output is JSON: the job id, the commit and the idempotency keys of the
    runs the box will upload (the master's wait step looks for exactly those).
    """
    from stackbench import config, proc
    from stackbench.jobs.executors.buildbot import reported, results
    from stackbench.jobs.executors.services import stackbench_argv

    if args.runs < 1:
        raise StackbenchError("--runs must be at least 1")
    staging = Path("bm-kernel")
    meta = read_kernel(args.kernel, staging)
    kernel, _machine = run_specs(args, meta)
    base = results.key_base(
        args.submission, kernel.commit, kernel.config_hash, kernel.compiler, args.job, args.kind
    )
    keys = [results.run_key(base, i) for i in range(args.runs)]
    url = config.server_url()
    job_id = re.sub(r"[^A-Za-z0-9._-]", "_", f"{args.buildbot_build or 'manual'}-{base[:12]}")
    plan = {"job_id": job_id, "commit": kernel.commit, "keys": keys, "machine": args.machine}
    # a retry after an attempt whose box did report: the runs are there, no second kexec
    if set(keys) <= reported.stored_keys(keys, kernel.commit, url):
        print(f"all {len(keys)} run(s) of {args.job} on {kernel.commit[:12]} already reported")
        print(json.dumps({**plan, "already": True}))
        return 0
    incoming = args.spool / "incoming" / job_id
    if incoming.exists():
        shutil.rmtree(incoming)
    incoming.mkdir(parents=True)
    shutil.copy2(args.kernel, incoming / "kernel.tar")
    shutil.move(str(staging), incoming / "kernel")
    image = find_kexec_image(incoming / "kernel")
    upload = [*stackbench_argv(), "worker", "upload", "--results", "results"]
    if url:
        upload += ["--url", url]
    job = {
        "id": job_id,
        "kernel": str(image.relative_to(incoming)),
        "append": "" if args.dry_kernel else _kexec_append(args, incoming / "kernel"),
        "bench_argv": _bench_argv(args),
        "upload_argv": upload,
        "job": args.job,
        "runs": args.runs,
        "commit": kernel.commit,
        "keys": keys,
    }
    results.write_payload(incoming, "job", job)
    argv = [args.kexec, "--delay", str(args.kexec_delay), str(incoming)]
    if os.geteuid() != 0:
        # the helper loads a kernel and reboots: root only, allowed by a sudoers rule
        argv = ["sudo", "-n", *argv]
    out = proc.run(argv, check=False, timeout=300)
    print(out.stdout, end="")
    if out.returncode != 0:
        raise StackbenchError(f"stackbench-kexec refused job {job_id} (exit {out.returncode})")
    print(f"job {job_id} queued on {args.machine}; kexec in {args.kexec_delay}s")
    print(json.dumps({**plan, "already": False}))
    return 0


def _kexec_append(args: argparse.Namespace, kernel_dir: Path) -> str:
    """The command line the job's knobs need, for the kexec (the box's own line is kept)."""
    from stackbench.jobs.executors import native
    from stackbench.resultsdb.rundata import MachineSpec

    machine = MachineSpec(
        name=args.machine, kind=args.kind, cpus=args.cpus, memory_mb=args.memory_mb
    )
    plan = native.plan_for_box(args.job, args.runs, machine)
    return native.kexec_append(kernel_dir / "artifact", plan)


# -- mark-lost -----------------------------------------------------------------------------


def parse_lost(text: str) -> tuple[str, str]:
    build, sep, worker = text.partition(":")
    if not sep or not build.isdigit() or not worker:
        raise StackbenchError(f"--lost {text!r}: expected BUILDID:WORKER")
    return build, worker


def cmd_mark_lost(args: argparse.Namespace) -> int:
    from stackbench.jobs.executors import box
    from stackbench.jobs.executors.buildbot import results
    from stackbench.resultsdb.rundata import JobSpec, MachineSpec, RunData

    meta = read_kernel(args.kernel, Path("lost-kernel"))
    kernel, _machine = run_specs(args, meta)
    base = results.key_base(
        args.submission, kernel.commit, kernel.config_hash, kernel.compiler, args.job, args.kind
    )
    payloads = []
    for text in args.lost:
        build, worker = parse_lost(text)
        run_data = RunData(
            job=JobSpec(suite=args.job, test="lost", runner="buildbot"),
            kernel=kernel,
            machine=MachineSpec(name=worker, kind=args.kind),
            iteration=0,
            samples={},
            source=results.SOURCE,
            status="lost",
            # a lost worker, or a bare-metal box that did not report in time
            error=box.lost_error(
                args.reason
                or f"Buildbot build {build} on {worker} was lost (worker gone or no results "
                f"reported); retried in build {args.buildbot_build} on {args.machine}",
                box.console_tail(args.console),
            ),
            meta={"buildbot_build": build, "retried_in": args.buildbot_build, "job": args.job},
            idempotency_key=results.lost_key(base, build),
        )
        payloads.append(results.to_payload(run_data))
    res = results.upload(payloads)
    print(f"marked {res.stored} lost attempt(s) ({res.present} already marked) in {res.target}")
    return 0


def cmd_await_box(args: argparse.Namespace) -> int:
    """Wait for the runs a queued bare-metal job will upload; a box that does not report in
    time has its attempt stored as one lost run (reason and console tail), and exits 1."""
    from stackbench import config
    from stackbench.jobs.executors import box
    from stackbench.jobs.executors.buildbot import results
    from stackbench.resultsdb.rundata import JobSpec, MachineSpec, RunData

    try:
        lines = [ln for ln in args.queued.read_text().splitlines() if ln.strip()]
        queued = json.loads(lines[-1])
        keys, commit, job_id = list(queued["keys"]), str(queued["commit"]), queued["job_id"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise InputError(args.queued, f"not what 'worker baremetal' printed: {exc}") from None
    url = args.url or config.server_url()
    out = box.wait_for_report(keys, commit, url, timeout_s=args.timeout, poll_s=args.poll)
    if out.status == "reported":
        print(f"job {job_id}: all {out.wanted} run(s) reported after {out.waited_s:.0f}s")
        return 0
    meta = read_kernel(args.kernel, Path("lost-kernel"))
    kernel, _machine = run_specs(args, meta)
    base = results.key_base(
        args.submission, kernel.commit, kernel.config_hash, kernel.compiler, args.job, args.kind
    )
    reason = f"job {job_id} on {args.machine}: {args.reason or out.reason}"
    lost = RunData(
        job=JobSpec(suite=args.job, test="lost", runner="buildbot"),
        kernel=kernel,
        machine=MachineSpec(name=args.machine, kind=args.kind),
        iteration=0,
        samples={},
        source=results.SOURCE,
        status="lost",
        error=box.lost_error(reason, box.console_tail(args.console)),
        meta={"job": args.job, "box_job": job_id, "found": out.found, "wanted": out.wanted},
        idempotency_key=results.lost_key(base, f"box-{job_id}"),
    )
    res = results.upload([results.to_payload(lost)], url=url)
    print(f"{reason} (marked lost in {res.target})")
    return 1
