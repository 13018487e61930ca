"""The per-series pipeline on one machine: apply, build the base and every commit, boot each
built kernel once with the whole job plan, collect the runs and ingest them.

States, recorded in ``series.state`` and as ``event`` rows (the web's series page reads both):

    new -> applying -> applied -> building -> running -> done
                    -> apply-failed            (nothing is built)
                                               -> failed  (a kernel failed to build, crashed
                                                           or hung; or the pipeline broke)

A commit that does not build does not stop the others: its ``kernel_build`` row says
``build-failed`` with the log tail, and the remaining kernels are still booted and measured.
A kernel that crashes or hangs gets runs with status ``crashed`` / ``timeout`` whose error
holds the reason and the console tail (the console is also kept as a run log).

Every kernel boots ONCE: the guest runs every sub-job of the plan ``runs`` times in a row and
sends all results back at the end (see stackbench.jobs.guest), so boot cost is paid once per
kernel, not once per run.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from stackbench import config as sbconfig
from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.jobs import definitions
from stackbench.jobs.definitions import JobDef, SubJob
from stackbench.kernels import build as kbuild
from stackbench.kernels import paths as kpaths
from stackbench.kernels import qemu, trees
from stackbench.resultsdb.ingest import KernelSpec, MachineSpec, RunData, ingest
from stackbench.resultsdb.models import Event, KernelBuild, Patch, Series, Tree

log = logging.getLogger(__name__)

DEFAULT_JOBS = ("vm-scalability", "thpscale", "stress-highalloc")
DEFAULT_RUNS = 3
# what the guest prints once /init runs (jobs/guest/init.sh): the boot did not hang
GUEST_BANNER = "stackbench: guest up"
_RUN_DONE = re.compile(r"stackbench: (\S+) run (\d+): rc=(-?\d+)")
MODULE_FOR_SUITE = {"stress-highalloc": "stackbench_highalloc"}
CONSOLE_TAIL_LINES = 40


@dataclass
class Settings:
    """How kernels are built and booted on this machine."""

    config: str = "tiny-guest"
    cpus: int = 2
    mem_mb: int = 1024
    accel: str = "auto"
    # the whole boot's limit; None: every run's own timeout summed, plus boot slack
    boot_timeout_s: float | None = None
    # a guest that has not printed its banner by then is a hung boot
    init_timeout_s: float = 180.0
    make_jobs: int | None = None
    machine_name: str | None = None

    def machine(self, accel: str) -> MachineSpec:
        name = self.machine_name or (
            f"qemu-{accel}-{self.cpus}cpu-{self.mem_mb}M@{socket.gethostname()}"
        )
        return MachineSpec(name=name, kind="qemu", cpus=self.cpus, memory_mb=self.mem_mb)


# ---- progress -------------------------------------------------------------------------------


@dataclass
class ProgressEvent:
    stage: str  # apply | build | boot | run | ingest | done | failed
    step: int  # 1-based position within the stage
    total: int
    label: str  # the kernel (or series) this is about
    message: str = ""
    elapsed_s: float = 0.0
    eta_s: float | None = None  # time left for the whole series


ProgressFn = Callable[[ProgressEvent], None]


class Eta:
    """Remaining time from per-unit estimates, corrected by how fast units really went."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.pending: dict[str, float] = {}
        self.fraction: dict[str, float] = {}
        self.spent_est = 0.0
        self.spent_real = 0.0

    def plan(self, unit: str, estimate_s: float) -> None:
        self.pending[unit] = estimate_s

    def progress(self, unit: str, fraction: float) -> None:
        """Part of a unit is done (runs finished inside one boot)."""
        self.fraction[unit] = min(1.0, max(0.0, fraction))

    def finish(self, unit: str, real_s: float) -> None:
        est = self.pending.pop(unit, None)
        self.fraction.pop(unit, None)
        if est:
            self.spent_est += est
            self.spent_real += real_s

    def remaining(self) -> float | None:
        """Seconds left, or None before anything is planned."""
        if not self.pending:
            return None
        left = sum(est * (1 - self.fraction.get(u, 0.0)) for u, est in self.pending.items())
        if self.spent_est > 30:
            left *= min(3.0, max(0.3, self.spent_real / self.spent_est))
        return left

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class StderrProgress:
    """One line per event on stderr: ``[ 1m02s] build 2/4  label  message  (eta 3m10s)``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, ev: ProgressEvent) -> None:
        step = f" {ev.step}/{ev.total}" if ev.total else ""
        eta = f"  (eta {fmt_duration(ev.eta_s)})" if ev.eta_s is not None else ""
        msg = f"  {ev.message}" if ev.message else ""
        label = f"  {ev.label}" if ev.label else ""
        print(
            f"[{fmt_duration(ev.elapsed_s):>6}] {ev.stage}{step}{label}{msg}{eta}",
            file=self.stream,
            flush=True,
        )


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


# ---- jobs -----------------------------------------------------------------------------------

_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(.*)\])?$")


def split_job_specs(text: str) -> list[str]:
    """``a,b[x=1,y=2],c`` -> ``['a', 'b[x=1,y=2]', 'c']`` (commas inside brackets stay)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [s for s in out if s]


