"""CSRF protection: Flask-WTF's CSRFProtect, with stackbench's exemptions.

Requests authenticated by an API token are exempt (browsers never attach that header by
themselves), and so is git's smart HTTP protocol, which authenticates with Basic credentials.
So are API calls without a session (nothing ambient to abuse). Everything else - forms and
cookie-authenticated API calls - must echo the token in the form field ``csrf_token`` or the
``X-CSRF-Token`` header. CSRFProtect's own check of every request is turned off because these
exemptions depend on who is signed in, which only the request hook below knows.
"""

from __future__ import annotations

from flask import Flask, abort, g, request
from flask_wtf.csrf import CSRFError, CSRFProtect, generate_csrf

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
MESSAGE = "missing or invalid CSRF token: reload the form and submit it again"

_protect = CSRFProtect()


def token() -> str:
    """The session's CSRF token, for forms (``csrf_token()``) and the X-CSRF-Token header."""
    return generate_csrf()


def check() -> None:
    try:
        _protect.protect()
    except CSRFError:
        abort(400, MESSAGE)


def init_app(app: Flask) -> None:
    app.config.setdefault("WTF_CSRF_CHECK_DEFAULT", False)
    app.config.setdefault("WTF_CSRF_FIELD_NAME", FIELD)
    app.config.setdefault("WTF_CSRF_HEADERS", [HEADER, "X-CSRFToken"])
    # a token lives as long as the session, as the forms were written for
    app.config.setdefault("WTF_CSRF_TIME_LIMIT", None)
    _protect.init_app(app)

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
