"""Accounts: users, their API tokens and the wrong sign-ins the login throttle counts.

Hashing and checking passwords and tokens is the web component's business
(``stackbench.web.auth``); here are only the rows. Every function takes the caller's
session and leaves committing to it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import ApiToken, AppUser, LoginFailure


def user(s: Session, user_id: int) -> AppUser | None:
    return s.get(AppUser, user_id)


def user_named(s: Session, name: str) -> AppUser | None:
    return s.scalar(select(AppUser).where(AppUser.name == name))


def users(s: Session) -> list[AppUser]:
    """Every account, by name."""
    return list(s.scalars(select(AppUser).order_by(AppUser.name)))


def add_user(
    s: Session,
    name: str,
    *,
    email: str,
    email_verified: bool,
    password_hash: str,
    is_admin: bool,
    is_worker: bool,
) -> AppUser:
    row = AppUser(
        name=name,
        email=email,
        email_verified=email_verified,
        password_hash=password_hash,
        is_admin=is_admin,
        is_worker=is_worker,
    )
    s.add(row)
    s.flush()
    return row


def set_password_hash(row: AppUser, password_hash: str) -> None:
    row.password_hash = password_hash


def end_sessions(row: AppUser) -> None:
    """A new session generation: every signed cookie naming the old one stops working."""
    row.session_gen = (row.session_gen or 0) + 1


def add_token(s: Session, user_id: int, token_hash: str, name: str) -> ApiToken:
    row = ApiToken(user_id=user_id, token_hash=token_hash, name=name)
    s.add(row)
    s.flush()
    return row


def use_token(s: Session, token_hash: str, now: datetime) -> AppUser | None:
    """The user of the token with this hash, noting the token's use at ``now``."""
    row = s.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))
    if row is None:
        return None
    row.last_used = now
    return s.get(AppUser, row.user_id)


def token(s: Session, token_id: int) -> ApiToken | None:
    return s.get(ApiToken, token_id)


def tokens_of(s: Session, user_id: int) -> list[ApiToken]:
    """A user's tokens, oldest first."""
    return list(
        s.scalars(select(ApiToken).where(ApiToken.user_id == user_id).order_by(ApiToken.id))
    )


def delete_token(s: Session, row: ApiToken) -> None:
    s.delete(row)


def login_failures(
    s: Session, since: datetime, *, name: str | None = None, remote: str | None = None
) -> tuple[int, datetime | None]:
    """Wrong sign-ins after ``since`` for one user name, one client address or both: how many,
    and when the last one was."""
    q = select(func.count(), func.max(LoginFailure.created_at)).where(
        LoginFailure.created_at > since
    )
    if name is not None:
        q = q.where(LoginFailure.name == name)
    if remote is not None:
        q = q.where(LoginFailure.remote == remote)
    count, last = s.execute(q).one()
    return count or 0, last


def add_login_failure(s: Session, name: str, remote: str, *, forget_before: datetime) -> None:
    """One wrong sign-in; rows older than ``forget_before`` count for nothing any more and
    are dropped here, so the table stays small."""
    s.execute(delete(LoginFailure).where(LoginFailure.created_at < forget_before))
    s.add(LoginFailure(name=name, remote=remote))
