"""Sign in and out, and the account page where users manage their API tokens."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from flask import Blueprint, abort, flash, g, redirect, render_template, request, session, url_for

from stackbench.mail import accounts
from stackbench.resultsdb import accounts_q
from stackbench.web import auth, dbsession, ratelimit
from stackbench.web.auth import login_required

bp = Blueprint("auth", __name__)


_SAFE_NEXT = re.compile(r"/(?![/\\])[!-~]*")


def _safe_next(target: str | None) -> str:
    """Only a local path. Browsers drop tabs and newlines from a Location (``/\t/evil`` is
    ``//evil``) and take ``\\`` for ``/``, so the target is printable ASCII without spaces,
    backslashes, or a second leading slash; anything else goes to the start page."""
    if target and _SAFE_NEXT.fullmatch(target) and "\\" not in target:
        parts = urlsplit(target)
        if not parts.scheme and not parts.netloc:
            return target
    return url_for("series.index")


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    status = 200
    if request.method == "POST":
        s = dbsession.get()
        name = request.form.get("name", "")
        remote = request.remote_addr or ""
        wait = ratelimit.login_wait(s, name, remote, known_device=auth.known_device(name))
        if wait:
            error, status = wait, 429
        else:
            user = accounts.check_password(s, name, request.form.get("password", ""))
            if user is None:
                ratelimit.record_login_failure(s, name, remote)
                error, status = "wrong user name or password", 401
            else:
                auth.start_session(user)
                resp = redirect(_safe_next(request.form.get("next")), code=303)
                return auth.remember_device(resp, user.name)
    return (
        render_template("login.html", error=error, next=_safe_next(request.values.get("next"))),
        status,
    )


@bp.route("/logout", methods=["POST"])
def logout():
    if g.get("user") is not None and not g.get("via_token"):
        # ends this session and the user's others: a stolen cookie stops working too
        accounts.end_sessions(g.user)
        dbsession.get().commit()
    session.clear()
    return redirect(url_for("series.index"), code=303)


@bp.route("/account")
@login_required
def account():
    tokens = accounts_q.tokens_of(dbsession.get(), g.user.id)
    return render_template("account.html", tokens=tokens, new_token=None)


@bp.route("/account/tokens", methods=["POST"])
@login_required
def create_token():
    s = dbsession.get()
    label = request.form.get("label", "").strip()[:100] or "web"
    token = accounts.create_token(s, g.user, label)
    s.commit()
    tokens = accounts_q.tokens_of(s, g.user.id)
    # shown once; only its hash is stored
    return render_template("account.html", tokens=tokens, new_token=token)


@bp.route("/account/tokens/<int:token_id>/revoke", methods=["POST"])
@login_required
def revoke_token(token_id: int):
    s = dbsession.get()
    tok = accounts_q.token(s, token_id)
    if tok is None or tok.user_id != g.user.id:
        abort(404, "no such token")
    accounts_q.delete_token(s, tok)
    s.commit()
    flash("token revoked")
    return redirect(url_for("auth.account"), code=303)
