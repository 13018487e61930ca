"""Job definitions: what each benchmark runs, its parameters and suite version."""

from __future__ import annotations

from flask import Blueprint, abort, render_template

from stackbench.resultsdb import jobs_q, runs_q
from stackbench.web import dbsession

bp = Blueprint("jobs", __name__)


def shipped_definitions() -> list[dict]:
    """The YAML job definitions installed with stackbench.jobs: what each benchmark runs, its
    parameters (list values expand into sub-jobs) and the suite version it would record."""
    try:
        from stackbench.jobs.benchmarks import definitions
    except ImportError:
        return []
    out = []
    for d in definitions.load_all():
        try:
            version = definitions.suite_version(d.suite)
        except Exception:  # a suite whose sources are not installed still gets listed
            version = ""
        out.append(
            {
                "name": d.name,
                "suite": d.suite,
                "description": d.description,
                "runs": d.runs,
                "runner": d.runner,
                "timeout_s": d.timeout_s,
                "params": d.params,
                "suite_version": version,
                "file": d.path.name if d.path else "",
                "seed": d.seed,
            }
        )
    return out


@bp.route("/jobs/seeds")
def seeds():
    """The definitions that reproduce the seeds' experiments, grouped by seed."""
    from stackbench.jobs.benchmarks import definitions

    defs = [d for d in shipped_definitions() if d["seed"]]
    rows = []
    for seed, (title, compare) in sorted(definitions.SEEDS.items()):
        rows.append(
            {
                "seed": seed,
                "title": title,
                "compare": compare,
                "defs": [d for d in defs if d["seed"] == seed],
            }
        )
    return render_template("job_seeds.html", seeds=rows)


@bp.route("/jobs")
def index():
    s = dbsession.get()
    return render_template(
        "jobs.html",
        jobs=jobs_q.listing(s),
        counts=runs_q.count_by_job(s),
        defs=shipped_definitions(),
    )


@bp.route("/jobs/<int:job_id>")
def show(job_id: int):
    s = dbsession.get()
    job = jobs_q.get(s, job_id)
    if job is None:
        abort(404, f"no job {job_id}")
    n = runs_q.count_of_job(s, job_id)
    return render_template("job.html", job=job, runs=n)
