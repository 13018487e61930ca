"""stackbench worker: the commands that Buildbot steps run on a worker.

Each command does one step of the pipeline on this machine and leaves files for the next:
``build`` writes ``out/kernel.tar`` (the master carries it to benchmark workers), ``bench``
writes one JSON payload per run into ``results/``, ``upload`` sends them to stackbench with the
worker's own token (or into the database on a one-machine setup), ``mark-lost`` records the
attempts whose worker vanished mid-step. On a bare-metal box ``baremetal`` replaces ``bench``
and ``upload``: it queues the job in the box's spool and hands it to ``stackbench-kexec``;
after the kexec the box's boot-and-report service runs the job and uploads its runs itself.

``--dry-kernel`` replaces the kernel build and the guest run by a tiny synthetic kernel and
synthetic samples (optionally taking ``--dry-seconds``) while everything else (artifact
transfer, payloads, upload, idempotency) is the real path: Buildbot's own tests and a quick
check of a new worker use it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import shutil
import socket
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.errors import InputError, StackbenchError

NAME = "worker"
ORDER = 70
HELP = "worker-side steps run by Buildbot (build, bench, baremetal, upload, mark-lost)"
DESCRIPTION = __doc__


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
            c.add_argument("--runs", type=int, default=3)
            _dry(c)
        if name == "bench":
            c.add_argument(
                "--round", type=int, default=1, help="the plan's round this boot belongs to (1)"
            )
            c.add_argument(
                "--first",
                type=int,
                default=0,
                help="iteration number of this boot's first run in the kernel's plan (0)",
            )
            c.add_argument("--out", type=Path, default=Path("results"))
            c.add_argument(
                "--upload",
                action="store_true",
                help="send the payloads too, as 'upload' does (one process per benchmark)",
            )
            c.add_argument("--url", help="with --upload: as 'upload --url'")
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
    from stackbench.cli._worker_box import cmd_await_box, cmd_baremetal, cmd_mark_lost

    return {
        "build": cmd_build,
        "bench": cmd_bench,
        "baremetal": cmd_baremetal,
        "mark-lost": cmd_mark_lost,
        "await-box": cmd_await_box,
        "upload": cmd_upload,
    }[args.worker_command](args)


# -- build ---------------------------------------------------------------------------------


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def cmd_build(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if args.dry_kernel:
        time.sleep(args.dry_seconds)
        meta = {
            "commit": args.commit,
            "name": args.name or args.commit[:12],
            "tree": args.tree,
            "config_name": args.config,
            "config_hash": hashlib.sha256(f"dry:{args.config}".encode()).hexdigest()[:16],
            "compiler": "dry",
            "dry": True,
        }
        files = {"bzImage": f"dry kernel {args.commit}\n".encode()}
    else:
        meta, files = _real_build(args)
    meta["series"] = args.series
    tmp = out / "kernel.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        _add_bytes(tar, "kernel.json", json.dumps(meta, sort_keys=True).encode())
        for name, data in files.items():
            if isinstance(data, Path):
                tar.add(data, arcname=name)
            else:
                _add_bytes(tar, name, data)
    tmp.replace(out / "kernel.tar")
    print(f"built {meta['commit']} ({meta['config_name']}, {meta['compiler']})")
    return 0


def _real_build(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    from stackbench.jobs.highalloc import build_module
    from stackbench.kernels import build, trees

    try:
        tree = trees.load_tree(args.tree)
        repo = trees.ensure_repo(tree)
        res = build.build(
            repo, args.commit, config=args.config, tree=args.tree, module_builder=build_module
        )
    except (StackbenchError, OSError) as exc:
        # e.g. a commit the tree does not have, or a patch that breaks Kconfig
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        _record_build_failure(args, reason, str(exc))
        raise StackbenchError(f"kernel build of {args.commit} failed: {reason}") from None
    if not res.ok:
        print(res.log_tail)
        first = next((ln for ln in res.log_tail.splitlines() if "error:" in ln), "")
        reason = first.strip()[:300] or "make failed"
        _record_build_failure(
            args,
            reason,
            res.log_tail,
            config_hash=res.config_hash,
            compiler=res.compiler,
            duration_s=res.duration_s,
        )
        raise StackbenchError(f"kernel build of {args.commit} failed ({args.config}): {reason}")
    meta = {
        "commit": res.commit,
        "name": args.name or res.commit[:12],
        "tree": res.tree,
        "config_name": res.config_name,
        "config_hash": res.config_hash,
        "compiler": res.compiler,
        "release": res.kernel_release,
        "artifact_key": res.key,
    }
    assert res.artifact_dir is not None
    return meta, {"artifact": res.artifact_dir}


def _record_build_failure(args: argparse.Namespace, reason: str, log: str, **build: Any) -> None:
    """The failed build's ``kernel_build`` row (build-failed, the reason, the log's tail), so
    the series page says why without a client watching the build. Workers that report
    through the API ($STACKBENCH_URL) leave it to the Buildbot log and the master."""
    from stackbench import config

    if config.server_url():
        print(f"build failed: {reason} (reported through the Buildbot log)")
        return
    from stackbench.jobs.build_stage import record_build_failure
    from stackbench.resultsdb import db

    series = int(args.series) if str(args.series).isdigit() else None
    try:
        row = record_build_failure(
            db.engine(),
            commit=args.commit,
            tree=args.tree,
            config=args.config,
            reason=reason,
            log=log[-8000:],
            series_id=series,
            name=args.name,
            **build,
        )
    except StackbenchError as exc:  # the build's own failure is the one to report
        print(f"build failed: {reason} (not recorded: {exc})")
        return
    print(f"build failed: {reason} (kernel_build {row})")


# -- bench ---------------------------------------------------------------------------------


def read_kernel(path: Path, dest: Path) -> dict[str, Any]:
    """Unpack kernel.tar into ``dest`` and return its kernel.json."""
    if not path.exists():
        raise InputError(path, "kernel artifact not found")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(path) as tar:
            _extract_data(tar, dest)
    except tarfile.TarError as exc:
        raise InputError(path, f"not a kernel artifact: {exc}") from None
    meta_path = dest / "kernel.json"
    if not meta_path.exists():
        raise InputError(path, "kernel.json missing from the artifact")
    meta = json.loads(meta_path.read_text())
    for key in ("commit", "config_hash", "compiler"):
        if not meta.get(key):
            raise InputError(path, f"kernel.json has no {key}")
    return meta


def _extract_data(tar: tarfile.TarFile, dest: Path) -> None:
    """extractall with the "data" filter; Debian 12's Python 3.11.2 (a box's python3)
    predates extraction filters, so there the same refusals are made here."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for m in tar.getmembers():
        target = (root / m.name).resolve()
        if not (m.isfile() or m.isdir()) or not target.is_relative_to(root):
            raise tarfile.TarError(f"{m.name}: not a plain file inside the archive")
        m.mode &= 0o755
    tar.extractall(dest)


