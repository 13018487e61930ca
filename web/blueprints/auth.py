"""Sign in and out, and the account page where users manage their API tokens."""

from __future__ import annotations

from flask import Blueprint, abort, flash, g, redirect, render_template, request, session, url_for
from sqlalchemy import select

from stackbench.resultsdb.models import ApiToken
from stackbench.web import auth, dbsession
from stackbench.web.auth import login_required

bp = Blueprint("auth", __name__)


def _safe_next(target: str | None) -> str:
    # only local paths: no open redirect to another site
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("series.index")


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        user = auth.check_password(
            dbsession.get(), request.form.get("name", ""), request.form.get("password", "")
        )
        if user is None:
            error = "wrong user name or password"
        else:
            session.clear()
            session["uid"] = user.id
            return redirect(_safe_next(request.form.get("next")), code=303)
    return (
        render_template("login.html", error=error, next=request.values.get("next", "")),
        401 if error else 200,
    )


@bp.route("/logout", methods=["POST"])
def logout():
    session.clear()
    return redirect(url_for("series.index"), code=303)


@bp.route("/account")
@login_required
def account():
    tokens = list(
        dbsession.get().scalars(
            select(ApiToken).where(ApiToken.user_id == g.user.id).order_by(ApiToken.id)
        )
    )
    return render_template("account.html", tokens=tokens, new_token=None)


@bp.route("/account/tokens", methods=["POST"])
@login_required
def create_token():
    s = dbsession.get()
    label = request.form.get("label", "").strip()[:100] or "web"
    token = auth.create_token(s, g.user, label)
    s.commit()
    tokens = list(
        s.scalars(select(ApiToken).where(ApiToken.user_id == g.user.id).order_by(ApiToken.id))
    )
    # shown once; only its hash is stored
    return render_template("account.html", tokens=tokens, new_token=token)


@bp.route("/account/tokens/<int:token_id>/revoke", methods=["POST"])
@login_required
def revoke_token(token_id: int):
    s = dbsession.get()
    tok = s.get(ApiToken, token_id)
    if tok is None or tok.user_id != g.user.id:
        abort(404, "no such token")
    s.delete(tok)
    s.commit()
    flash("token revoked")
    return redirect(url_for("auth.account"), code=303)
