"""The JSON API under /api/: series, patches, kernels, runs, samples, comparisons,
regressions, machines and jobs to read; submissions and result uploads with a token.

Errors are JSON objects ``{"error": "...", "status": N}``; the OpenAPI document at
/api/openapi.json describes every route.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, abort, current_app, g, request, url_for

from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.resultsdb import (
    ingest,
    jobs_q,
    kernels_q,
    machines_q,
    regressions_q,
    runs_q,
    series_q,
    series_runs_store,
    wire,
)
from stackbench.web import comparisons, dbsession, progress, submission
from stackbench.web.auth import login_required
from stackbench.web.blueprints.compare import comparison_claims
from stackbench.web.blueprints.series import filtered_series, load_series, verdicts_of

if TYPE_CHECKING:
    from stackbench.resultsdb.models import KernelBuild, Patch, Regression, Run, Series

bp = Blueprint("api", __name__)
MAX_LIMIT = 500


def _claims(x: Series) -> dict[str, Any] | None:
    """The series' claims, each with what was measured and its status (None: it kept none)."""
    from stackbench.resultsdb import claims_check

    report = claims_check.check(dbsession.engine(), x)
    return report.as_json() if report is not None else None


def _iso(ts) -> str | None:
    return ts.isoformat() if ts is not None else None


def _limit() -> tuple[int, int]:
    limit = min(max(request.args.get("limit", 100, type=int) or 100, 1), MAX_LIMIT)
    offset = max(request.args.get("offset", 0, type=int) or 0, 0)
    return limit, offset


def series_json(
    x: Series,
    commits: list[progress.Commit] | None = None,
    step: str | None = None,
    *,
    claims: bool = True,
) -> dict[str, Any]:
    """The series as the API shows it; ``step``: its k/N when the caller looked it up;
    ``claims``: with its claims section (one series' page: a list leaves it to each)."""
    if step is None:
        step = series_runs_store.progress(dbsession.get(), [x.id]).get(x.id)
    plan = series_runs_store.current(dbsession.get(), x.id)
    d: dict[str, Any] = {
        "id": x.id,
        "url": url_for("series.show", series_id=x.id, _external=True),
        "title": x.title,
        "version": x.version,
        "tree": x.tree.name if x.tree else None,
        "submitter": x.submitter,
        "submitter_email": x.submitter_email,
        "base_ref": x.base_ref,
        "base_commit": x.base_commit,
        "state": x.state,
        "error": x.error,
        "source": x.source,
        "message_id": x.message_id,
        "jobs": list(plan.jobs or []) if plan is not None else [],
        "runs": plan.runs if plan is not None else None,
        "progress": step or None,
        "report_mail": plan.report_mail if plan is not None else None,
        # what the series waits on that is not its doing (a full disk, an unreachable master)
        "waiting_on": (plan.host_fault or {}).get("error")
        if plan is not None and x.state in progress.PENDING_SERIES
        else None,
        "claims": _claims(x) if claims else None,
        "created_at": _iso(x.created_at),
        "patches": [
            {
                "id": p.id,
                "idx": p.idx,
                "total": p.total,
                "subject": p.subject,
                "commit": p.commit_sha,
                "state": p.state,
            }
            for p in x.patches
        ],
    }
    if commits is not None:
        d["commits"] = [
            {
                "label": c.label,
                "sha": c.sha,
                "state": c.state,
                "kernel": c.build.id if c.build else None,
                "jobs": {
                    str(j): {"state": cell.state, "runs": [r.id for r in cell.runs]}
                    for j, cell in c.cells.items()
                },
            }
            for c in commits
        ]
    return d


@bp.route("/")
def index():
    return {
        "openapi": url_for("api.openapi", _external=True),
        "series": url_for("api.series_list", _external=True),
        "kernels": url_for("api.kernels", _external=True),
        "runs": url_for("api.runs", _external=True),
        "comparisons": url_for("api.comparison_create", _external=True),
        "regressions": url_for("api.regressions", _external=True),
        "machines": url_for("api.machines", _external=True),
        "jobs": url_for("api.jobs", _external=True),
    }


@bp.route("/openapi.json")
def openapi():
    from stackbench.web.openapi import document

    return document(request.host_url.rstrip("/"))


@bp.route("/series", methods=["GET"])
def series_list():
    limit, offset = _limit()
    page = offset // limit + 1
    f = {k: request.args.get(k, "").strip() for k in ("tree", "submitter", "state")}
    rows, more = filtered_series(**f, page=page, size=limit)
    commits = progress.commits_of(dbsession.get(), rows)
    steps = series_runs_store.progress(dbsession.get(), [x.id for x in rows])
    return {
        "series": [series_json(x, commits[x.id], steps.get(x.id, ""), claims=False) for x in rows],
        "more": more,
    }


