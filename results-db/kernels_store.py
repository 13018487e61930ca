"""The kernels of a series and their ``kernel_build`` rows, as the jobs (the pipeline, the
dispatcher, the CLI) and ingest read and write them: this module is the one writer of those
rows. Every function takes the caller's session (:func:`stackbench.resultsdb.db.session`),
or ingest's connection, and leaves committing to it.

A series' kernels are its stack: the base commit, then each patch's commit in stack order.
:func:`stack` is the one definition of that list; everything that needs "the kernels of a
series" starts from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from stackbench.errors import NotFoundError
from stackbench.resultsdb.models import KernelBuild, Patch, Run, Series


@dataclass(frozen=True)
class StackKernel:
    """One kernel of a series' stack: the base (``patch`` None) or a patch's commit."""

    commit: str  # "" while the base or the patch is not applied
    patch: Patch | None

    @property
    def label(self) -> str:
        """``base`` or the patch's place in the stack (``2/3``)."""
        return "base" if self.patch is None else f"{self.patch.idx}/{self.patch.total}"


def stack(series: Series) -> list[StackKernel]:
    """The series' kernels in stack order, base first, applied or not."""
    out = [StackKernel(series.base_commit or "", None)]
    out += [StackKernel(p.commit_sha or "", p) for p in sorted(series.patches, key=lambda p: p.idx)]
    return out


def kernel_name(idx: int, total: int, sha: str) -> str:
    """What table columns show for a commit of a stack: short enough for mmtests' columns,
    unique, and its place in the stack (``2/3-6450d54d``; ``2/3`` before it is applied); the
    subject is on the patch row."""
    return f"{idx}/{total}-{sha[:8]}".rstrip("-")


def base_name(ref: str, commit: str) -> str:
    """What table columns show for a series' base: the ref it was given (``v6.1-debian``),
    or the commit's first 12 digits when it was given as a sha."""
    return ref if ref and ref != commit else commit[:12] or "base"


def stack_names(series: Series) -> list[tuple[str, str]]:
    """(commit, the name the tables give it) of every kernel of the series' stack, base
    first; the commit is "" while it is not applied."""
    return [
        (k.commit, base_name(series.base_ref or "", k.commit))
        if k.patch is None
        else (k.commit, kernel_name(k.patch.idx, k.patch.total, k.commit))
        for k in stack(series)
    ]


def built_kernels(s: Session, series: Series) -> list[KernelBuild]:
    """The series' kernels in stack order that have a build with a config (the newest such
    row of each commit); commits not applied or never built are left out."""
    out = []
    for k in stack(series):
        if not k.commit:
            continue
        row = latest_configured_build(s, k.commit)
        if row is not None:
            out.append(row)
    return out


def series_kernels(s: Session, series_id: int) -> list[KernelBuild]:
    """:func:`built_kernels` of the series by its id; NotFoundError when there is none."""
    series = s.get(Series, series_id)
    if series is None:
        raise NotFoundError(f"no series {series_id}")
    return built_kernels(s, series)


def latest_configured_build(s: Session, commit: str) -> KernelBuild | None:
    """The newest build of the commit made with a named config (imports have none)."""
    return s.scalars(
        select(KernelBuild)
        .where(KernelBuild.commit == commit, KernelBuild.config_name != "")
        .order_by(KernelBuild.id.desc())
    ).first()


def failed_build(s: Session, commit: str, config_name: str) -> KernelBuild | None:
    """The newest build of the commit with this config recorded ``build-failed``."""
    return s.scalars(
        select(KernelBuild)
        .where(
            KernelBuild.commit == commit,
            KernelBuild.config_name == config_name,
            KernelBuild.status == "build-failed",
        )
        .order_by(KernelBuild.id.desc())
    ).first()


def first_build(s: Session, commit: str) -> KernelBuild | None:
    """The first build stored of the commit, whatever its config."""
    return s.scalars(
        select(KernelBuild).where(KernelBuild.commit == commit).order_by(KernelBuild.id)
    ).first()


def has_build(s: Session, commit: str) -> bool:
    return s.scalars(select(KernelBuild.id).where(KernelBuild.commit == commit)).first() is not None


