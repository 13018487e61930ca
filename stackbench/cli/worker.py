"""stackbench worker: the commands that Buildbot steps run on a worker.

Each command does one step of the pipeline on this machine and leaves files for the next:
``build`` writes ``out/kernel.tar`` (the master carries it to benchmark workers), ``bench``
writes one JSON payload per run into ``results/``, ``upload`` sends them to stackbench with the
worker's own token (or into the database on a one-machine setup), ``mark-lost`` records the
attempts whose worker vanished mid-step.

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

from stackbench.errors import InputError, StackbenchError

NAME = "worker"
ORDER = 70
HELP = "worker-side steps run by Buildbot (build, bench, upload, mark-lost, plan)"
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
        ("bench", "run one job N times on a built kernel; one payload per run"),
        ("mark-lost", "record attempts of this benchmark that lost their worker"),
    ):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("--kernel", type=Path, required=True, help="kernel.tar from 'build'")
        c.add_argument("--job", required=True)
        c.add_argument("--submission", required=True)
        c.add_argument("--kind", default="qemu", choices=["qemu", "baremetal"])
        c.add_argument("--machine", default=socket.gethostname())
        c.add_argument("--cpus", type=int)
        c.add_argument("--memory-mb", type=int)
        c.add_argument("--series", default="")
        c.add_argument("--buildbot-build", default="")
        if name == "bench":
            c.add_argument("--runs", type=int, default=3)
            c.add_argument("--out", type=Path, default=Path("results"))
            _dry(c)
        else:
            c.add_argument(
                "--lost", action="append", default=[], metavar="BUILDID:WORKER", required=True
            )

    u = sub.add_parser("upload", help="send the run payloads of a results directory")
    u.add_argument("--results", type=Path, default=Path("results"))
    u.add_argument("--url", help="stackbench server (default $STACKBENCH_URL; none: database)")

    pl = sub.add_parser("plan", help="print the commits a nightly run should build (JSON)")
    pl.add_argument("--nightly", action="store_true", required=True)


def _dry(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-kernel", action="store_true", help="synthetic kernel and samples")
    p.add_argument("--dry-seconds", type=float, default=0.0, help="time a dry step takes")


def run(args: argparse.Namespace) -> int:
    return {
        "build": cmd_build,
        "bench": cmd_bench,
        "mark-lost": cmd_mark_lost,
        "upload": cmd_upload,
        "plan": cmd_plan,
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
    from stackbench.kernels import build, trees

    tree = trees.load_tree(args.tree)
    repo = trees.ensure_repo(tree)
    res = build.build(repo, args.commit, config=args.config, tree=args.tree)
    if not res.ok:
        print(res.log_tail)
        raise StackbenchError(f"kernel build of {args.commit} failed ({args.config})")
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
            tar.extractall(dest, filter="data")
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


def _specs(args: argparse.Namespace, meta: dict[str, Any]) -> tuple[Any, Any]:
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
    machine = MachineSpec(
        name=args.machine, kind=args.kind, cpus=args.cpus, memory_mb=args.memory_mb
    )
    return kernel, machine


def _dry_runs(args: argparse.Namespace, kernel: Any, machine: Any, base: str) -> list[Any]:
    from stackbench.jobs.buildbot.results import SOURCE, run_key
    from stackbench.resultsdb.ingest import JobSpec, RunData

    job = JobSpec(suite=args.job, test="dry", params={"dry": 1}, runner="stackbench-dry")
    runs = []
    for i in range(args.runs):
        started = datetime.now(UTC)
        time.sleep(args.dry_seconds / max(args.runs, 1))
        # deterministic per (commit, job, iteration): a retried run gives the same numbers
        rng = random.Random(f"{kernel.commit}:{args.job}:{i}")
        samples = {f"{args.job}.dry_throughput": [rng.gauss(1000.0, 10.0) for _ in range(5)]}
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
                meta={"buildbot_build": args.buildbot_build, "series": args.series},
                idempotency_key=run_key(base, i),
            )
        )
    return runs


def cmd_bench(args: argparse.Namespace) -> int:
    from stackbench.jobs.buildbot import results

    if args.runs < 1:
        raise StackbenchError("--runs must be at least 1")
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    meta = read_kernel(args.kernel, out.parent / "kernel")
    kernel, machine = _specs(args, meta)
    base = results.key_base(
        args.submission, kernel.commit, kernel.config_hash, kernel.compiler, args.job, args.kind
    )
    if args.dry_kernel:
        runs = _dry_runs(args, kernel, machine, base)
    else:
        runs = _real_runs(args, kernel, machine, base, out.parent / "kernel")
    for run_data in runs:
        results.write_payload(out, f"run-{run_data.iteration:03d}", results.to_payload(run_data))
    print(f"{len(runs)} run(s) of {args.job} on {kernel.commit[:12]} written to {out}")
    return 0


def _real_runs(
    args: argparse.Namespace, kernel: Any, machine: Any, base: str, kernel_dir: Path
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

    runs = pipeline.run_job(
        artifact=kernel_dir / "artifact",
        job=args.job,
        runs=args.runs,
        kernel=kernel,
        machine=machine,
    )
    for i, r in enumerate(runs):
        r.idempotency_key = run_key(base, r.iteration if r.iteration is not None else i)
        r.source = SOURCE
        r.meta = {**r.meta, "buildbot_build": args.buildbot_build, "series": args.series}
    return list(runs)


# -- mark-lost -----------------------------------------------------------------------------


def parse_lost(text: str) -> tuple[str, str]:
    build, sep, worker = text.partition(":")
    if not sep or not build.isdigit() or not worker:
        raise StackbenchError(f"--lost {text!r}: expected BUILDID:WORKER")
    return build, worker


def cmd_mark_lost(args: argparse.Namespace) -> int:
    from stackbench.jobs.buildbot import results
    from stackbench.resultsdb.ingest import JobSpec, MachineSpec, RunData

    meta = read_kernel(args.kernel, Path("lost-kernel"))
    kernel, _machine = _specs(args, meta)
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
            error=f"worker {worker} was lost during Buildbot build {build}; "
            f"retried in build {args.buildbot_build} on {args.machine}",
            meta={"buildbot_build": build, "retried_in": args.buildbot_build, "job": args.job},
            idempotency_key=results.lost_key(base, build),
        )
        payloads.append(results.to_payload(run_data))
    res = results.upload(payloads)
    print(f"marked {res.stored} lost attempt(s) ({res.present} already marked) in {res.target}")
    return 0


# -- upload --------------------------------------------------------------------------------


def cmd_upload(args: argparse.Namespace) -> int:
    from stackbench.jobs.buildbot import results

    items = results.read_payloads(args.results)
    if not items:
        raise InputError(args.results, "no run payloads to upload")
    res = results.upload([p for _path, p in items], url=args.url)
    print(f"uploaded {res.stored} run(s), {res.present} already present, to {res.target}")
    return 0


# -- plan ----------------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    """The heads of the enabled tracked branches, as the nightly fan-out's plan."""
    from sqlalchemy import select

    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import TrackedBranch, Tree

    commits = []
    with db.session() as s:
        rows = s.execute(
            select(Tree.name, Tree.url, TrackedBranch.branch)
            .join(Tree, Tree.id == TrackedBranch.tree_id)
            .where(TrackedBranch.enabled.is_(True))
            .order_by(Tree.name, TrackedBranch.branch)
        ).all()
    for tree, url, branch in rows:
        commits.append({"commit": resolve_head(tree, url, branch), "name": f"{tree}/{branch}"})
    print(json.dumps({"commits": commits}))
    return 0


def resolve_head(tree: str, url: str, branch: str) -> str:
    """A tracked branch's head: from the tree's local repository when stackbench knows the
    tree, else from its URL."""
    from stackbench import proc

    try:
        from stackbench.kernels import trees

        repo = trees.ensure_repo(trees.load_tree(tree))
        return trees.resolve(repo, branch)
    except (ImportError, StackbenchError):
        if not url:
            raise
    out = proc.run(["git", "ls-remote", url, f"refs/heads/{branch}"], timeout=120).stdout
    if not out.strip():
        raise StackbenchError(f"{url}: no branch {branch}")
    return out.split()[0]
