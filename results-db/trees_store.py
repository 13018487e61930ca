"""What the jobs and the series store write about trees and tracked branches beyond
:mod:`stackbench.resultsdb.trees_q` (the one place a tree's or a branch's row is saved):
a tree a submitted series names added by name, the nightly run's notes on a branch, and
the branches it walks. Every function takes the caller's session
(:func:`stackbench.resultsdb.db.session`) and leaves committing to it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb import ingest, trees_q
from stackbench.resultsdb.models import TrackedBranch, Tree


def ensure_tree(s: Session, name: str) -> Tree:
    """The tree NAME as stored, else a new row with the name alone; a concurrent writer
    storing the same name first is no error."""
    row = trees_q.named(s, name)
    if row is not None:
        return row
    # the imports' upsert: one way to add a tree by name, race-safe without a savepoint
    return s.get(Tree, ingest.tree_id(s.connection(), name))


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
