"""Rate limits counted in the database, so every gunicorn worker (and the API, the form and
git push alike) sees the same budget: submissions per user (the series table), comparisons
per user (the comparison table) and wrong passwords per name and per client address."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy.orm import Session

from stackbench.errors import StackbenchError
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


class Throttled(StackbenchError):
    """A sign-in that must wait a few seconds before it is checked (HTTP 429)."""


def login_wait(s: Session, name: str, remote: str, *, known_device: bool = False) -> str | None:
    """None when a sign-in for ``name`` from ``remote`` may be checked now, else what to tell
    the user. Throttling delays and never locks: past LOGIN_FAIL_COUNT wrong sign-ins in the
    window the next check waits 2 s after the last failure, doubling per failure up to
    LOGIN_MAX_DELAY. Counted per user name from this address, per address (three times the
    count: guessing across names) and, unless this browser has signed in as ``name`` before
    (``known_device``), per user name from anywhere, so that guessing from many addresses
    slows down too while the owner's own browser is never held up by someone else's
    guesses. Attempts refused here are not counted: waiting ends."""
    limit = int(current_app.config["LOGIN_FAIL_COUNT"])
    window = int(current_app.config["LOGIN_FAIL_WINDOW"])
    max_delay = int(current_app.config["LOGIN_MAX_DELAY"])
    now = datetime.now(UTC)
    since = now - timedelta(seconds=window)
    name = name[:200]
    keys = [
        (f"for '{name}' from your address", {"name": name, "remote": remote}, limit),
        ("from your address", {"remote": remote}, 3 * limit),
    ]
    if not known_device:
        keys.append((f"for '{name}'", {"name": name}, limit))
    wait, told = 0.0, ""
    for words, where, allowed in keys:
        count, last = accounts_q.login_failures(s, since, **where)
        if count < allowed or last is None:
            continue
        delay = min(max_delay, 2 ** min(count - allowed + 1, 20))
        left = (last + timedelta(seconds=delay) - now).total_seconds()
        if left > wait:
            wait, told = left, f"{count} {words} in the last {window // 60} minutes"
    if wait <= 0:
        return None
    return (
        f"too many failed sign-ins ({told}): wait {math.ceil(wait)} seconds before the next "
        "try; a valid API token is never held up"
    )


def record_login_failure(s: Session, name: str, remote: str) -> None:
    window = int(current_app.config["LOGIN_FAIL_WINDOW"])
    forget_before = datetime.now(UTC) - timedelta(seconds=2 * window)
    accounts_q.add_login_failure(s, name[:200], remote, forget_before=forget_before)
    # committed at once: the failed request itself writes nothing else
    s.commit()


def check_comparison(s: Session, user_id: int) -> str | None:
    """None when the user may start another comparison, else the message to show. Counted
    per user from the comparisons they created in the window."""
    limit = int(current_app.config["COMPARE_RATE_COUNT"])
    window = int(current_app.config["COMPARE_RATE_WINDOW"])
    since = datetime.now(UTC) - timedelta(seconds=window)
    if comparisons_q.created_since(s, user_id, since) < limit:
        return None
    return f"rate limit: at most {limit} new comparisons per {window // 60} minutes; try later"