def parse_job_spec(spec: str, runs: int | None = None) -> JobDef:
    """A job definition by name, with optional parameter overrides:
    ``thpscale[madvise=false,max_threads=2]``; ``a|b`` gives a list (one sub-job each).
    Overrides are validated against the suite's schema like the YAML file itself."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise InputError(f"job {spec!r}", "expected NAME or NAME[key=value,...]")
    job = definitions.load(m.group(1))
    params = dict(job.params)
    for item in split_job_specs(m.group(2) or ""):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"job {spec!r}", f"override {item!r} is not key=value")
        values = [yaml.safe_load(v) for v in raw.split("|")]
        params[key.strip()] = values if len(values) > 1 else values[0]
    data: dict[str, Any] = {
        "suite": job.suite,
        "params": params,
        "runs": runs if runs is not None else job.runs,
        "runner": job.runner,
        "timeout": job.timeout_s,
    }
    if job.description:
        data["description"] = job.description
    parsed = definitions.parse(data, path=f"job {spec}")
    parsed.name = job.name
    parsed.upstream = job.upstream  # the pinned repository stays with the named job
    return parsed


def resolve_jobs(specs: list[str] | None, runs: int | None) -> list[JobDef]:
    if runs is not None and runs < 1:
        raise InputError("runs", f"must be at least 1, not {runs}")
    return [parse_job_spec(s, runs) for s in (specs or list(DEFAULT_JOBS))]


def plan_for(jobs: list[JobDef], settings: Settings) -> list[SubJob]:
    subjobs: list[SubJob] = []
    for job in jobs:
        subjobs += definitions.expand(job, guest_mem_mb=settings.mem_mb, guest_cpus=settings.cpus)
    names = [sj.name for sj in subjobs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InputError("jobs", f"two jobs expand to the same sub-job: {', '.join(dup)}")
    return subjobs


# ---- submit ---------------------------------------------------------------------------------


@contextmanager
def _tx(eng: Engine) -> Iterator[Session]:
    with Session(eng, expire_on_commit=False) as s, s.begin():
        yield s


def _event(s: Session, series_id: int | None, subject: str, state: str, message: str) -> None:
    s.add(Event(series_id=series_id, subject=subject, state=state, message=message[:4000]))


def register_tree(s: Session, tree: trees.TreeDef) -> Tree:
    row = s.scalars(select(Tree).where(Tree.name == tree.name)).one_or_none()
    if row is None:
        row = Tree(name=tree.name)
        s.add(row)
    row.url = tree.url
    row.default_base = tree.default_base
    s.flush()
    return row


def submit(
    eng: Engine,
    mbox: bytes,
    *,
    tree: str = "linux-6.1",
    base: str | None = None,
    jobs: list[str] | None = None,
    runs: int | None = None,
    source: str = "mbox",
    filename: str = "<mbox>",
    owner_id: int | None = None,
) -> int:
    """Store a series (idempotent: the same mails on the same tree and base give the same
    series back) and return its id. Everything is validated before anything is written."""
    from stackbench.patches.parser import parse_mbox
    from stackbench.patches.store import create_series

    tree_def = trees.load_tree(tree)
    resolve_jobs(jobs, runs)  # bad job names or overrides fail here, before storing
    parsed = parse_mbox(mbox, source=filename)
    with _tx(eng) as s:
        register_tree(s, tree_def)
        series = create_series(
            s,
            parsed,
            tree=tree,
            base=base,
            source=source,
            owner_id=owner_id,
            jobs=list(jobs) if jobs is not None else None,
            runs=runs,
            mbox=mbox,  # the raw mails, so `git am` gets exactly what was submitted
        )
        return series.id


# ---- the pipeline ---------------------------------------------------------------------------


@dataclass
class KernelTask:
    label: str  # "base" or "1/3"
    name: str  # what tables show
    commit: str
    patch_id: int | None = None
    build: kbuild.BuildResult | None = None
    build_id: int | None = None
    error: str = ""
    outcome: str = ""  # built | build-failed | ok | crashed | timeout | error


@dataclass
class SeriesRun:
    series_id: int
    settings: Settings
    progress: ProgressFn | None
    eta: Eta = field(default_factory=Eta)
    # seconds per stage, kept in series.meta["timings"] (bench/pipeline_bench.py reads them)
    timings: dict[str, Any] = field(
        default_factory=lambda: {
            "apply_s": 0.0,
            "builds": [],
            "vm_s": 0.0,
            "guest_runs_s": 0.0,
            "initramfs_s": 0.0,
            "ingest_s": 0.0,
        }
    )

    def emit(self, stage: str, step: int, total: int, label: str, message: str = "") -> None:
        if self.progress is None:
            return
        ev = ProgressEvent(
            stage=stage,
            step=step,
            total=total,
            label=label,
            message=message,
            elapsed_s=self.eta.elapsed(),
            eta_s=self.eta.remaining() if stage not in ("done", "failed") else None,
        )
        self.progress(ev)


def set_state(eng: Engine, series_id: int, state: str, message: str, error: str | None = None):
    with _tx(eng) as s:
        row = s.get(Series, series_id)
        if row is None:
            raise NotFoundError(f"no series {series_id}")
        row.state = state
        if error is not None:
            row.error = error[:4000]
        _event(s, series_id, f"series:{series_id}", state, message)


def run_series(
    eng: Engine,
    series_id: int,
    *,
    progress: ProgressFn | None = None,
    settings: Settings | None = None,
    rerun: bool = False,
) -> str:
    """Run the pipeline for a stored series and return its final state.

    A series already ``done`` is left as it is unless ``rerun`` (then every kernel is booted
    again and a new round of runs is added; builds are reused). A ``failed`` series is
    retried. Builds are always reused from the artifact store when present."""
    settings = settings or Settings()
    with _tx(eng) as s:
        series = s.get(Series, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        state = series.state
        meta = dict(series.meta)
        tree_name = series.tree.name if series.tree else "linux-6.1"
        base_ref = series.base_ref
    if state == "done" and not rerun:
        return state
    if state == "apply-failed":
        return state
    sr = SeriesRun(series_id, settings, progress)
    try:
        return _run(eng, sr, meta, tree_name, base_ref)
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc) or repr(exc)
        set_state(eng, series_id, "failed", f"pipeline stopped: {reason}", error=reason)
        sr.emit("failed", 0, 0, f"series {series_id}", reason)
        raise


def apply_only(
    eng: Engine, series_id: int, *, progress: ProgressFn | None = None
) -> list[tuple[str, str]] | None:
    """Apply a stored series (``git am``) without building anything: (commit, kernel name)
    of the base and each patch, for a runner elsewhere (Buildbot); None when it does not
    apply."""
    with _tx(eng) as s:
        series = s.get(Series, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        tree_name = series.tree.name if series.tree else "linux-6.1"
        base_ref = series.base_ref
    tree = trees.load_tree(tree_name)
    sr = SeriesRun(series_id, Settings(), progress)
    tasks = _apply_stage(eng, sr, trees.ensure_repo(tree), tree, base_ref)
    return None if tasks is None else [(t.commit, t.name) for t in tasks]


def _apply_stage(
    eng: Engine, sr: SeriesRun, repo: Path, tree: trees.TreeDef, base_ref: str
) -> list[KernelTask] | None:
    """The apply stage with its progress events; None (and a 'failed' event) when the
    series does not apply."""
    base = base_ref or tree.default_base
    sr.emit("apply", 1, 1, f"series {sr.series_id}", f"on {base}")
    t0 = time.monotonic()
    tasks = _apply(eng, sr, repo, base, tree)
    sr.timings["apply_s"] = time.monotonic() - t0
    if tasks is None:
        sr.emit("failed", 0, 0, f"series {sr.series_id}", "apply failed: nothing built")
    return tasks


def _run(eng: Engine, sr: SeriesRun, meta: dict[str, Any], tree_name: str, base_ref: str) -> str:
    sid, settings = sr.series_id, sr.settings
    tree = trees.load_tree(tree_name)
    jobs = resolve_jobs(meta.get("jobs"), meta.get("runs", DEFAULT_RUNS))
    plan = plan_for(jobs, settings)
    repo = trees.ensure_repo(tree)

    tasks = _apply_stage(eng, sr, repo, tree, base_ref)
    if tasks is None:
        return "apply-failed"
    attempt = int(meta.get("attempts", 0)) + 1
    with _tx(eng) as s:
        row = s.get(Series, sid)
        row.meta = {**row.meta, "attempts": attempt}

    for t in tasks:
        sr.eta.plan(f"build:{t.commit}", _build_estimate(tree, settings, t.commit))
        sr.eta.plan(f"boot:{t.commit}", _boot_estimate(plan))

    # -- build
    set_state(eng, sid, "building", f"building {len(tasks)} kernels")
    for i, t in enumerate(tasks, 1):
        sr.emit("build", i, len(tasks), t.name)
        started = time.monotonic()
        _build_one(eng, sr, repo, tree, t)
        spent = time.monotonic() - started
        sr.eta.finish(f"build:{t.commit}", spent)
        sr.timings["builds"].append(
            {
                "kernel": t.name,
                "commit": t.commit,
                "seconds": round(spent, 2),
                "make_seconds": round(t.build.duration_s, 2) if t.build else None,
                "reused": bool(t.build and t.build.reused),
                "outcome": t.outcome,
            }
        )
        how = "reused" if t.build and t.build.reused else f"{time.monotonic() - started:.0f}s"
        sr.emit("build", i, len(tasks), t.name, f"{t.outcome} ({how})")

    # -- boot and run
    built = [t for t in tasks if t.outcome == "built"]
    set_state(eng, sid, "running", f"booting {len(built)} kernels, {len(plan)} sub-jobs each")
    machine: MachineSpec | None = None
    for i, t in enumerate(built, 1):
        started = time.monotonic()
        runs = _boot_one(eng, sr, t, plan, attempt, i, len(built))
        machine = runs[0].machine if runs else machine
        sr.emit("ingest", i, len(built), t.name, f"{len(runs)} runs")
        t0 = time.monotonic()
        res = ingest(eng, runs)
        sr.timings["ingest_s"] += time.monotonic() - t0
        with _tx(eng) as s:
            _event(
                s,
                sid,
                f"build:{t.build_id}",
                t.outcome,
                f"{t.name}: {_run_summary(runs)}; {len(res.inserted)} runs stored",
            )
        sr.eta.finish(f"boot:{t.commit}", time.monotonic() - started)

    sr.timings["total_s"] = sr.eta.elapsed()
    with _tx(eng) as s:
        row = s.get(Series, sid)
        row.meta = {**row.meta, "timings": _rounded(sr.timings)}

    # -- verdict
    bad = [t for t in tasks if t.outcome not in ("ok",)]
    if bad:
        error = "; ".join(
            f"{t.name}: {t.outcome}" + (f" ({t.error})" if t.error else "") for t in bad
        )
        set_state(eng, sid, "failed", f"{len(bad)} of {len(tasks)} kernels failed", error=error)
        sr.emit("failed", len(tasks) - len(bad), len(tasks), f"series {sid}", error[:200])
        return "failed"
    set_state(eng, sid, "done", f"{len(tasks)} kernels measured", error="")
    sr.emit("done", len(tasks), len(tasks), f"series {sid}", "all kernels measured")
    return "done"


def _rounded(t: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in t.items()}


def _run_summary(runs: list[RunData]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{n} {st}" for st, n in sorted(counts.items())) or "no runs"


# -- apply


def _series_mails(s: Session, series: Series) -> list[Any]:
    """The patches to ``git am``: the submitted mails when kept, else mails rebuilt from the
    stored patch rows (series created by other front ends)."""
    from stackbench.patches.parser import parse_mbox

    # series.mbox for every door since migration 0003; meta's copy for older CLI series
    raw = series.mbox or (
        base64.b64decode(series.meta["mbox_b64"]) if "mbox_b64" in series.meta else None
    )
    if raw:
        parsed = parse_mbox(raw, source=f"series {series.id}")
        if len(parsed.patches) == len(series.patches):
            return parsed.patches
    return [_RebuiltPatch(mail_from_patch(p)) for p in sorted(series.patches, key=lambda p: p.idx)]


@dataclass
class _RebuiltPatch:
    raw: bytes


def mail_from_patch(p: Patch) -> bytes:
    """A git-am-able mail from a stored patch row."""
    author = f"{p.author} <{p.author_email}>" if p.author_email else p.author or "unknown"
    headers = [
        f"From: {author}",
        f"Date: {p.date}" if p.date else "",
        f"Subject: [PATCH {p.idx}/{p.total}] {p.subject}",
        f"Message-ID: <{p.message_id.strip('<>')}>" if p.message_id else "",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=UTF-8",
        "Content-Transfer-Encoding: 8bit",
    ]
    body = p.body.rstrip("\n")
    text = "\n".join(h for h in headers if h) + "\n\n" + body + "\n---\n" + p.diff
    if not text.endswith("\n"):
        text += "\n"
    return text.encode()


def kernel_name(idx: int, total: int, sha: str) -> str:
    """What table columns show for a commit of a stack: short enough for mmtests' columns,
    unique, and its place in the stack (``2/3-6450d54d``); the subject is on the patch row."""
    return f"{idx}/{total}-{sha[:8]}"


def _fetch_pushed(eng: Engine, series_id: int, repo: Path) -> None:
    """A series that came by git push is built from the commits as pushed: copy them from
    the intake repository into the tree's repository (no git am)."""
    from stackbench.patches import gitops

    with _tx(eng) as s:
        push = (s.get(Series, series_id).meta or {}).get("push") or {}
    head, source = push.get("head"), push.get("repo")
    if not head or not source or trees.has_commit(repo, head):
        return
    if not Path(source).exists():
        raise StackbenchError(f"pushed commits of series {series_id} are gone: {source}")
    gitops.fetch_commit(repo, source, head, f"refs/stackbench/series/{series_id}")


