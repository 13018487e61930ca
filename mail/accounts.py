"""Accounts: the people (and workers) who submit series and receive their report mails,
their passwords and API tokens; the web UI, the API and the CLI create and check them here,
outside Flask.

Passwords are hashed with werkzeug's scrypt; API tokens are random 256-bit strings of which
only a SHA-256 is stored (a fast hash is right for high-entropy secrets, and lets a request
find its token with one indexed lookup). An account's address is checked as a report mail's
recipient is (patches.mailheaders).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from werkzeug.security import check_password_hash, generate_password_hash

from stackbench.errors import InputError, NotFoundError
from stackbench.patches.mailheaders import is_mail_address
from stackbench.resultsdb import accounts_q

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from stackbench.resultsdb.models import AppUser

TOKEN_PREFIX = "sbt_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def clean_username(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name):
        raise InputError("user", f"invalid user name {name!r} (letters, digits, . _ - only)")
    return name


def create_user(
    s: Session,
    name: str,
    *,
    password: str | None = None,
    email: str = "",
    admin: bool = False,
    worker: bool = False,
) -> AppUser:
    name = clean_username(name)
    if admin and worker:
        # a worker's token uploads runs and nothing else: an administrator's could not
        raise InputError("user", "an account is an administrator or a worker, not both")
    email = email.strip()
    if email and not is_mail_address(email):
        raise InputError("user", f"invalid mail address {email[:120]!r} (one plain local@domain)")
    if accounts_q.user_named(s, name) is not None:
        raise InputError("user", f"user '{name}' already exists")
    return accounts_q.add_user(
        s,
        name,
        email=email,
        # an address an administrator typed for the account is the account's own
        email_verified=bool(email),
        password_hash=generate_password_hash(password) if password else "",
        is_admin=admin,
        is_worker=worker,
    )


def set_password(user: AppUser, password: str) -> None:
    """A new password; every signed-in session of the user ends."""
    accounts_q.set_password_hash(user, generate_password_hash(password))
    end_sessions(user)


def end_sessions(user: AppUser) -> None:
    """Sessions are signed cookies holding (uid, generation): a new generation voids them."""
    accounts_q.end_sessions(user)


def find_user(s: Session, name: str) -> AppUser:
    user = accounts_q.user_named(s, name)
    if user is None:
        raise NotFoundError(f"unknown user '{name}'")
    return user


def check_password(s: Session, name: str, password: str) -> AppUser | None:
    user = accounts_q.user_named(s, name)
    if user is None or not user.password_hash:
        # same cost whether or not the user exists
        check_password_hash(_DUMMY_HASH, password)
        return None
    return user if check_password_hash(user.password_hash, password) else None


_DUMMY_HASH = generate_password_hash("not-a-password")


def create_token(s: Session, user: AppUser, label: str = "") -> str:
    """A new token for ``user``; the clear text is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    accounts_q.add_token(s, user.id, hash_token(token), label)
    return token


def user_for_token(s: Session, token: str) -> AppUser | None:
    return accounts_q.use_token(s, hash_token(token), datetime.now(UTC))