def run_specs(args: argparse.Namespace, meta: dict[str, Any]) -> tuple[Any, Any]:
    from stackbench.resultsdb.ingest import KernelSpec, MachineSpec

    kernel = KernelSpec(
        commit=meta["commit"],
        name=meta.get("name", ""),
        config_name=meta.get("config_name", ""),
        config_hash=meta["config_hash"],
        compiler=meta["compiler"],
        tree=meta.get("tree"),
        status="built",
        meta={k: meta[k] for k in ("series", "release", "dry") if meta.get(k)},
    )
    from stackbench.jobs.guest_size import guest_size, machine_name

    # a QEMU benchmark measures its guest, whose size is the job's and the kind's, never the
    # host's; a bare-metal box is its own size
    size = guest_size(
        args.kind,
        want_cpus=getattr(args, "guest_cpus", None),
        want_memory_mb=getattr(args, "guest_memory_mb", None),
        capacity_cpus=args.cpus,
        capacity_memory_mb=args.memory_mb,
    )
    machine = MachineSpec(
        name=machine_name(args.machine, size),
        kind=args.kind,
        cpus=size.cpus if size else args.cpus,
        memory_mb=size.memory_mb if size else args.memory_mb,
    )
    return kernel, machine


def _dry_runs(
    args: argparse.Namespace, kernel: Any, machine: Any, bases: dict[str, str]
) -> list[Any]:
    from stackbench.jobs.buildbot.results import SOURCE, run_key
    from stackbench.resultsdb.ingest import JobSpec, RunData

    runs = []
    first = getattr(args, "first", 0)
    for spec, base in bases.items():
        job = JobSpec(suite=spec, test="dry", params={"dry": 1}, runner="stackbench-dry")
        for i in range(first, first + args.runs):
            started = datetime.now(UTC)
            time.sleep(args.dry_seconds / max(args.runs * len(bases), 1))
            # deterministic per (commit, job, iteration): a retried run gives the same numbers
            rng = random.Random(f"{kernel.commit}:{spec}:{i}")
            samples = {f"{spec}.dry_throughput": [rng.gauss(1000.0, 10.0) for _ in range(5)]}
            runs.append(
                RunData(
                    job=job,
                    kernel=kernel,
                    machine=machine,
                    iteration=i,
                    samples=samples,
                    source=SOURCE,
                    started_at=started,
                    finished_at=datetime.now(UTC),
                    meta={
                        "buildbot_build": args.buildbot_build,
                        "series": args.series,
                        "job_spec": spec,
                        **_boot(args, None),
                    },
                    idempotency_key=run_key(base, i),
                )
            )
    return runs