@bp.route("/series", methods=["POST"])
@login_required
def series_create():
    if request.is_json:
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            abort(400, "body must be a JSON object")
        mbox = body.get("mbox", "")
        if not isinstance(mbox, str):
            abort(400, "mbox must be a string (the mbox text)")
        data = mbox.encode()
        if "mbox_base64" in body:
            # the mbox as bytes, for mails that are not UTF-8 (a JSON string cannot carry them)
            try:
                data = base64.b64decode(str(body["mbox_base64"]), validate=True)
            except ValueError:
                abort(400, "mbox_base64 is not valid base64")
        jobs = body.get("jobs") or []
        fields = body
    else:
        fields = request.form
        up = request.files.get("mbox")
        data = up.read() if up else fields.get("mbox", "").encode()
        jobs = fields.getlist("jobs") if hasattr(fields, "getlist") else []
    if not isinstance(jobs, list) or not all(isinstance(j, str) for j in jobs):
        abort(400, "jobs must be a list of job names")
    s = dbsession.get()
    req = submission.Request(
        mbox=data,
        tree=str(fields.get("tree") or ""),
        base=str(fields.get("base") or ""),
        options=submission.options_from(fields, jobs),
        source="api",
        filename="api upload",
    )
    try:
        x, note = submission.submit(s, g.user, req)
    except submission.FieldErrors as exc:
        s.rollback()
        status = 429 if "submit" in exc.errors else 400
        return {"error": str(exc), "fields": exc.errors, "status": status}, status
    s.commit()
    x = load_series(x.id)
    where = {"Location": url_for("api.series_get", series_id=x.id)}
    if note:  # the same series again: nothing was created
        return {**series_json(x), "note": note}, 200, where
    return series_json(x), 201, where


@bp.route("/series/<int:series_id>")
def series_get(series_id: int):
    x = load_series(series_id)
    commits = progress.commits_of(dbsession.get(), [x])[x.id]
    doc = series_json(x, commits)
    # per commit the functions its patch changes and their calls (the coverage rows of the
    # series' comparison, labelled as the series labels its commits); None before it ended
    doc["coverage"] = verdicts_of(x, commits)[2] if (x.meta or {}).get("comparison") else None
    return doc


def patch_json(p: Patch, full: bool = False) -> dict[str, Any]:
    shown = p.shown()  # the commit's author, subject and date; "mail": the mail's, if other
    d = {
        "id": p.id,
        "series": p.series_id,
        "idx": p.idx,
        "total": p.total,
        "subject": shown["subject"],
        "author": shown["author"],
        "author_email": shown["author_email"],
        "date": shown["date"],
        "mail": shown["mail"],
        "message_id": p.message_id,
        "commit": p.commit_sha,
        "state": p.state,
        "error": p.error,
        # the functions the patch changes (docs/coverage.md); None before an evidence boot
        "changed_functions": (p.meta or {}).get("changed_functions"),
    }
    if full:
        d.update(body=p.body, diff=p.diff)
    return d


@bp.route("/series/<int:series_id>/patches")
def series_patches(series_id: int):
    x = load_series(series_id)
    return {"patches": [patch_json(p) for p in x.patches]}


@bp.route("/patches/<int:patch_id>")
def patch_get(patch_id: int):
    p = series_q.patch(dbsession.get(), patch_id)
    if p is None:
        abort(404, f"no patch {patch_id}")
    return patch_json(p, full=True)


def kernel_json(b: KernelBuild) -> dict[str, Any]:
    return {
        "id": b.id,
        "commit": b.commit,
        "name": b.name,
        "config_name": b.config_name,
        "config_hash": b.config_hash,
        "compiler": b.compiler,
        "status": b.status,
        "series": b.series_id,
        "patch": b.patch_id,
        "duration_s": b.duration_s,
        "log": url_for("series.build_log", build_id=b.id, _external=True),
        "created_at": _iso(b.created_at),
    }


@bp.route("/kernels")
def kernels():
    limit, offset = _limit()
    rows = kernels_q.listing(
        dbsession.get(),
        series_id=request.args.get("series", type=int),
        commit_prefix=request.args.get("commit") or "",
        offset=offset,
        limit=limit,
    )
    return {"kernels": [kernel_json(b) for b in rows]}


@bp.route("/kernels/<int:build_id>")
def kernel_get(build_id: int):
    b = kernels_q.get(dbsession.get(), build_id)
    if b is None:
        abort(404, f"no kernel {build_id}")
    return kernel_json(b)


