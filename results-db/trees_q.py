"""Trees and the branches of them the nightly run tracks: the one place their rows are
written, whoever asks (a tree's YAML definition, a submitted series naming a tree, the
admin page, a tracked-branch file)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import TrackedBranch, Tree


# a tree's name is a file name (kernels/trees/NAME.yaml, the repository's folder) and part of
# a git ref (refs/for/NAME/BASE): no slash, no leading dot, well under the 255 bytes of a name
def get(s: Session, tree_id: int) -> Tree | None:
    return s.get(Tree, tree_id)


def named(s: Session, name: str) -> Tree | None:
    return s.scalars(select(Tree).where(Tree.name == name)).one_or_none()


def trees(s: Session) -> list[Tree]:
    """Every tree, by name."""
    return list(s.scalars(select(Tree).order_by(Tree.name)))


def save_tree(
    s: Session, name: str, *, url: str = "", default_base: str = "", exists_ok: bool = True
) -> Tree:
    """The tree NAME with this url and default base: created, or (``exists_ok``) updated.
    Without ``exists_ok`` a name in use fails when the session flushes or commits (the
    admin page says so instead of overwriting a tree)."""
    row = named(s, name) if exists_ok else None
    if row is None:
        row = Tree(name=name)
        s.add(row)
    row.url = url
    row.default_base = default_base
    return row


def delete_tree(s: Session, row: Tree) -> None:
    s.delete(row)


def branch(s: Session, branch_id: int) -> TrackedBranch | None:
    return s.get(TrackedBranch, branch_id)


def branches(s: Session) -> list[TrackedBranch]:
    """Every tracked branch, oldest first."""
    return list(s.scalars(select(TrackedBranch).order_by(TrackedBranch.id)))


def save_branch(
    s: Session,
    tree_id: int,
    branch: str,
    *,
    jobs: list[str],
    enabled: bool = True,
    runs: int | None = None,
    max_runs: int | None = None,
    bisect: bool = True,
    meta: dict[str, Any] | None = None,
    exists_ok: bool = True,
) -> TrackedBranch:
    """Track BRANCH of the tree with these jobs and this plan (boots per kernel to start
    with, the cap, whether to bisect; None: the verdict policy's): a new row, or
    (``exists_ok``) the existing one updated, its baseline and history kept and ``meta``
    merged into its own. Without ``exists_ok`` a branch already tracked fails when the
    session flushes or commits."""
    row = None
    if exists_ok:
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
    row.runs, row.max_runs, row.bisect = runs, max_runs, bisect
    if meta:
        row.meta = {**(row.meta or {}), **meta}
    return row


def set_branch_enabled(row: TrackedBranch, enabled: bool) -> None:
    row.enabled = enabled


def delete_branch(s: Session, row: TrackedBranch) -> None:
    s.delete(row)
