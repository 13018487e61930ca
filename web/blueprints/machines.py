"""Machines: workers, their kind and size, and what they are running now."""

from __future__ import annotations

from collections import defaultdict

from flask import Blueprint, render_template
from sqlalchemy import select

from stackbench.resultsdb.models import Job, KernelBuild, Machine, Run
from stackbench.web import dbsession

bp = Blueprint("machines", __name__)


@bp.route("/machines")
def index():
    s = dbsession.get()
    machines = list(s.scalars(select(Machine).order_by(Machine.name)))
    active = defaultdict(list)
    rows = s.execute(
        select(Run, Job, KernelBuild)
        .join(Job, Job.id == Run.job_id)
        .join(KernelBuild, KernelBuild.id == Run.build_id)
        .where(Run.status.in_(["queued", "running"]))
        .order_by(Run.id)
    ).all()
    for run, job, build in rows:
        active[run.machine_id].append({"run": run, "job": job, "build": build})
    return render_template("machines.html", machines=machines, active=active)