def run_json(r: Run, logs: list[str] | None = None) -> dict[str, Any]:
    d = {
        "id": r.id,
        "job": r.job_id,
        "kernel": r.build_id,
        "machine": r.machine_id,
        "iteration": r.iteration,
        "status": r.status,
        "source": r.source,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "duration_s": r.duration_s,
        "error": r.error,
        "idempotency_key": r.idempotency_key,
        "samples": url_for("api.run_samples", run_id=r.id, _external=True),
    }
    if logs is not None:
        d["logs"] = {
            n: url_for("series.run_log", run_id=r.id, name=n, _external=True) for n in logs
        }
        d["sysstate"] = r.sysstate
    return d


@bp.route("/runs", methods=["GET"])
def runs():
    limit, offset = _limit()
    rows = runs_q.listing(
        dbsession.get(),
        build_id=request.args.get("kernel", type=int),
        job_id=request.args.get("job", type=int),
        machine_id=request.args.get("machine", type=int),
        status=request.args.get("status") or "",
        offset=offset,
        limit=limit,
    )
    return {"runs": [run_json(r) for r in rows]}


@bp.route("/runs/<int:run_id>")
def run_get(run_id: int):
    s = dbsession.get()
    r = runs_q.get(s, run_id)
    if r is None:
        abort(404, f"no run {run_id}")
    return run_json(r, runs_q.log_names(s, run_id, ordered=False))


@bp.route("/runs/<int:run_id>/samples")
def run_samples(run_id: int):
    s = dbsession.get()
    if runs_q.get(s, run_id) is None:
        abort(404, f"no run {run_id}")
    return {"run": run_id, "samples": runs_q.samples_by_metric(s, run_id)}


@bp.route("/runs", methods=["POST"])
def runs_upload():
    """Workers' tokens alone (stackbench.web.auth.WORKER_WRITES). One run (a RunData object) or {"runs": [...]}; each stored in its own transaction,
    all validated first (ingest.ingest). A known idempotency key answers 200 with the existing run id."""
    body = request.get_json(silent=True)
    if body is None:
        abort(400, "body must be JSON (Content-Type: application/json)")
    many = isinstance(body, dict) and "runs" in body
    items = body["runs"] if many else [body]
    if not isinstance(items, list) or not items:
        abort(400, "runs must be a non-empty list")
    try:
        datas = [wire.parse_run(it, f"runs[{i}]" if many else "run") for i, it in enumerate(items)]
    except InputError as exc:
        return {"error": str(exc), "status": 400}, 400
    # the runs' kernel, machine and job rows resolved once, the runs sent in one round trip
    # (ingest's pipeline): a boot's upload is what a lab's worker waits for before its next
    # boot, and ten workers uploading together queued for a run-at-a-time ingest
    stored = ingest.ingest(dbsession.engine(), datas)
    results = []
    for d, rid in zip(datas, stored.ids, strict=True):
        created = rid is not None
        if rid is None:
            rid = runs_q.id_for_key(dbsession.get(), d.key())
        results.append({"id": rid, "created": created, "idempotency_key": d.key()})
    if many:
        status = 201 if any(r["created"] for r in results) else 200
        return {"runs": results}, status
    return results[0], 201 if results[0]["created"] else 200


@bp.route("/comparisons", methods=["POST"])
@login_required
def comparison_create():
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("kernels"), list):
        abort(400, 'body must be {"kernels": [base, ...], "all_rows": false, "suite": null}')
    refs = [str(k) for k in body["kernels"]]
    opts = comparisons.Options(all_rows=bool(body.get("all_rows")), suite=body.get("suite"))
    s = dbsession.get()
    try:
        comp = comparisons.create_for(
            s, g.user.id, refs, opts, max_kernels=current_app.config["COMPARE_MAX_KERNELS"]
        )
    except comparisons.QuotaExceeded as exc:
        s.rollback()
        return {"error": str(exc), "status": 429}, 429
    except StackbenchError as exc:
        s.rollback()
        status = 404 if isinstance(exc, NotFoundError) else 400
        return {"error": str(exc), "status": status}, status
    s.commit()
    return comparison_links(comp.key), 201


def comparison_links(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "url": url_for("compare.show", key=key, _external=True),
        "api": url_for("api.comparison_get", key=key, _external=True),
        "tables": {
            st: url_for("api.comparison_table", key=key, style=st, _external=True)
            for st in comparisons.STYLES
        },
    }


def _load_comparison(key: str) -> tuple[comparisons.Found, dict]:
    try:
        found = comparisons.lookup(dbsession.engine(), key)
    except NotFoundError as exc:
        abort(404, str(exc))
    return found, found.result


