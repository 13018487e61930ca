"""Machines: workers, their kind and size, and what they are running now."""

from __future__ import annotations

from flask import Blueprint, render_template

from stackbench.resultsdb import machines_q, runs_q
from stackbench.web import dbsession

bp = Blueprint("machines", __name__)


@bp.route("/machines")
def index():
    s = dbsession.get()
    return render_template("machines.html", machines=machines_q.listing(s), active=runs_q.active(s))
