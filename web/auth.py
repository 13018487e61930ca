"""Signing in: sessions, API tokens and basic auth of requests, device cookies, and the
decorators of views. The accounts themselves (users, passwords, tokens) are
stackbench.mail.accounts, which the CLI uses too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, abort, current_app, g, redirect, request, session, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer

from stackbench.mail.accounts import user_for_token
from stackbench.resultsdb import accounts_q

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from stackbench.resultsdb.models import AppUser


def start_session(user: AppUser) -> None:
    session.clear()
    session["uid"] = user.id
    session["gen"] = user.session_gen or 0


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
    be revoked alone). A valid token is never throttled (it cannot be guessed); wrong ones
    count toward the sign-in throttle like wrong passwords, and while it holds a name back
    they raise :class:`ratelimit.Throttled` saying how long to wait."""
    from stackbench.web import ratelimit

    auth = request.authorization
    if auth is None or auth.type != "basic" or not auth.username or not auth.password:
        return None
    user = user_for_token(s, auth.password)
    if user is not None and user.name == auth.username:
        return user
    remote = request.remote_addr or ""
    wait = ratelimit.login_wait(s, auth.username, remote)
    if wait:
        raise ratelimit.Throttled(wait)
    ratelimit.record_login_failure(s, auth.username, remote)
    return None


DEVICE_COOKIE = "sb_device"
DEVICE_MAX_AGE = 180 * 86400


def _device_serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.secret_key, salt="stackbench sign-in device")


def known_device(name: str) -> bool:
    """Whether this browser signed in as ``name`` before (a signed cookie, kept across
    sign-outs): such a sign-in is not held up by other people's wrong guesses for the name."""
    raw = request.cookies.get(DEVICE_COOKIE)
    if not raw:
        return False
    try:
        names = _device_serializer().loads(raw, max_age=DEVICE_MAX_AGE)
    except BadSignature:
        return False
    return isinstance(names, list) and name in names


def remember_device(resp: Response, name: str) -> Response:
    raw = request.cookies.get(DEVICE_COOKIE)
    names: list[str] = []
    if raw:
        try:
            names = list(_device_serializer().loads(raw, max_age=DEVICE_MAX_AGE))
        except (BadSignature, TypeError):
            names = []
    names = [name] + [n for n in names if n != name][:4]
    resp.set_cookie(
        DEVICE_COOKIE,
        _device_serializer().dumps(names),
        max_age=DEVICE_MAX_AGE,
        httponly=True,
        samesite="Lax",
        secure=bool(current_app.config.get("SESSION_COOKIE_SECURE")),
    )
    return resp


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
