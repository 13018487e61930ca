"""Saved comparisons: a set of kernels and table options under a permanent key, with the
rendered result kept beside a fingerprint of the runs it came from.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Comparison


def created_since(s: Session, owner_id: int, since: datetime) -> int:
    """Comparisons the user created after ``since`` (the comparison rate limit)."""
    used = s.scalar(
        select(func.count())
        .select_from(Comparison)
        .where(Comparison.params["owner_id"].astext == str(owner_id), Comparison.created_at > since)
    )
    return int(used or 0)
