"""stackbench.web: the Flask UI and JSON API.

Pages are server-rendered and work without JavaScript (like builds.sr.ht and patchwork);
scripts only add copy buttons and state polling. Everything reads the same results database as
the CLI, through :mod:`stackbench.resultsdb`.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from flask import Flask, Response, g, render_template, request
from werkzeug.exceptions import HTTPException

from stackbench import config as sb_config

DEFAULTS: dict[str, Any] = {
    # mboxes of big series stay well under this; the git intake has its own limit
    "MAX_CONTENT_LENGTH": 8 * 1024 * 1024,
    "GIT_MAX_CONTENT_LENGTH": 512 * 1024 * 1024,
    # per user: at most SUBMIT_RATE_COUNT submissions in SUBMIT_RATE_WINDOW seconds
    "SUBMIT_RATE_COUNT": 20,
    "SUBMIT_RATE_WINDOW": 3600,
    # per user: at most COMPARE_RATE_COUNT new comparisons (each computes tables and plots)
    "COMPARE_RATE_COUNT": 30,
    "COMPARE_RATE_WINDOW": 3600,
    # each kernel adds about a second to a comparison; a 31-patch series plus its base fits
    "COMPARE_MAX_KERNELS": 32,
    # wrong passwords or git tokens: past LOGIN_FAIL_COUNT per user name (three times that
    # per client address) in LOGIN_FAIL_WINDOW seconds, each next try waits 2 s, doubling,
    # at most LOGIN_MAX_DELAY (web/ratelimit.py)
    "LOGIN_FAIL_COUNT": 10,
    "LOGIN_FAIL_WINDOW": 900,
    "LOGIN_MAX_DELAY": 60,
    # proxies in front that append to X-Forwarded-For (the shipped nginx: 1); the throttle
    # counts per client address, which is the proxy's own without this
    "TRUSTED_PROXIES": sb_config.get_int("STACKBENCH_TRUSTED_PROXIES"),
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    # behind HTTPS (production): send the session cookie only over TLS
    "SESSION_COOKIE_SECURE": sb_config.get("STACKBENCH_COOKIE_SECURE") == "1",
    "PAGE_SIZE": 50,
    "BUILDBOT_URL": sb_config.get("STACKBENCH_BUILDBOT_URL"),
}


def _secret_key() -> str:
    """A per-installation key kept under $STACKBENCH_HOME so all gunicorn workers share it."""
    env = sb_config.get("STACKBENCH_SECRET_KEY")
    if env:
        return env
    path = sb_config.home() / "web-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return path.read_text().strip()


def create_app(config: dict | None = None) -> Flask:
    """The application. ``config`` overrides DEFAULTS; ``ENGINE`` may carry a SQLAlchemy
    engine (tests), else :func:`stackbench.resultsdb.db.engine` is used on first request."""
    app = Flask(__name__)
    app.config.update(DEFAULTS)
    if config:
        app.config.update(config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _secret_key()
    if app.config["TRUSTED_PROXIES"]:
        from werkzeug.middleware.proxy_fix import ProxyFix

        n = int(app.config["TRUSTED_PROXIES"])
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]

    from stackbench.web import auth, csrf, dbsession, inputs

    inputs.init_app(app)
    from stackbench.web.blueprints import (
        admin,
        api,
        compare,
        git_http,
        jobs,
        lists,
        machines,
        regressions,
        series,
        submit,
    )
    from stackbench.web.blueprints import auth as auth_bp

    dbsession.init_app(app)
    auth.init_app(app)
    csrf.init_app(app)
    for bp in (series, submit, compare, regressions, machines, jobs, lists, auth_bp, admin):
        app.register_blueprint(bp.bp)
    app.register_blueprint(api.bp, url_prefix="/api")
    app.register_blueprint(git_http.bp, url_prefix="/git")
    from stackbench.web.blueprints import health

    health.init_app(app)

    from stackbench.web import filters

    filters.init_app(app)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        if exc.response is not None:  # an answer of its own (git's challenge)
            return exc
        headers = [(k, v) for k, v in exc.get_headers() if k.lower() != "content-type"]
        if request.path.startswith("/git/"):
            # git prints the text/plain body of a refused request as "remote: ..."
            text = f"stackbench: {exc.description}\n"
            return Response(text, exc.code, headers, mimetype="text/plain")
        if request.path.startswith("/api/") or g.get("via_token"):
            # a token is a program's: it reads JSON, whichever route it called
            return {"error": exc.description, "status": exc.code}, exc.code, headers
        return render_template("error.html", error=exc), exc.code, headers

    from sqlalchemy import exc as sa_exc
    from werkzeug.exceptions import ServiceUnavailable

    @app.errorhandler(sa_exc.OperationalError)
    @app.errorhandler(sa_exc.InterfaceError)
    def database_gone(exc: Exception):
        # a database restart or network cut: say so (503, retry later) instead of a bare 500;
        # the pool pings connections, so the next request reconnects
        from stackbench.resultsdb import db

        app.logger.warning("database unavailable: %s", str(exc).splitlines()[0][:200])
        full = db.disk_full(exc)
        if full:  # not an outage that passes by itself: say what the operator must fix
            return http_error(
                ServiceUnavailable(
                    f"the database cannot store anything: {full}; try again once space is freed"
                )  # fmt: skip
            )
        return http_error(
            ServiceUnavailable("the database is unavailable right now; try again in a moment")
        )

    from werkzeug.exceptions import BadRequest

    @app.errorhandler(sa_exc.DataError)
    def database_refused(exc: sa_exc.DataError):
        # a value the request checks let through (a string longer than its column, say):
        # still the request's fault, so a 400 with PostgreSQL's one line, not a 500
        why = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
        app.logger.warning("database refused a value: %s", why)
        dbsession.get().rollback()  # the error page reads the user through the same session
        return http_error(BadRequest(f"a value in the request cannot be stored: {why}"))

    @app.errorhandler(RecursionError)
    def too_deep(exc: RecursionError):
        # a JSON body of 100,000 '[' or a mail nested 1,000 MIME parts deep
        return http_error(BadRequest("the request is nested too deeply to read"))

    @app.after_request
    def security_headers(resp):
        # no inline scripts or foreign resources: the CSP makes an escaping slip harmless
        resp.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'; form-action 'self'",
        )
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "same-origin")
        return resp

    @app.context_processor
    def globals_():
        return {"current_user": g.get("user"), "csrf_token": csrf.token}

    return app
