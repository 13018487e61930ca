"""Kernel builds as pages and the API list them (a comparison reads kernels through
:mod:`stackbench.resultsdb.query`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import KernelBuild


def get(s: Session, build_id: int) -> KernelBuild | None:
    return s.get(KernelBuild, build_id)


def listing(
    s: Session,
    *,
    series_id: int | None = None,
    commit_prefix: str = "",
    offset: int = 0,
    limit: int = 100,
) -> list[KernelBuild]:
    """Kernel builds newest first, optionally of one series or starting with a commit
    prefix (matched literally: % and _ are not wildcards)."""
    q = select(KernelBuild).order_by(KernelBuild.id.desc())
    if series_id is not None:
        q = q.where(KernelBuild.series_id == series_id)
    if commit_prefix:
        q = q.where(KernelBuild.commit.startswith(commit_prefix, autoescape=True))
    return list(s.scalars(q.offset(offset).limit(limit)))


def by_commit(s: Session, commit: str) -> KernelBuild | None:
    """The first build stored of a commit."""
    return s.scalars(select(KernelBuild).where(KernelBuild.commit == commit)).first()