def _apply(
    eng: Engine, sr: SeriesRun, repo: Path, base: str, tree: trees.TreeDef
) -> list[KernelTask] | None:
    from stackbench.patches.apply import apply_series, remove_worktree
    from stackbench.patches.store import record_apply

    sid = sr.series_id
    _fetch_pushed(eng, sid, repo)
    with _tx(eng) as s:
        series = s.get(Series, sid)
        patches = sorted(series.patches, key=lambda p: p.idx)
        applied = bool(patches) and all(
            p.commit_sha and trees.has_commit(repo, p.commit_sha) for p in patches
        )
        if applied and series.base_commit:
            base_sha = series.base_commit
        else:
            series.state = "applying"
            _event(s, sid, f"series:{sid}", "applying", f"git am onto {base}")
            mails = _series_mails(s, series)
            applied = False
    if not applied:
        workdir = Path(tempfile.mkdtemp(prefix=f"apply-{sid}-", dir=kpaths.cache_root()))
        workdir.rmdir()
        try:
            result = apply_series(repo, base, mails, workdir, ref=f"refs/stackbench/series/{sid}")
        finally:
            remove_worktree(repo, workdir)
        with _tx(eng) as s:
            record_apply(s, sid, result)
        if not result.ok:
            return None
        base_sha = result.base_sha
    with _tx(eng) as s:
        series = s.get(Series, sid)
        patches = sorted(series.patches, key=lambda p: p.idx)
        base_label = base if base != base_sha else base_sha[:12]
        tasks = [KernelTask(label="base", name=base_label, commit=base_sha)]
        for p in patches:
            tasks.append(
                KernelTask(
                    label=f"{p.idx}/{p.total}",
                    name=kernel_name(p.idx, p.total, p.commit_sha or ""),
                    commit=p.commit_sha or "",
                    patch_id=p.id,
                )
            )
    return tasks


