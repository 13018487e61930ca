"""Users, passwords and API tokens.

Passwords are hashed with werkzeug's scrypt; API tokens are random 256-bit strings of which
only a SHA-256 is stored (a fast hash is right for high-entropy secrets, and lets a request
find its token with one indexed lookup).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from flask import Flask, abort, g, redirect, request, session, url_for
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


def start_session(user: AppUser) -> None:
    session.clear()
    session["uid"] = user.id
    session["gen"] = user.session_gen or 0


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


def token_from_request() -> str | None:
    """``Authorization: Bearer <token>`` (or ``Token <token>``). Basic credentials are only
    for git over HTTP, which checks them itself (:func:`basic_auth_user`)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    return None


def basic_auth_user(s: Session) -> AppUser | None:
    """The user of HTTP Basic credentials: NAME and one of NAME's API tokens. The account
    password is not accepted here (git stores credentials in helpers and URLs; a token can
    be revoked alone). Wrong tokens count toward the login throttle like wrong passwords."""
    from stackbench.web import ratelimit

    auth = request.authorization
    if auth is None or auth.type != "basic" or not auth.username or not auth.password:
        return None
    if ratelimit.login_blocked(s, auth.username, request.remote_addr or ""):
        return None
    user = user_for_token(s, auth.password)
    if user is not None and user.name == auth.username:
        return user
    ratelimit.record_login_failure(s, auth.username, request.remote_addr or "")
    return None


def init_app(app: Flask) -> None:
    @app.before_request
    def load_user() -> None:
        from stackbench.web import dbsession

        g.user = None
        g.via_token = False
        token = token_from_request()
        if token:
            user = user_for_token(dbsession.get(), token)
            if user is None:
                abort(401, "invalid API token")
            g.user = user
            g.via_token = True
            return
        uid = session.get("uid")
        if uid is not None:
            user = accounts_q.user(dbsession.get(), uid)
            if user is None or session.get("gen") != (user.session_gen or 0):
                session.clear()  # signed out elsewhere, password changed or user deleted
                return
            g.user = user


def login_required(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapped(*a: Any, **kw: Any) -> Any:
        if g.get("user") is None:
            if request.path.startswith("/api/"):
                abort(401, "authentication required: send 'Authorization: Bearer <token>'")
            return redirect(url_for("auth.login", next=request.full_path))
        return view(*a, **kw)

    return wrapped


def admin_required(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapped(*a: Any, **kw: Any) -> Any:
        user = g.get("user")
        if user is None:
            if request.path.startswith("/api/"):
                abort(401, "authentication required")
            return redirect(url_for("auth.login", next=request.full_path))
        if not user.is_admin:
            abort(403, "administrators only")
        return view(*a, **kw)

    return wrapped


def worker_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Result uploads: workers' tokens (admins may upload too, e.g. imports)."""

    @functools.wraps(view)
    def wrapped(*a: Any, **kw: Any) -> Any:
        user = g.get("user")
        if user is None or not g.get("via_token"):
            abort(401, "result uploads need a worker's API token")
        if not (user.is_worker or user.is_admin):
            abort(403, "only worker or admin tokens may upload results")
        return view(*a, **kw)

    return wrapped
