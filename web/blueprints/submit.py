"""The submit form: upload or paste an mbox, pick tree, base, jobs and runs."""

from __future__ import annotations

from flask import Blueprint, flash, g, redirect, render_template, request, url_for

from stackbench.jobs.driver import intake
from stackbench.jobs.executors.settings import DEFAULT_RUNS
from stackbench.web import dbsession, submission
from stackbench.web.auth import login_required

bp = Blueprint("submit", __name__)


def _render(errors: dict[str, str], values: dict, status: int = 200):
    s = dbsession.get()
    trees = intake.tree_choices(s)
    return (
        render_template(
            "submit.html",
            trees=trees,
            jobs=submission.job_choices(s),
            errors=errors,
            v=values,
            max_runs=submission.MAX_RUNS,
        ),
        status,
    )


@bp.route("/submit", methods=["GET"])
def form():
    return _render({}, {"runs": DEFAULT_RUNS, "jobs": []})


@bp.route("/submit", methods=["POST"])
@login_required
def post():
    f = request.form
    values = {
        "tree": f.get("tree", ""),
        "base": f.get("base", ""),
        "jobs": f.getlist("jobs"),
        "runs": f.get("runs", ""),
        "mbox_text": f.get("mbox_text", ""),
        "check_claims": f.get("check_claims") == "1",
    }
    upload = request.files.get("mbox")
    data = upload.read() if upload and upload.filename else b""
    filename = upload.filename if upload and upload.filename else "pasted mbox"
    if not data:
        data = values["mbox_text"].replace("\r\n", "\n").encode()
    s = dbsession.get()
    req = submission.Request(
        mbox=data,
        tree=values["tree"],
        base=values["base"],
        options=submission.options_from(f, values["jobs"]),
        source="web",
        filename=filename,
    )
    try:
        series, note = submission.submit(s, g.user, req)
    except submission.FieldErrors as exc:
        s.rollback()
        status = 429 if "submit" in exc.errors else 400
        return _render(exc.errors, values, status)
    s.commit()
    if note:
        flash(note)
    return redirect(url_for("series.show", series_id=series.id), code=303)