# -- build


def _build_estimate(tree: trees.TreeDef, settings: Settings, commit: str) -> float:
    if commit and kbuild.find_artifact(tree.name, commit, settings.config):
        return 1.0
    objdir = kbuild.workspace_dir(tree.name, settings.config) / "build" / "vmlinux"
    return 60.0 if objdir.exists() else 420.0


def _kernel_row(
    s: Session, sid: int, t: KernelTask, tree_id: int | None, chash: str, compiler: str, cfg: str
) -> KernelBuild:
    row = s.scalars(
        select(KernelBuild).where(
            KernelBuild.commit == t.commit,
            KernelBuild.config_hash == chash,
            KernelBuild.compiler == compiler,
        )
    ).one_or_none()
    if row is None:
        row = KernelBuild(
            commit=t.commit,
            config_hash=chash,
            compiler=compiler,
            config_name=cfg,
            tree_id=tree_id,
            name=t.name,
            series_id=sid,
            patch_id=t.patch_id,
            meta={},
        )
        s.add(row)
    elif row.series_id is None or row.series_id == sid or not row.name:
        row.name = t.name
        row.series_id = row.series_id or sid
        row.patch_id = row.patch_id or t.patch_id
    s.flush()
    return row


def _update_build(
    eng: Engine, sr: SeriesRun, t: KernelTask, chash: str, status: str, **fields: Any
) -> None:
    compiler = kbuild.compiler_id()
    with _tx(eng) as s:
        tree_id = s.scalars(select(Series.tree_id).where(Series.id == sr.series_id)).one_or_none()
        row = _kernel_row(s, sr.series_id, t, tree_id, chash, compiler, sr.settings.config)
        previous = row.status
        row.status = status
        for k, v in fields.items():
            if k == "meta":
                row.meta = {**row.meta, **v}
            else:
                setattr(row, k, v)
        t.build_id = row.id
        if previous != status:
            msg = f"{t.name}: {status}"
            if status == "build-failed":
                msg += "\n" + fields.get("log", "")[-2000:]
            _event(s, sr.series_id, f"build:{row.id}", status, msg)


