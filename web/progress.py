"""Where a series stands: one state per commit (the strip on the list) and per commit x job
(the matrix on the series page), derived from patches, kernel builds and runs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, object_session

from stackbench.jobs.executors import plan
from stackbench.resultsdb import boots, jobs_q, runs_q, series_q, series_runs_store, signals

if TYPE_CHECKING:
    from stackbench.resultsdb.models import Event, Job, KernelBuild, Patch, Run, Series

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

    @property
    def boots_done(self) -> int:
        """Boots of this kernel that finished a run of this job (the verdict's unit)."""
        return len({boots.boot_key(r) for r in self.runs if r.status == "done"})

    @property
    def boots_planned(self) -> int:
        """Boots the series planned for its runs (more rounds may add boots beyond them)."""
        return plan.boots_for(self.expected) if self.expected > 0 else 0

    def boots_text(self) -> str:
        """Boots done and planned, in words: "2 of 3 boots", or "10 boots: 3 planned, 7 more
        for undecided metrics" once more rounds went past the plan."""
        done, planned = self.boots_done, self.boots_planned
        if not planned:
            return f"{done} boot{'s' if done != 1 else ''}"
        if done <= planned:
            return f"{done} of {planned} boots"
        return f"{done} boots: {planned} planned, {done - planned} more for undecided metrics"


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
    # a kernel built and not measured yet says so (a Buildbot build is on the page at once)
    return "built" if build.status == "built" else "applied"


def commits_of(
    s: Session, series_list: list[Series], with_runs: bool = True
) -> dict[int, list[Commit]]:
    """Base and every patch of each series, with build and run states."""
    builds = series_q.kernels_of(s, series_list)
    all_builds = [b for bl in builds.values() for b in bl]
    runs_by_build: dict[int, list[Run]] = defaultdict(list)
    for r in runs_q.of_builds(s, [b.id for b in all_builds]):
        runs_by_build[r.build_id].append(r)
    out: dict[int, list[Commit]] = {}
    for x in series_list:
        bl = builds.get(x.id, [])
        expected = int(getattr(series_runs_store.current(s, x.id), "runs", None) or 0)
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
    return jobs_q.by_ids(s, sorted({jid for c in commits for jid in c.cells}))


def is_pending(series: Series) -> bool:
    """Still changing: running, or finished by the dispatcher that has yet to note its
    report mail (the page keeps following it until it says where the mail went)."""
    s = object_session(series)
    last = series_runs_store.current(s, series.id) if s is not None else None
    if series.state in ("done", "failed") and last is not None and last.report_due:
        return last.report_mail is None
    return series.state in PENDING_SERIES


@dataclass
class EventGroup:
    """Events in a row about one subject in one state (newest first): the newest is shown,
    the others fold under it. A change of state or subject starts a new group, so every
    state change stays a line of its own while per-benchmark progress becomes one line."""

    latest: Event
    earlier: list[Event] = field(default_factory=list)


def fold_events(events: list[Event]) -> list[EventGroup]:
    """Group the series' events (newest first) as :class:`EventGroup` says."""
    out: list[EventGroup] = []
    for e in events:
        last = out[-1] if out else None
        if last is not None and (last.latest.subject, last.latest.state) == (e.subject, e.state):
            last.earlier.append(e)
        else:
            out.append(EventGroup(e))
    return out


def service_warnings(s: Session, series: Series) -> list[str]:
    """What keeps a pending series from moving that is not the series' doing: no
    dispatcher at work, a host fault it waits on, a Buildbot worker lost mid-build."""
    meta = series.meta or {}
    if series.state not in PENDING_SERIES:
        return []
    out = []
    last = series_runs_store.current(s, series.id)
    handed = last is not None and last.executor not in series_runs_store.NOT_DISPATCHED
    if handed and not signals.lock_held(s, signals.DISPATCHER_LOCK):
        out.append("dispatcher not running: this series waits until it runs again "
                   "('stackbench up' starts it)")  # fmt: skip
    fault = (last.host_fault if last is not None else None) or {}
    if fault.get("error"):
        out.append(f"waiting on a host fault (retried until it is fixed): {fault['error']}")
    out += [str(w) for w in meta.get("lost_workers") or []]
    return out
