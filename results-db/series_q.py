"""Series: the list and one series with its patches, the kernels of a series, its events,
and how many a user submitted lately. Every function takes the caller's session and leaves
committing to it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, defer, selectinload

from stackbench.resultsdb.models import Event, KernelBuild, Patch, Series, Tree

# ``series.source`` of the comparisons a nightly, a bisect or an A/A measures as a series
# (jobs/tracking/comparison.py): not submitted by anyone
COMPARISONS = ("nightly", "bisect", "aa")


def submitted_since(s: Session, owner_id: int, since: datetime) -> int:
    """Series the user submitted after ``since`` (the submission rate limit)."""
    used = s.scalar(
        select(func.count())
        .select_from(Series)
        .where(Series.owner_id == owner_id, Series.created_at > since)
    )
    return int(used or 0)


def listing(
    s: Session, *, tree: str, submitter: str, state: str, offset: int, limit: int
) -> list[Series]:
    """Series newest first, filtered by tree name, submitter (name or address, a substring)
    and state. Each with its tree and its patches' titles and states only: a patch's body
    and diff (megabytes for a big series) and the cover letter stay in the database."""
    q = select(Series).options(
        defer(Series.cover_letter),
        selectinload(Series.patches).load_only(
            Patch.id,
            Patch.series_id,
            Patch.idx,
            Patch.total,
            Patch.subject,
            Patch.commit_sha,
            Patch.state,
        ),  # fmt: skip
        selectinload(Series.tree),
    )
    if tree:
        q = q.join(Tree, Tree.id == Series.tree_id).where(Tree.name == tree)
    if submitter:
        pat = "%" + submitter.replace("%", r"\%").replace("_", r"\_") + "%"
        q = q.where(Series.submitter.ilike(pat) | Series.submitter_email.ilike(pat))
    if state:
        q = q.where(Series.state == state)
    # a nightly's or a bisect's comparison is reached from its branch or bisect, not listed
    q = q.where(Series.source.notin_(COMPARISONS))
    q = q.order_by(Series.created_at.desc(), Series.id.desc())
    return list(s.scalars(q.offset(offset).limit(limit)))


def get(s: Session, series_id: int) -> Series | None:
    """One series with its patches and tree loaded."""
    return s.scalars(
        select(Series)
        .where(Series.id == series_id)
        .options(selectinload(Series.patches), selectinload(Series.tree))
    ).one_or_none()


def patch(s: Session, patch_id: int) -> Patch | None:
    return s.get(Patch, patch_id)


def events(s: Session, series_id: int, limit: int = 50) -> list[Event]:
    """The series' latest events, newest first."""
    return list(
        s.scalars(
            select(Event).where(Event.series_id == series_id).order_by(Event.id.desc()).limit(limit)
        )
    )


def kernels_of(s: Session, series_list: list[Series]) -> dict[int, list[KernelBuild]]:
    """Per series, its kernel builds in id order; a series none of whose builds is of its
    base commit gets the first build of that commit stored by anything (another series, an
    import), so every series shows its base."""
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


def kernel_commits(s: Session, series_id: int) -> list[str]:
    """The commits of the series' own kernel builds, in the order they were stored."""
    return list(
        s.scalars(
            select(KernelBuild.commit)
            .where(KernelBuild.series_id == series_id)
            .order_by(KernelBuild.id)
        )
    )


def patch_of_commit(s: Session, commit: str) -> Patch | None:
    """A patch applied as this commit (the first the database finds)."""
    return s.scalars(select(Patch).where(Patch.commit_sha == commit)).first()