def _build_one(eng: Engine, sr: SeriesRun, repo: Path, tree: trees.TreeDef, t: KernelTask) -> None:
    settings = sr.settings

    def configured(chash: str) -> None:
        _update_build(eng, sr, t, chash, "building")

    try:
        res = kbuild.build(
            repo,
            t.commit,
            config=settings.config,
            tree=tree.name,
            jobs=settings.make_jobs,
            on_configured=configured,
        )
    except (StackbenchError, OSError) as exc:
        # e.g. a patch that breaks Kconfig: this kernel failed, the others go on
        t.outcome, t.error = "build-failed", str(exc).splitlines()[0][:300]
        _update_build(eng, sr, t, "", "build-failed", log=str(exc)[-8000:])
        return
    t.build = res
    if not res.ok:
        t.outcome = "build-failed"
        first = next((ln for ln in res.log_tail.splitlines() if "error:" in ln), "")
        t.error = first.strip()[:300] or "make failed"
        _update_build(
            eng,
            sr,
            t,
            res.config_hash,
            "build-failed",
            log=res.log_tail,
            duration_s=res.duration_s,
        )
        return
    t.outcome = "built"
    _update_build(
        eng,
        sr,
        t,
        res.config_hash,
        "built",
        log="",
        artifact_path=str(res.artifact_dir),
        duration_s=None if res.reused else res.duration_s,
        meta={
            "artifact": res.key,
            "kernel_release": res.kernel_release,
            "modules": sorted(res.modules),
            "module_error": res.module_error,
        },
    )


