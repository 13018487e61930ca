"""Trees and the branches of them the nightly run tracks, as the jobs and the series store
write them: a tree's YAML definition registered, a tree a submitted series names, a
tracked-branch file synced. Every function takes the caller's session
(:func:`stackbench.resultsdb.db.session`) and leaves committing to it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import ingest
from stackbench.resultsdb.models import TrackedBranch, Tree


def get(s: Session, tree_id: int) -> Tree | None:
    return s.get(Tree, tree_id)


def named(s: Session, name: str) -> Tree | None:
    return s.scalars(select(Tree).where(Tree.name == name)).one_or_none()


def trees(s: Session) -> list[Tree]:
    """Every tree, in the order the database keeps them."""
    return list(s.scalars(select(Tree)))


def names(s: Session) -> list[str]:
    """Every tree's name, sorted."""
    return list(s.scalars(select(Tree.name).order_by(Tree.name)))


def default_base(s: Session, name: str) -> str | None:
    """The tree's default base; None when there is no such tree."""
    return s.scalar(select(Tree.default_base).where(Tree.name == name))


def save_tree(s: Session, name: str, *, url: str = "", default_base: str = "") -> Tree:
    """The tree NAME with this url and default base: created, or updated when stored.
    Flushed, so the row has its id."""
    row = named(s, name)
    if row is None:
        row = Tree(name=name)
        s.add(row)
    row.url = url
    row.default_base = default_base
    s.flush()
    return row


def ensure_tree(s: Session, name: str) -> Tree:
    """The tree NAME as stored, else a new row with the name alone; a concurrent writer
    storing the same name first is no error."""
    row = named(s, name)
    if row is not None:
        return row
    # the imports' upsert: one way to add a tree by name, race-safe without a savepoint
    return s.get(Tree, ingest.tree_id(s.connection(), name))


def branch(s: Session, branch_id: int) -> TrackedBranch | None:
    return s.get(TrackedBranch, branch_id)


def save_branch(
    s: Session,
    tree_id: int,
    branch: str,
    *,
    jobs: list[str],
    enabled: bool = True,
    meta: dict[str, Any] | None = None,
) -> TrackedBranch:
    """Track BRANCH of the tree with these jobs: a new row, or the stored one updated, its
    baseline and history kept and ``meta`` merged into its own. Flushed, so the row has its
    id."""
    row = s.scalars(
        select(TrackedBranch).where(
            TrackedBranch.tree_id == tree_id, TrackedBranch.branch == branch
        )
    ).one_or_none()
    if row is None:
        row = TrackedBranch(tree_id=tree_id, branch=branch, meta={})
        s.add(row)
    row.jobs = list(jobs)
    row.enabled = enabled
    new_meta = dict(row.meta or {})
    new_meta.update(meta or {})
    row.meta = new_meta
    s.flush()
    return row


def update_branch(row: TrackedBranch, **columns: Any) -> None:
    """Set the tracked branch's columns given (``meta`` replaces it as a whole)."""
    for k, v in columns.items():
        setattr(row, k, v)


def branch_list(s: Session) -> list[tuple[int, str, str, bool]]:
    """(id, tree name, branch, enabled) of every tracked branch, by tree and branch."""
    rows = s.execute(
        select(TrackedBranch.id, Tree.name, TrackedBranch.branch, TrackedBranch.enabled)
        .join(Tree, Tree.id == TrackedBranch.tree_id)
        .order_by(Tree.name, TrackedBranch.branch)
    ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]