@bp.route("/comparisons/<key>")
def comparison_get(key: str):
    comp, result = _load_comparison(key)
    ck = (key, comp.fingerprint, "api", request.host_url)
    body = comparisons.CACHE.get(ck)
    if body is None:
        doc = {
            **comparison_links(key),
            "options": {k: comp.params.get(k) for k in ("all_rows", "suite")},
            "kernels": result.get("kernels", []),
            "errors": result.get("errors", {}),
            "metrics": [
                {
                    **{k: m[k] for k in ("job", "metric", "unit", "higher_is_better")},
                    # the job with its parameters (results stored before it: the job)
                    "subjob": m.get("subjob") or m["job"],
                    **{k: m[k] for k in ("values", "verdicts")},
                }
                for m in result.get("metrics", [])
            ],
            # per commit: the functions its patch changes and their calls per job
            "coverage": result.get("coverage", []),
            # per commit and job: the kernel symbols whose share of the evidence boot's
            # CPU samples moved most against the base (docs/profile.md)
            "profile": result.get("profile", []),
        }
        body = json.dumps(doc, separators=(",", ":")).encode()
        comparisons.CACHE.put(ck, body)
    # the claims are not cached with the rest: they also read the series' meta and its
    # previous version's runs, which the comparison's fingerprint does not cover
    report = comparison_claims(key)
    claims = json.dumps(report.as_json() if report else None, separators=(",", ":"))
    return Response(body[:-1] + b',"claims":' + claims.encode() + b"}", mimetype="application/json")


@bp.route("/comparisons/<key>/tables/<style>")
def comparison_table(key: str, style: str):
    if style not in comparisons.STYLES:
        abort(404, f"unknown table style '{style}' (lkp, mmtests, stackbench)")
    _comp, result = _load_comparison(key)
    tables = result.get("tables", {})
    if style == "mmtests":
        text = "\n".join(t["text"] for t in tables.get("mmtests", []))
    else:
        text = tables.get(style) or ""
    if not text:
        msg = result.get("errors", {}).get(style) or result.get("errors", {}).get("all")
        abort(404, msg or f"no {style} table for this comparison")
    if request.args.get("format") == "text" or request.accept_mimetypes.best == "text/plain":
        return Response(text, mimetype="text/plain")
    return {"key": key, "style": style, "text": text}


def regression_json(r: Regression, full: bool = False) -> dict[str, Any]:
    d = {
        "id": r.id,
        "tree": r.tree_id,
        "branch": r.branch,
        "job": r.job_id,
        "metric": r.metric_id,
        "good": r.good_build_id,
        "bad": r.bad_build_id,
        "change_pct": r.change_pct,
        "ci": [r.ci_low, r.ci_high],
        "confidence": r.confidence,
        "verdict": r.verdict,
        "state": r.state,
        "culprit": r.culprit,
        "created_at": _iso(r.created_at),
        "url": url_for("regressions.show", reg_id=r.id, _external=True),
    }
    if full:
        bis = regressions_q.bisects_of(dbsession.get(), r.id, ordered=False)
        d["bisects"] = [
            {
                "id": b.id,
                "state": b.state,
                "good": b.good,
                "bad": b.bad,
                "steps": b.steps,
                "culprit": b.culprit,
                "confidence": b.confidence,
                "kernels_built": b.kernels_built,
            }
            for b in bis
        ]
        d["table"] = (r.meta or {}).get("table")
    return d


@bp.route("/regressions")
def regressions():
    limit, offset = _limit()
    rows = regressions_q.listing(
        dbsession.get(), state=request.args.get("state") or "", offset=offset, limit=limit
    )
    return {"regressions": [regression_json(r) for r in rows]}


@bp.route("/regressions/<int:reg_id>")
def regression_get(reg_id: int):
    r = regressions_q.get(dbsession.get(), reg_id)
    if r is None:
        abort(404, f"no regression {reg_id}")
    return regression_json(r, full=True)


@bp.route("/machines")
def machines():
    rows = machines_q.listing(dbsession.get())
    return {
        "machines": [
            {
                "id": m.id,
                "name": m.name,
                "kind": m.kind,
                "cpus": m.cpus,
                "memory_mb": m.memory_mb,
                "nodes": m.nodes,
                "state": m.state,
                "last_seen": _iso(m.last_seen),
            }
            for m in rows
        ]
    }


@bp.route("/jobs")
def jobs():
    s = dbsession.get()
    counts = runs_q.count_by_job(s)
    rows = jobs_q.listing(s, by_test=False)
    return {
        "jobs": [
            {
                "id": j.id,
                "suite": j.suite,
                "test": j.test,
                "params": j.params,
                "suite_version": j.suite_version,
                "runner": j.runner,
                "runs": counts.get(j.id, 0),
            }
            for j in rows
        ],
        "definitions": submission.job_choices(s),
    }