# -- boot and run


def _boot_estimate(plan: list[SubJob]) -> float:
    return 15.0 + sum(sj.runs * _default_run_s(sj) for sj in plan)


def _default_run_s(sj: SubJob) -> float:
    # first guesses (TCG, small sizes); the ETA corrects itself from the first kernel on
    return {"vm-scalability": 10.0, "thpscale": 20.0}.get(sj.suite, 25.0)


def boot_timeout(plan: list[SubJob], settings: Settings) -> float:
    if settings.boot_timeout_s is not None:
        return settings.boot_timeout_s
    return sum(sj.runs * sj.timeout_s for sj in plan) + settings.init_timeout_s + 120


def failure_runs(
    plan: list[SubJob],
    kernel: KernelSpec,
    machine: MachineSpec,
    status: str,
    error: str,
    boot_id: str,
    logs: dict[str, bytes],
) -> list[RunData]:
    """One run per (sub-job, iteration) that could not happen, with the reason."""
    out = []
    for sj in plan:
        for i in range(sj.runs):
            data = RunData(
                job=sj.job_spec(),
                kernel=kernel,
                machine=machine,
                iteration=i,
                samples={},
                source="qemu",
                status=status,
                error=error,
                logs=dict(logs),
                meta={"subjob": sj.name, "boot_id": boot_id, **sj.provenance()},
            )
            data.idempotency_key = hashlib.sha256(f"{data.key()}\0{boot_id}".encode()).hexdigest()
            out.append(data)
    return out


