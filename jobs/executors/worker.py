"""The Buildbot worker's side: the steps ``stackbench worker`` runs on a worker.

Each step does one part of the pipeline on this machine and leaves files for the next:
``build`` writes ``out/kernel.tar`` (the master carries it to benchmark workers), ``bench``
writes one JSON payload per run into ``results/``, ``upload`` sends them to stackbench with the
worker's own token (or into the database on a one-machine setup), ``mark-lost`` records the
attempts whose worker vanished mid-step. On a bare-metal box ``baremetal`` replaces ``bench``
and ``upload`` (jobs.executors.worker_box). The kernel is built by the build stage (jobs.executors.build_stage),
the one caller of the kernel build. The command line is parsed in stackbench/cli/worker.py.

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
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.errors import InputError, StackbenchError

# -- build ---------------------------------------------------------------------------------

KERNEL_KEYS = ("commit", "name", "tree", "config_name", "config_hash", "compiler")
# buildbot-worker cuts an output line at 4,096 characters and, when the line does not open
# the chunk of output it reads (4.3.0: buildbot/buildbot PR #9082, not released), drops all
# but the first 4,095 minus the line's offset of each cut: a line longer than this is
# printed in pieces, which steps.reported_counts joins again
LINE_PIECE = 4000


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def cmd_build(args: argparse.Namespace) -> int:
    """Build the kernel; a full or read-only disk here is not the series' fault: the build
    waits (its log says why, and so does the series' page when this worker reaches the
    database) and is tried again, less often each time, until the disk is fixed."""
    from stackbench.jobs.executors.faults import HostFault, host_fault, next_wait

    wait = None
    try:
        while True:
            try:
                return _build_once(args)
            except (HostFault, OSError) as exc:
                # not any error quoting a host's words: a failed build's own reason may
                fault = host_fault(exc)
                if fault is None:
                    raise
            wait = next_wait(wait)
            # printed: Buildbot's step timeout counts the silence of a step, not its length
            print(f"waiting on a host fault (retry in {wait:.0f} s): {fault}", flush=True)
            _say_waiting(args, fault)
            time.sleep(wait)
    finally:
        if wait is not None:
            _say_waiting(args, None)


def _say_waiting(args: argparse.Namespace, fault: str | None) -> None:
    """The series' page says what its build waits on (``fault``; None: nothing any more),
    for a worker that stores into the database; one reporting through the API leaves it to
    the Buildbot log."""
    if not str(args.series).isdigit() or config.server_url():
        return
    from stackbench.resultsdb import db, series_runs_store, series_store

    sid = int(args.series)
    said = {"error": fault, "step": f"build of {args.name or args.commit[:12]}"}
    try:
        with db.session(db.engine()) as s:
            row = series_store.get(s, sid, lock=True)
            attempt = series_runs_store.current(s, sid) if row is not None else None
            if attempt is None:
                return
            before = (attempt.host_fault or {}).get("error")
            if before != fault:
                attempt.host_fault = said if fault else None
                if fault:
                    series_store.add_event(s, sid, f"series:{sid}", "waiting",
                                           f"{said['step']}: waiting on a host fault, retried until fixed: {fault}")  # fmt: skip
    except Exception as exc:  # a database away: the build goes on (or waits) all the same
        print(f"the series page does not say so: {str(exc).splitlines()[0] if str(exc) else exc!r}")


def _build_once(args: argparse.Namespace) -> int:
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
    # the last line: the master keeps it as the build's ``kernel`` property, and the
    # dispatcher records the kernel built from it (jobs.executors.build_stage.record_built)
    print(json.dumps({"kernel": {k: meta[k] for k in KERNEL_KEYS if meta.get(k)}}))
    return 0


def _real_build(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    from stackbench.jobs.executors.build_stage import build_commit
    from stackbench.jobs.executors.faults import HostFault, build_fault, disk_fault_in, first_error
    from stackbench.kernels import trees

    try:
        tree = trees.load_tree(args.tree)
        res = build_commit(trees.ensure_repo(tree), args.commit, config=args.config, tree=args.tree)
    except (StackbenchError, OSError) as exc:
        fault = build_fault(exc)
        if fault:  # the disk's doing, not the commit's: cmd_build waits and tries again
            raise HostFault(f"building {args.commit[:12]}: {fault}") from exc
        # e.g. a commit the tree does not have, or a patch that breaks Kconfig
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        _record_build_failure(args, reason, str(exc))
        raise StackbenchError(f"kernel build of {args.commit} failed: {reason}") from None
    fault = None if res.ok else disk_fault_in(res.log_tail)
    if fault:
        raise HostFault(f"building {args.commit[:12]}: {fault}")
    if not res.ok:
        print(res.log_tail)
        reason = first_error(res.log_tail) or "make failed"
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
    from stackbench.jobs.executors.build_stage import record_build_failure
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
    from stackbench.resultsdb.rundata import KernelSpec, MachineSpec

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
    from stackbench.jobs.benchmarks.guest_size import guest_size, machine_name

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
    from stackbench.jobs.executors.buildbot.results import SOURCE, run_key
    from stackbench.resultsdb.rundata import JobSpec, RunData

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
    """Boot each ``--kernel`` in turn (a round's boots in one process: an interpreter's start
    per boot was most of a dry boot's overhead); a failed boot does not stop the others."""
    if args.runs < 1:
        raise StackbenchError("--runs must be at least 1")
    kernels = args.kernel if isinstance(args.kernel, list) else [args.kernel]
    if getattr(args, "evidence", ""):
        return _evidence(args, kernels)
    firsts = args.first if isinstance(args.first, list) else [args.first or 0]
    if len(firsts) == 1 and len(kernels) > 1:
        firsts = firsts * len(kernels)
    if len(firsts) != len(kernels):
        raise StackbenchError(f"{len(kernels)} --kernel but {len(firsts)} --first: one each")
    start = getattr(args, "boot_index", None)
    failed = []
    for i, (kernel, first) in enumerate(zip(kernels, firsts, strict=True)):
        one = argparse.Namespace(**vars(args))
        one.kernel, one.first = kernel, first
        one.boot_index = None if start is None else start + i
        if len(kernels) > 1:
            one.out = args.out / f"boot-{i}"
        if len(kernels) == 1:
            return _bench_one(one)
        try:
            _bench_one(one)
        except (StackbenchError, OSError) as exc:
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            print(f"boot of {kernel} failed: {why}")
            failed.append(why)
    if failed:
        raise StackbenchError(f"{len(failed)} of {len(kernels)} boots failed: {'; '.join(failed)}")
    return 0


def _bench_one(args: argparse.Namespace) -> int:
    from stackbench.jobs.executors.buildbot import results

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
    if getattr(args, "skip_stored", False) and _stored(args, kernel.commit, bases):
        # the lost attempt measured and uploaded this boot before its worker went away
        print(f"{', '.join(jobs)} on {kernel.commit[:12]}: already stored, not booted again")
        return 0
    workdir = None
    if args.dry_kernel:
        runs = _dry_runs(args, kernel, machine, bases)
    else:
        runs, workdir = _real_runs(args, kernel, machine, bases, out.parent / "kernel")
    payloads = [results.to_payload(run_data) for run_data in runs]
    for i, payload in enumerate(payloads):
        # one file per run: the sub-jobs of one iteration share its number
        results.write_payload(out, f"run-{i:03d}", payload)
    print(f"{len(runs)} run(s) of {', '.join(jobs)} on {kernel.commit[:12]} written to {out}")
    if args.upload:
        # in this process rather than a step of its own: a second interpreter per benchmark
        # cost about a second each, a tenth of the Buildbot path's overhead on the demo; the
        # payloads as made (the receiver checks them), not read back and checked here
        t0 = time.monotonic()
        res = results.upload(payloads, url=args.url)
        # the upload's time is what a lab's boot waits for before the next (bench/scale_bench)
        print(f"uploaded {res.stored} run(s), {res.present} already present, to {res.target} "
              f"in {time.monotonic() - t0:.2f} s")  # fmt: skip
    if workdir is not None:  # the runs are stored (uploaded, or the step's files): it goes
        from stackbench.jobs.executors import boot_stage

        if boot_stage.release_workdir(workdir, runs):
            print(f"the failed boot's working directory is kept: {workdir}")
    return 0


def _evidence(args: argparse.Namespace, kernels: list[Path]) -> int:
    """An evidence round (jobs/executors/coverage_stage.py): each kernel booted once, every
    job at one run, counting the calls of ``--evidence``'s functions. No run is stored: the
    last line, ``{"coverage": [...]}`` (per kernel its kernel.json keys and the counts per
    sub-job), becomes the build's ``coverage`` property, which the dispatcher stores. A
    boot that fails is said in its counts; the step itself does not fail for it."""
    from stackbench.jobs.executors import coverage_stage

    functions = [f for f in args.evidence.split(",") if f]
    jobs = job_specs(args)
    reported = []
    for i, tar in enumerate(kernels):
        where = args.out.parent / f"evidence-kernel-{i}"
        meta = read_kernel(tar, where)
        kernel, machine = run_specs(args, meta)
        if args.dry_kernel:
            counted = {job: {"error": "a dry kernel counts no calls"} for job in jobs}
        else:
            try:
                counted = coverage_stage.count_on_worker(
                    where / "artifact", jobs, functions, kernel=kernel, machine=machine
                )
            except (StackbenchError, OSError) as exc:
                why = (str(exc).splitlines() or [type(exc).__name__])[0]
                counted = {job: {"error": f"the evidence boot failed: {why}"} for job in jobs}
        shutil.rmtree(where, ignore_errors=True)
        errors = sum(1 for c in counted.values() if c.get("error"))
        print(f"evidence boot of {kernel.name or kernel.commit[:12]}: {len(counted)} sub-job(s)"
              f" counted, {errors} not", flush=True)  # fmt: skip
        reported.append({**{k: meta[k] for k in KERNEL_KEYS if meta.get(k)}, "jobs": counted})
    print_in_pieces(json.dumps({"coverage": reported}))
    return 0


def print_in_pieces(line: str) -> None:
    """Print ``line`` as lines of at most LINE_PIECE characters, so that no part of it is
    lost on the way to the master (it carries the profiles: hundreds of kilobytes)."""
    for i in range(0, len(line), LINE_PIECE):
        print(line[i : i + LINE_PIECE])
    sys.stdout.flush()


def _stored(args: argparse.Namespace, commit: str, bases: dict[str, str]) -> bool:
    """Whether every run of this boot is stored (each iteration's first sub-job keeps the bare
    key, see ``results.run_key``): a worker lost mid-upload may have stored only the first."""
    from stackbench.jobs.executors.buildbot import reported, results

    first = getattr(args, "first", 0) or 0
    its = range(first, first + args.runs)
    keys = [results.run_key(base, i) for base in bases.values() for i in its]
    return set(keys) <= reported.stored_keys(keys, commit, args.url or config.server_url())


def _real_runs(
    args: argparse.Namespace, kernel: Any, machine: Any, bases: dict[str, str], kernel_dir: Path
) -> tuple[list[Any], Path | None]:
    # the boot stage (the pipeline's) boots the kernel and runs the job; this seam hands it
    # the unpacked artifact and stamps every run with the request's idempotency keys. The
    # QEMU boot's working directory comes back too, to go once the runs are stored.
    try:
        from stackbench.jobs.executors import boot_stage
    except ImportError:
        raise StackbenchError(
            "real benchmarks need stackbench.jobs.executors.boot_stage (not installed); use --dry-kernel"
        ) from None
    from stackbench.jobs.executors.buildbot.results import SOURCE, run_key

    jobs = list(bases)
    workdir = None
    if args.kind == "baremetal":
        # on the box, after the kexec: the suite runs on this kernel, not under QEMU
        from stackbench.jobs.executors import native

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
        workdir = boot_stage.boot_workdir()
        runs = boot_stage.run_job(
            artifact=kernel_dir / "artifact",
            job=jobs,
            runs=args.runs,
            kernel=kernel,
            machine=machine,
            workdir=workdir,
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
    return list(runs), workdir


def _boot(args: argparse.Namespace, booted: str | None) -> dict[str, Any]:
    """The boot a benchmark step's runs share: one step is one boot, named by its Buildbot
    build (a retried step is another boot) and by its series, so the series' verdicts find
    the machine it ran on. The dispatcher plans a series' steps as rounds of boots (see
    docs/verdict.md, "Rounds of boots"); ``--round`` says which."""
    rnd = int(getattr(args, "round", 1) or 1)
    # the worker that ran it: a pool's boxes share the machine, each is a block of its own
    who = {"worker": args.worker} if getattr(args, "worker", "") else {}
    if args.buildbot_build:
        where = f"series-{args.series}-bb-" if args.series else "buildbot-build-"
        # a round's build boots every kernel once: its index tells the boots apart
        index = getattr(args, "boot_index", None)
        boot = f"{where}{args.buildbot_build}" + (f"-{index}" if index is not None else "")
        return {"boot_id": boot, "boot_round": rnd, **who}
    boot = booted or f"bench-{args.submission}-{time.time_ns()}"
    return {"boot_id": boot, "boot_round": rnd, **who}


# -- upload --------------------------------------------------------------------------------


def cmd_upload(args: argparse.Namespace) -> int:
    return _upload(args.results, args.url)


def _upload(where: Path, url: str | None) -> int:
    from stackbench.jobs.executors.buildbot import results

    items = results.read_payloads(where)
    if not items:
        raise InputError(where, "no run payloads to upload")
    res = results.upload([p for _path, p in items], url=url)
    print(f"uploaded {res.stored} run(s), {res.present} already present, to {res.target}")
    return 0
