"""Series: the list and one series with its patches, the kernels of a series, its events,
and how many a user submitted lately. Every function takes the caller's session and leaves
committing to it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Series


def submitted_since(s: Session, owner_id: int, since: datetime) -> int:
    """Series the user submitted after ``since`` (the submission rate limit)."""
    used = s.scalar(
        select(func.count())
        .select_from(Series)
        .where(Series.owner_id == owner_id, Series.created_at > since)
    )
    return int(used or 0)