def run_kernel(
    bzimage: Path,
    modules: dict[str, Path],
    plan: list[SubJob],
    *,
    kernel: KernelSpec,
    settings: Settings,
    workdir: Path,
    boot_id: str,
    on_line: Callable[[str], None] | None = None,
    timings: dict[str, Any] | None = None,
) -> tuple[qemu.BootResult | None, list[RunData]]:
    """Boot one kernel with the whole plan and return the runs (failed ones included)."""
    from stackbench.jobs import knobs
    from stackbench.jobs.collect import collect
    from stackbench.jobs.guest import mmtests_image
    from stackbench.jobs.guest.initramfs import build_initramfs, upstream_files

    accel = settings.accel
    if accel == "auto":
        accel = "kvm" if qemu.kvm_usable(bzimage) else "tcg"
    machine = settings.machine(accel)
    runnable, missing = [], []
    for sj in plan:
        mod = MODULE_FOR_SUITE.get(sj.suite)
        (missing if mod and mod not in modules else runnable).append(sj)
    runs: list[RunData] = []
    if missing:
        runs += failure_runs(
            missing, kernel, machine, "failed",
            "the guest module for this suite was not built for this kernel", boot_id, {},
        )  # fmt: skip
    # system knobs: the boot's command line, and jobs this kernel's config cannot run
    append, refused = knobs.boot_setup(runnable, Path(bzimage).parent / "config")
    for sj, why in refused:
        runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
        runnable.remove(sj)
    # upstream suites are fetched and built here; a sub-job whose source fails is failed
    for sj in [sj for sj in runnable if sj.upstream is not None]:
        try:
            upstream_files([sj])
        except StackbenchError as exc:
            why = f"upstream {sj.suite} at {sj.upstream.commit[:12]}: {exc}"
            runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
            runnable.remove(sj)
    # the Debian image some sub-jobs boot with (jobs/guest/mmtests_image.py), built once
    extra, failed = mmtests_image.plan_drives(runnable)
    for sj, why in failed:
        runs += failure_runs([sj], kernel, machine, "failed", why, boot_id, {})
        runnable.remove(sj)
    if not runnable:
        return None, runs
    module_ko = next((modules[m] for m in MODULE_FOR_SUITE.values() if m in modules), None)
    workdir.mkdir(parents=True, exist_ok=True)
    timings = timings if timings is not None else {}
    t0 = time.monotonic()
    initrd = build_initramfs(workdir / "initrd.cpio.gz", runnable, module_ko)
    timings["initramfs_s"] = timings.get("initramfs_s", 0.0) + time.monotonic() - t0
    res = qemu.boot(
        bzimage,
        initrd,
        workdir=workdir,
        cpus=settings.cpus,
        mem_mb=settings.mem_mb,
        timeout_s=boot_timeout(runnable, settings),
        accel=accel,
        expect=GUEST_BANNER,
        expect_within_s=settings.init_timeout_s,
        on_line=on_line,
        append=append,
        extra=extra,
    )
    timings["vm_s"] = timings.get("vm_s", 0.0) + res.duration_s
    console = {"console.log": _read_capped(res.console_path)}
    tail = "\n".join(res.console_tail.splitlines()[-CONSOLE_TAIL_LINES:])
    if res.status in ("crashed", "timeout", "error"):
        status = {"error": "failed"}.get(res.status, res.status)
        runs += failure_runs(
            runnable, kernel, machine, status, f"{res.reason}\n--- console ---\n{tail}",
            boot_id, console,
        )  # fmt: skip
        return res, runs
    if res.results_dir is None:
        runs += failure_runs(
            runnable, kernel, machine, "failed",
            f"the guest exited without sending results\n--- console ---\n{tail}",
            boot_id, console,
        )  # fmt: skip
        return res, runs
    collected = collect(
        res.results_dir, runnable, kernel=kernel, machine=machine, source="qemu", boot_id=boot_id
    )
    timings["guest_runs_s"] = timings.get("guest_runs_s", 0.0) + sum(
        r.duration_s or 0.0 for r in collected
    )
    for r in collected:
        r.logs = {**r.logs, **console}
        if r.status != "done" and r.error and r.status in ("lost", "failed"):
            r.error = f"{r.error}\n--- console ---\n{tail}"
    return res, runs + collected


def _read_capped(path: Path, limit: int = 1 << 20) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    return data if len(data) <= limit else b"[...]\n" + data[-limit:]


