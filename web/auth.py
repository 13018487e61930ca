"""Signing in: sessions, API tokens and basic auth of requests, device cookies, the
decorators of views, and what each role may write (:data:`WORKER_WRITES` and
:func:`check_role`, the one place that decides it). The accounts themselves (users,
passwords, tokens) are stackbench.mail.accounts, which the CLI uses too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, abort, current_app, g, redirect, request, session, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.exceptions import Forbidden, Unauthorized

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


def _git_user(s: Session) -> AppUser | None:
    """The user of a git request's Basic credentials (None without any); wrong ones answer
    401 with git's challenge, a throttled name 429, both as text git prints."""
    from stackbench.web import ratelimit

    if request.authorization is None:
        return None
    try:
        user = basic_auth_user(s)
    except ratelimit.Throttled as exc:
        # text/plain: git prints the body of a refused request as "remote: ..."
        abort(Response(f"stackbench: {exc}\n", 429, {"Content-Type": "text/plain"}))
    if user is None:
        abort(git_challenge("stackbench: wrong user name or token"))
    return user


def git_challenge(msg: str) -> Response:
    return Response(
        msg + "\n",
        401,
        {"WWW-Authenticate": 'Basic realm="stackbench git intake"', "Content-Type": "text/plain"},
    )


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
        if request.blueprint == "git_http":
            # git authenticates each request with Basic credentials, never with the browser's
            # session: a page cannot make a browser push
            g.user = _git_user(dbsession.get())
            g.via_token = g.user is not None
            return
        uid = session.get("uid")
        if uid is not None:
            user = accounts_q.user(dbsession.get(), uid)
            if user is None or session.get("gen") != (user.session_gen or 0):
                session.clear()  # signed out elsewhere, password changed or user deleted
                return
            g.user = user

    app.before_request(check_role)


# What each role may write, in one table: every write route is for people (users, and
# admins where the route says so) except these, which are for workers' tokens alone. A
# request writes when its method is unsafe, when it is a git push (the ref advertisement
# too: a push starts there) or when its endpoint is one of GET_WRITES.
WORKER_WRITES = frozenset({"api.runs_upload"})
# GET /compare/new computes and stores a comparison (a link of the series page leads there)
GET_WRITES = frozenset({"compare.create"})
# signing in and out changes a session, not data: any account may
SESSION_ROUTES = frozenset({"auth.login", "auth.logout"})
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WORKER_ONLY = "a worker's token uploads runs (POST /api/runs) and nothing else"


def role(user: AppUser) -> str:
    """``worker``, ``admin`` or ``user``; an account flagged both ways is a worker (the
    lesser rights), which ``stackbench user add`` no longer makes."""
    if user.is_worker:
        return "worker"
    return "admin" if user.is_admin else "user"


def pushes() -> bool:
    """A git push: receive-pack itself or its ref advertisement."""
    return request.path.endswith("/git-receive-pack") or (
        request.path.endswith("/info/refs") and request.args.get("service") == "git-receive-pack"
    )


def writes() -> bool:
    if request.blueprint == "git_http":
        return pushes()  # a fetch POSTs too, and reads
    return request.method in UNSAFE or request.endpoint in GET_WRITES


def check_role() -> None:
    """Refuse a write the user's role may not do: 403 with the reason (JSON on the API and
    for tokens, the git intake's text, the error page otherwise)."""
    if request.routing_exception is not None or not writes():
        return
    user = g.get("user")
    if request.endpoint in WORKER_WRITES:
        if user is None or not g.get("via_token"):
            raise Unauthorized("result uploads need a worker's API token")
        if role(user) != "worker":
            whose = "an administrator's" if role(user) == "admin" else "a person's"
            raise Forbidden(f"only a worker's token may upload runs, not {whose}")
    elif user is not None and role(user) == "worker" and request.endpoint not in SESSION_ROUTES:
        raise Forbidden(WORKER_ONLY)


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
