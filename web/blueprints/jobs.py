"""Job definitions: what each benchmark runs, its parameters and suite version."""

from __future__ import annotations

from flask import Blueprint, abort, render_template
from sqlalchemy import func, select

from stackbench.resultsdb.models import Job, Run
from stackbench.web import dbsession

bp = Blueprint("jobs", __name__)


def shipped_definitions() -> list[dict]:
    """The YAML job definitions installed with stackbench.jobs, if that component has them."""
    try:
        from stackbench.jobs import definitions  # type: ignore[attr-defined]

        return [
            d if isinstance(d, dict) else getattr(d, "__dict__", {"name": str(d)})
            for d in definitions.load_all()
        ]
    except (ImportError, AttributeError):
        pass
    from importlib import resources

    import yaml

    out = []
    try:
        root = resources.files("stackbench.jobs") / "defs"
        for f in sorted(root.iterdir(), key=lambda p: p.name):
            if f.name.endswith((".yaml", ".yml")):
                doc = yaml.safe_load(f.read_text()) or {}
                if isinstance(doc, dict):
                    out.append({"name": f.name.rsplit(".", 1)[0], "file": f.name, **doc})
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    return out


@bp.route("/jobs")
def index():
    s = dbsession.get()
    counts = dict(s.execute(select(Run.job_id, func.count()).group_by(Run.job_id)).all())
    jobs = list(s.scalars(select(Job).order_by(Job.suite, Job.test, Job.params_key)))
    return render_template("jobs.html", jobs=jobs, counts=counts, defs=shipped_definitions())


@bp.route("/jobs/<int:job_id>")
def show(job_id: int):
    s = dbsession.get()
    job = s.get(Job, job_id)
    if job is None:
        abort(404, f"no job {job_id}")
    n = s.scalar(select(func.count()).select_from(Run).where(Run.job_id == job_id))
    return render_template("job.html", job=job, runs=n)