def save_build(
    s: Session,
    commit: str,
    config_hash: str,
    compiler: str,
    *,
    config_name: str = "",
    tree_id: int | None = None,
    name: str = "",
    series_id: int | None = None,
    patch_id: int | None = None,
) -> KernelBuild:
    """The build of the commit with this config hash and compiler (the table's key): a new
    row, or the stored one, which a series claims when no other series did (its name and
    patch follow then), so a kernel built for one series and reused by another keeps its
    first series. Flushed, so the row has its id."""
    row = s.scalars(
        select(KernelBuild).where(
            KernelBuild.commit == commit,
            KernelBuild.config_hash == config_hash,
            KernelBuild.compiler == compiler,
        )
    ).one_or_none()
    if row is None:
        row = KernelBuild(
            commit=commit,
            config_hash=config_hash,
            compiler=compiler,
            config_name=config_name,
            tree_id=tree_id,
            name=name,
            series_id=series_id,
            patch_id=patch_id,
            meta={},
        )
        s.add(row)
    elif row.series_id is None or row.series_id == series_id or not row.name:
        row.name = name
        row.series_id = row.series_id or series_id
        row.patch_id = row.patch_id or patch_id
    s.flush()
    return row


def build_id(conn: Connection, values: dict[str, Any]) -> int:
    """The id of the build ``values`` name by the table's key (commit, config hash,
    compiler), inserted with ``values`` when missing: the kernel of runs nobody built here
    (an import, a worker's upload). Concurrent ingests insert it once; the key decides."""
    key = ("commit", "config_hash", "compiler")
    conn.execute(insert(KernelBuild).values(**values).on_conflict_do_nothing(index_elements=key))
    cond = [getattr(KernelBuild, k) == values[k] for k in key]
    return conn.execute(select(KernelBuild.id).where(*cond)).scalar_one()


def update_build(row: KernelBuild, *, meta: dict[str, Any] | None = None, **fields: Any) -> None:
    """Set the build's columns given; ``meta`` is merged into its own."""
    for k, v in fields.items():
        setattr(row, k, v)
    if meta is not None:
        row.meta = {**row.meta, **meta}


def update_job_meta(
    s: Session, build_id: int, key: str, job: str, update: Callable[[Any], Any]
) -> None:
    """Set what the kernel keeps for ``job`` under ``meta[key]`` (a dict by job: an evidence
    boot's coverage counts, its profile) to ``update`` of what it kept (None at first); a
    kernel that is gone keeps nothing."""
    row = s.get(KernelBuild, build_id)
    if row is None:
        return
    kept = dict((row.meta or {}).get(key) or {})
    kept[job] = update(kept.get(job))
    row.meta = {**(row.meta or {}), key: kept}


def attach_to_series(s: Session, series_id: int) -> None:
    """Tie builds stored by commit alone (a worker's upload) and not yet of any series to
    the series' patches of those commits."""
    s.execute(
        text(
            "UPDATE kernel_build k SET series_id = :s, patch_id = p.id FROM patch p "
            "WHERE p.series_id = :s AND k.commit = p.commit_sha AND k.series_id IS NULL"
        ),
        {"s": series_id},
    )


def failed_builds(s: Session, commits: list[str]) -> list[tuple[str, str, str]]:
    """(name, commit, log) of the commits' builds recorded ``build-failed``, oldest first."""
    rows = s.execute(
        text(
            "SELECT name, commit, log FROM kernel_build WHERE commit = ANY(:c) "
            "AND status = 'build-failed' ORDER BY id"
        ),
        {"c": commits},
    ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def unfinished_runs(
    s: Session, commits: list[str], first_run: int
) -> list[tuple[str, str, int, str | None]]:
    """(kernel name, run status, how many, one error) of the commits' runs from run id
    ``first_run`` on that neither finished nor were lost, by kernel name."""
    rows = s.execute(
        text(
            "SELECT k.name, r.status, count(*), min(r.error) FROM run r "
            "JOIN kernel_build k ON k.id = r.build_id WHERE r.id >= :first "
            "AND k.commit = ANY(:c) AND r.status NOT IN ('done', 'lost') "
            "GROUP BY k.name, r.status ORDER BY k.name"
        ),
        {"first": first_run, "c": commits},
    ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def last_run_id(s: Session) -> int:
    """The newest run's id, 0 when there is none: runs stored later have larger ids."""
    return int(s.execute(text("SELECT coalesce(max(id), 0) FROM run")).scalar_one())


def run_statuses(s: Session, build_id: int) -> list[str]:
    """The status of every run of the build."""
    return list(s.scalars(select(Run.status).where(Run.build_id == build_id)))


def done_run_count(s: Session, build_id: int) -> int:
    """Finished runs of the build."""
    return int(
        s.scalar(select(func.count()).where(Run.build_id == build_id, Run.status == "done")) or 0
    )
