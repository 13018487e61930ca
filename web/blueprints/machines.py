"""Machines: workers, their kind and size, what they are running now, and what their nightly
A/A says about their noise."""

from __future__ import annotations

from flask import Blueprint, render_template

from stackbench.resultsdb import aa, machines_q, runs_q
from stackbench.web import dbsession

bp = Blueprint("machines", __name__)


@bp.route("/machines")
def index():
    s = dbsession.get()
    machines = machines_q.listing(s)
    return render_template(
        "machines.html",
        machines=machines,
        active=runs_q.active(s),
        aa=[(m, row) for m in machines for row in aa.summary(m.meta)],
    )
