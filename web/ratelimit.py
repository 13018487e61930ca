"""Rate limits counted in the database, so every gunicorn worker (and the API, the form and
git push alike) sees the same budget: submissions per user (the series table), comparisons
per user (the comparison table) and wrong passwords per name and per client address."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy.orm import Session

from stackbench.resultsdb import accounts_q, comparisons_q, series_q


def submissions_left(s: Session, user_id: int) -> tuple[int, int]:
    """(how many more submissions are allowed now, window in seconds)."""
    limit = int(current_app.config["SUBMIT_RATE_COUNT"])
    window = int(current_app.config["SUBMIT_RATE_WINDOW"])
    since = datetime.now(UTC) - timedelta(seconds=window)
    used = series_q.submitted_since(s, user_id, since)
    return max(0, limit - used), window


def check_submission(s: Session, user_id: int) -> str | None:
    """None when the user may submit, else the message to show."""
    left, window = submissions_left(s, user_id)
    if left > 0:
        return None
    limit = current_app.config["SUBMIT_RATE_COUNT"]
    return f"rate limit: at most {limit} submissions per {window // 60} minutes; try later"


def login_blocked(s: Session, name: str, remote: str) -> bool:
    """True when too many wrong passwords or tokens were given lately for this user name,
    or from this client address (guessing across many names)."""
    limit = int(current_app.config["LOGIN_FAIL_COUNT"])
    since = datetime.now(UTC) - timedelta(seconds=int(current_app.config["LOGIN_FAIL_WINDOW"]))
    by_name = accounts_q.login_failures(s, since, name=name[:200])
    by_remote = accounts_q.login_failures(s, since, remote=remote)
    return by_name >= limit or by_remote >= 3 * limit


def record_login_failure(s: Session, name: str, remote: str) -> None:
    window = int(current_app.config["LOGIN_FAIL_WINDOW"])
    forget_before = datetime.now(UTC) - timedelta(seconds=2 * window)
    accounts_q.add_login_failure(s, name[:200], remote, forget_before=forget_before)
    # committed at once: the failed request itself writes nothing else
    s.commit()


def login_wait_message() -> str:
    minutes = max(1, int(current_app.config["LOGIN_FAIL_WINDOW"]) // 60)
    return f"too many failed sign-ins: try again in {minutes} minutes"


def check_comparison(s: Session, user_id: int) -> str | None:
    """None when the user may start another comparison, else the message to show. Counted
    per user from the comparisons they created in the window."""
    limit = int(current_app.config["COMPARE_RATE_COUNT"])
    window = int(current_app.config["COMPARE_RATE_WINDOW"])
    since = datetime.now(UTC) - timedelta(seconds=window)
    if comparisons_q.created_since(s, user_id, since) < limit:
        return None
    return f"rate limit: at most {limit} new comparisons per {window // 60} minutes; try later"