def job_specs(args: argparse.Namespace) -> list[str]:
    """The jobs a bench step runs, in order, each once (``--job`` given once or repeated)."""
    given = args.job if isinstance(args.job, list) else [args.job]
    return list(dict.fromkeys(given))


def cmd_bench(args: argparse.Namespace) -> int:
    from stackbench.jobs.buildbot import results

    if args.runs < 1:
        raise StackbenchError("--runs must be at least 1")
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    meta = read_kernel(args.kernel, out.parent / "kernel")
    kernel, machine = run_specs(args, meta)
    jobs = job_specs(args)
    bases = {
        job: results.key_base(
            args.submission, kernel.commit, kernel.config_hash, kernel.compiler, job, args.kind
        )
        for job in jobs
    }
    if args.dry_kernel:
        runs = _dry_runs(args, kernel, machine, bases)
    else:
        runs = _real_runs(args, kernel, machine, bases, out.parent / "kernel")
    for i, run_data in enumerate(runs):
        # one file per run: the sub-jobs of one iteration share its number
        results.write_payload(out, f"run-{i:03d}", results.to_payload(run_data))
    print(f"{len(runs)} run(s) of {', '.join(jobs)} on {kernel.commit[:12]} written to {out}")
    if args.upload:
        # in this process rather than a step of its own: a second interpreter per benchmark
        # cost about a second each, a tenth of the Buildbot path's overhead on the demo
        return _upload(out, args.url)
    return 0


def _real_runs(
    args: argparse.Namespace, kernel: Any, machine: Any, bases: dict[str, str], kernel_dir: Path
) -> list[Any]:
    # the kernels engineer's pipeline boots the kernel and runs the job; this seam hands it
    # the unpacked artifact and stamps every run with the request's idempotency keys
    try:
        from stackbench.jobs import pipeline
    except ImportError:
        raise StackbenchError(
            "real benchmarks need stackbench.jobs.pipeline (not installed); use --dry-kernel"
        ) from None
    from stackbench.jobs.buildbot.results import SOURCE, run_key

    jobs = list(bases)
    if args.kind == "baremetal":
        # on the box, after the kexec: the suite runs on this kernel, not under QEMU
        from stackbench.jobs import native

        runs = native.run_job(
            artifact=kernel_dir / "artifact",
            job=jobs[0],
            runs=args.runs,
            kernel=kernel,
            machine=machine,
            workdir=Path("native").resolve(),
            boot_id=f"native-{bases[jobs[0]][:16]}",
        )
    else:
        runs = pipeline.run_job(
            artifact=kernel_dir / "artifact",
            job=jobs,
            runs=args.runs,
            kernel=kernel,
            machine=machine,
        )
    first = getattr(args, "first", 0)
    # each job's sub-jobs in the order they ran: a job's first is keyed as a one-sub-job
    # job is, so a boot of several jobs stores the keys one boot per job would have
    subjobs: dict[str, list[str]] = {}
    for i, r in enumerate(runs):
        # numbered within the kernel's whole plan: a later round's runs never repeat a key
        r.iteration = first + (r.iteration if r.iteration is not None else i)
        spec = str(r.meta.get("job_spec") or jobs[0])
        sj = str(r.meta.get("subjob") or "")
        seen = subjobs.setdefault(spec, [])
        if sj not in seen:
            seen.append(sj)
        r.idempotency_key = run_key(bases[spec], r.iteration, sj if seen.index(sj) else "")
        r.source = SOURCE
        r.meta = {
            **r.meta,
            "buildbot_build": args.buildbot_build,
            "series": args.series,
            "job_spec": spec,  # the dispatcher's next rounds re-run jobs by spec
            **_boot(args, r.meta.get("boot_id")),
        }
    return list(runs)


def _boot(args: argparse.Namespace, booted: str | None) -> dict[str, Any]:
    """The boot a benchmark step's runs share: one step is one boot, named by its Buildbot
    build (a retried step is another boot) and by its series, so the series' verdicts find
    the machine it ran on. The dispatcher plans a series' steps as rounds of boots (see
    README, "Boots as units"); ``--round`` says which."""
    rnd = int(getattr(args, "round", 1) or 1)
    if args.buildbot_build:
        where = f"series-{args.series}-bb-" if args.series else "buildbot-build-"
        return {"boot_id": f"{where}{args.buildbot_build}", "boot_round": rnd}
    return {"boot_id": booted or f"bench-{args.submission}-{time.time_ns()}", "boot_round": rnd}


# -- upload --------------------------------------------------------------------------------


def cmd_upload(args: argparse.Namespace) -> int:
    return _upload(args.results, args.url)


def _upload(where: Path, url: str | None) -> int:
    from stackbench.jobs.buildbot import results

    items = results.read_payloads(where)
    if not items:
        raise InputError(where, "no run payloads to upload")
    res = results.upload([p for _path, p in items], url=url)
    print(f"uploaded {res.stored} run(s), {res.present} already present, to {res.target}")
    return 0
