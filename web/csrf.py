"""CSRF protection: a per-session secret, checked on every state-changing request.

Requests authenticated by an API token are exempt (browsers never attach that header by
themselves), and so is git's smart HTTP protocol, which authenticates with Basic credentials.
So are API calls without a session (nothing ambient to abuse). Everything else - forms and
cookie-authenticated API calls - must echo the token in the form
field ``csrf_token`` or the ``X-CSRF-Token`` header.
"""

from __future__ import annotations

import hmac
import secrets

from flask import Flask, abort, g, request, session

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
FIELD = "csrf_token"
HEADER = "X-CSRF-Token"


def token() -> str:
    tok = session.get("csrf")
    if not tok:
        tok = session["csrf"] = secrets.token_urlsafe(32)
    return tok


def check() -> None:
    expected = session.get("csrf")
    sent = request.form.get(FIELD) or request.headers.get(HEADER) or ""
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        abort(400, "missing or invalid CSRF token: reload the form and submit it again")


def init_app(app: Flask) -> None:
    @app.before_request
    def _csrf() -> None:
        if request.method not in UNSAFE or app.config.get("CSRF_DISABLED"):
            return
        if g.get("via_token") or request.blueprint == "git_http":
            return
        # the API without a signed-in session carries no ambient credentials to abuse; its
        # write routes then answer 401 themselves
        if request.blueprint == "api" and g.get("user") is None:
            return
        check()
