"""Per-user submission rate limit, counted from the series table so every gunicorn worker
(and the API, the form and git push alike) sees the same budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Series


def submissions_left(s: Session, user_id: int) -> tuple[int, int]:
    """(how many more submissions are allowed now, window in seconds)."""
    limit = int(current_app.config["SUBMIT_RATE_COUNT"])
    window = int(current_app.config["SUBMIT_RATE_WINDOW"])
    since = datetime.now(UTC) - timedelta(seconds=window)
    used = s.scalar(
        select(func.count())
        .select_from(Series)
        .where(Series.owner_id == user_id, Series.created_at > since)
    )
    return max(0, limit - int(used or 0)), window


def check_submission(s: Session, user_id: int) -> str | None:
    """None when the user may submit, else the message to show."""
    left, window = submissions_left(s, user_id)
    if left > 0:
        return None
    limit = current_app.config["SUBMIT_RATE_COUNT"]
    return f"rate limit: at most {limit} submissions per {window // 60} minutes; try later"
