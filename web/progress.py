"""Where a series stands: one state per commit (the strip on the list) and per commit x job
(the matrix on the series page), derived from patches, kernel builds and runs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Job, KernelBuild, Patch, Run, Series

PENDING_SERIES = {"new", "applying", "applied", "building", "running"}
RUN_ACTIVE = {"queued", "running"}
RUN_FAILED = {"crashed", "timeout", "failed", "lost"}


@dataclass
class Cell:
    state: str
    runs: list[Run] = field(default_factory=list)
    expected: int = 0

    @property
    def done(self) -> int:
        return sum(1 for r in self.runs if r.status == "done")


@dataclass
class Commit:
    label: str
    sha: str | None
    patch: Patch | None
    build: KernelBuild | None
    state: str
    cells: dict[int, Cell] = field(default_factory=dict)


def _run_state(statuses: list[str], build_state: str) -> str:
    if not statuses:
        return build_state
    if any(st in RUN_ACTIVE for st in statuses):
        return "running"
    if any(st in RUN_FAILED for st in statuses):
        return "failed"
    return "done"


def _build_state(patch: Patch | None, build: KernelBuild | None) -> str:
    if patch is not None and patch.state == "apply-failed":
        return "failed"
    if build is None:
        return "applied" if patch is None or patch.state == "applied" else "pending"
    if build.status in ("pending", "building"):
        return "building"
    if build.status == "build-failed":
        return "failed"
    return "applied"


def _builds(s: Session, series_list: list[Series]) -> dict[int, list[KernelBuild]]:
    ids = [x.id for x in series_list]
    bases = [x.base_commit for x in series_list if x.base_commit]
    out: dict[int, list[KernelBuild]] = defaultdict(list)
    if not ids:
        return out
    cond = KernelBuild.series_id.in_(ids)
    if bases:
        cond = or_(cond, KernelBuild.commit.in_(bases))
    by_commit: dict[str, list[KernelBuild]] = defaultdict(list)
    for b in s.scalars(select(KernelBuild).where(cond).order_by(KernelBuild.id)):
        if b.series_id in ids:
            out[b.series_id].append(b)
        by_commit[b.commit].append(b)
    for x in series_list:
        if x.base_commit and not any(b.commit == x.base_commit for b in out[x.id]):
            out[x.id].extend(by_commit.get(x.base_commit, [])[:1])
    return out


def commits_of(
    s: Session, series_list: list[Series], with_runs: bool = True
) -> dict[int, list[Commit]]:
    """Base and every patch of each series, with build and run states."""
    builds = _builds(s, series_list)
    all_builds = [b for bl in builds.values() for b in bl]
    runs_by_build: dict[int, list[Run]] = defaultdict(list)
    if all_builds:
        q = select(Run).where(Run.build_id.in_([b.id for b in all_builds]))
        for r in s.scalars(q.order_by(Run.iteration, Run.id)):
            runs_by_build[r.build_id].append(r)
    out: dict[int, list[Commit]] = {}
    for x in series_list:
        bl = builds.get(x.id, [])
        expected = int((x.meta or {}).get("runs") or 0)
        by_patch = {b.patch_id: b for b in bl if b.patch_id is not None}
        by_sha = {b.commit: b for b in bl}
        base_build = by_sha.get(x.base_commit or "") or next(
            (b for b in bl if b.patch_id is None), None
        )
        rows = [Commit("base", x.base_commit, None, base_build, "")]
        for p in x.patches:
            b = by_patch.get(p.id) or (by_sha.get(p.commit_sha) if p.commit_sha else None)
            rows.append(Commit(f"{p.idx}/{p.total}", p.commit_sha, p, b, ""))
        for c in rows:
            bstate = _build_state(c.patch, c.build)
            runs = runs_by_build.get(c.build.id, []) if c.build else []
            c.state = _run_state([r.status for r in runs], bstate)
            if c.state == "applied" and x.state in ("new", "applying") and c.sha is None:
                c.state = "pending"
            by_job: dict[int, list[Run]] = defaultdict(list)
            for r in runs:
                by_job[r.job_id].append(r)
            for jid, jr in by_job.items():
                st = _run_state([r.status for r in jr], bstate)
                if st == "done" and expected and len(jr) < expected:
                    st = "running"
                c.cells[jid] = Cell(st, jr, expected)
        out[x.id] = rows
    return out


def jobs_for(s: Session, commits: list[Commit]) -> list[Job]:
    ids = sorted({jid for c in commits for jid in c.cells})
    if not ids:
        return []
    return list(s.scalars(select(Job).where(Job.id.in_(ids)).order_by(Job.suite, Job.params_key)))


def is_pending(series: Series) -> bool:
    """Still changing: running, or finished by the dispatcher that has yet to note its
    report mail (the page keeps following it until it says where the mail went)."""
    meta = series.meta or {}
    if series.state in ("done", "failed") and meta.get("submitted"):
        return "report_mail" not in meta
    return series.state in PENDING_SERIES