def _boot_one(
    eng: Engine,
    sr: SeriesRun,
    t: KernelTask,
    plan: list[SubJob],
    attempt: int,
    index: int,
    total: int,
) -> list[RunData]:
    assert t.build is not None and t.build.artifact_dir is not None
    b = t.build
    kernel = KernelSpec(
        commit=b.commit,
        name=t.name,
        config_name=b.config_name,
        config_hash=b.config_hash,
        compiler=b.compiler,
        tree=b.tree,
        status="built",
        meta={"series": sr.series_id},
    )
    total_runs = sum(sj.runs for sj in plan)
    done = {"n": 0}

    def on_line(line: str) -> None:
        if GUEST_BANNER in line:
            sr.emit("run", 0, total_runs, t.name, "guest up")
        m = _RUN_DONE.search(line)
        if m:
            done["n"] += 1
            sr.eta.progress(f"boot:{t.commit}", done["n"] / max(total_runs, 1))
            rc = "" if m.group(3) == "0" else f" (rc {m.group(3)})"
            sr.emit("run", done["n"], total_runs, t.name, f"{m.group(1)} #{m.group(2)}{rc}")

    sr.emit("boot", index, total, t.name, f"{total_runs} runs in one boot")
    workdir = sbconfig.home() / "work" / f"series-{sr.series_id}" / f"{b.commit[:12]}"
    shutil.rmtree(workdir, ignore_errors=True)
    boot_id = f"series-{sr.series_id}-attempt-{attempt}"
    res, runs = run_kernel(
        b.bzimage,
        b.modules,
        plan,
        kernel=kernel,
        settings=sr.settings,
        workdir=workdir,
        boot_id=boot_id,
        on_line=on_line,
        timings=sr.timings,
    )
    if res is None:
        t.outcome, t.error = "error", "nothing could run on this kernel"
    else:
        t.outcome = res.status
        t.error = res.reason if res.status != "ok" else ""
        if res.status == "ok" and any(r.status != "done" for r in runs):
            failed = [r for r in runs if r.status != "done"]
            t.error = f"{len(failed)} of {len(runs)} runs failed: {failed[0].error.splitlines()[0]}"
            t.outcome = "runs-failed"
        with _tx(eng) as s:
            _event(
                s,
                sr.series_id,
                f"build:{t.build_id}",
                f"boot-{res.status}",
                f"{t.name}: boot {res.status} under {res.accel_used} in {res.duration_s:.0f}s"
                + (f": {res.reason}" if res.reason else ""),
            )
    return runs


# ---- single job on a given artifact (Buildbot workers) --------------------------------------


def run_job(
    *,
    artifact: Path,
    job: str,
    runs: int,
    kernel: KernelSpec,
    machine: MachineSpec,
    settings: Settings | None = None,
    workdir: Path | None = None,
) -> list[RunData]:
    """Run one job ``runs`` times on a built kernel artifact (a kernels.build artifact dir:
    bzImage and modules/) in one boot; failed boots give failed runs, not exceptions."""
    settings = settings or Settings()
    if machine.cpus:
        settings.cpus = machine.cpus
    if machine.memory_mb:
        settings.mem_mb = machine.memory_mb
    settings.machine_name = machine.name
    bzimage = Path(artifact) / "bzImage"
    if not bzimage.is_file():
        raise InputError(artifact, "no bzImage in the kernel artifact")
    modules = {p.stem: p for p in sorted((Path(artifact) / "modules").glob("*.ko"))}
    plan = plan_for(resolve_jobs([job], runs), settings)
    wd = workdir or Path(tempfile.mkdtemp(prefix="stackbench-job-", dir=sbconfig.home()))
    boot_id = f"job-{hashlib.sha256(str(wd).encode()).hexdigest()[:12]}-{time.time_ns()}"
    _, out = run_kernel(
        bzimage, modules, plan, kernel=kernel, settings=settings, workdir=wd, boot_id=boot_id
    )
    for r in out:
        r.machine = machine
    return out


# ---- what a series produced -----------------------------------------------------------------


def series_kernels(eng: Engine, series_id: int) -> list[KernelBuild]:
    """The series' kernels in stack order (base first): every built one with runs."""
    with _tx(eng) as s:
        series = s.get(Series, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        commits = [series.base_commit] + [
            p.commit_sha for p in sorted(series.patches, key=lambda p: p.idx)
        ]
        out = []
        for c in commits:
            if not c:
                continue
            row = s.scalars(
                select(KernelBuild)
                .where(KernelBuild.commit == c, KernelBuild.config_name != "")
                .order_by(KernelBuild.id.desc())
            ).first()
            if row is not None:
                out.append(row)
        return out
