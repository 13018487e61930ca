"""The OpenAPI 3.1 document of the JSON API, built from one table of routes so it stays next
to what the blueprint serves (a test checks every documented path answers); the run upload's
schema is the wire format's own (stackbench.resultsdb.wire.RUN_SCHEMA)."""

from __future__ import annotations

from typing import Any

from stackbench import __version__
from stackbench.resultsdb import wire

_ERR = {"$ref": "#/components/schemas/Error"}

# (method, path, summary, auth, request schema name or None, success status)
ROUTES: list[tuple[str, str, str, str | None, str | None, int]] = [
    (
        "get",
        "/api/series",
        "List series, newest first (filters: tree, submitter, state)",
        None,
        None,
        200,
    ),
    (
        "post",
        "/api/series",
        "Submit a series (mbox text, tree, base, jobs, runs, check_claims)",
        "user",
        "SeriesSubmit",
        201,
    ),
    (
        "get",
        "/api/series/{id}",
        "A series with its patches, commit x job states and, once it ended, per commit the "
        "calls of the functions its patch changes (coverage)",
        None,
        None,
        200,
    ),
    ("get", "/api/series/{id}/patches", "The patches of a series", None, None, 200),
    ("get", "/api/patches/{id}", "One patch with its message body and diff", None, None, 200),
    ("get", "/api/kernels", "Kernel builds (filters: series, commit)", None, None, 200),
    ("get", "/api/kernels/{id}", "One kernel build", None, None, 200),
    ("get", "/api/runs", "Runs (filters: kernel, job, machine, status)", None, None, 200),
    (
        "post",
        "/api/runs",
        "Upload one run or {runs: [...]}; idempotent by key",
        "worker",
        "RunUpload",
        201,
    ),
    ("get", "/api/runs/{id}", "One run with its log links and system state", None, None, 200),
    ("get", "/api/runs/{id}/samples", "Every sample of a run, per metric", None, None, 200),
    (
        "post",
        "/api/comparisons",
        "Create (or find) the comparison of kernels, base first",
        None,
        "ComparisonCreate",
        201,
    ),
    (
        "get",
        "/api/comparisons/{key}",
        "Kernels, per-metric run values and verdicts (each with its pair's base and new "
        "figures, base_est and new_est, the estimator its change is of), and per commit "
        "the functions its "
        "patch changes with their calls per job on the evidence boot (coverage), and the "
        "kernel symbols whose share of its CPU samples moved most (profile), and the "
        "claims of the series whose own comparison it is, measured (claims, null: none)",
        None,
        None,
        200,
    ),
    (
        "get",
        "/api/comparisons/{key}/tables/{style}",
        "A table as text: style lkp, mmtests or stackbench (?format=text for text/plain)",
        None,
        None,
        200,
    ),
    ("get", "/api/regressions", "Regressions (filter: state)", None, None, 200),
    ("get", "/api/regressions/{id}", "A regression with its bisects and table", None, None, 200),
    ("get", "/api/machines", "Workers: kind, size and state", None, None, 200),
    (
        "get",
        "/api/jobs",
        "Jobs with results, and the job definitions one may submit",
        None,
        None,
        200,
    ),
    (
        "get",
        "/api/health",
        "Each service of 'stackbench up': up or down, since when, restarts (503: one is down)",
        None,
        None,
        200,
    ),
    ("get", "/api/openapi.json", "This document", None, None, 200),
]

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "error": {"type": "string"},
            "status": {"type": "integer"},
            "fields": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["error"],
    },
    "SeriesSubmit": {
        "type": "object",
        "properties": {
            "mbox": {"type": "string", "description": "the series as mbox text"},
            "mbox_base64": {
                "type": "string",
                "description": "instead of mbox: the mbox bytes in base64 (any charset)",
            },
            "tree": {"type": "string"},
            "base": {"type": "string", "description": "empty: the mbox's base-commit line"},
            "jobs": {"type": "array", "items": {"type": "string"}},
            "runs": {"type": "integer", "minimum": 1, "maximum": 30},
            "check_claims": {
                "type": "boolean",
                "description": "measure the cover letter's claims too",
            },
        },
        "required": ["tree", "jobs"],
    },
    "RunUpload": wire.RUN_SCHEMA,
    "ComparisonCreate": {
        "type": "object",
        "properties": {
            "kernels": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "commits, prefixes, run names or #build-id; base first",
            },
            "all_rows": {"type": "boolean"},
            "suite": {"type": ["string", "null"]},
        },
        "required": ["kernels"],
    },
}


def document(server: str = "") -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path, summary, auth, schema, status in ROUTES:
        op: dict[str, Any] = {
            "summary": summary,
            "responses": {
                str(status): {
                    "description": "success",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "default": {
                    "description": "error",
                    "content": {"application/json": {"schema": _ERR}},
                },
            },
        }
        params = []
        for name in ("id", "key", "style"):
            if "{" + name + "}" in path:
                params.append(
                    {
                        "name": name,
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer" if name == "id" else "string"},
                    }
                )
        if params:
            op["parameters"] = params
        if schema:
            op["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}
                },
            }
        if auth:
            op["security"] = [{"token": []}]
            op["description"] = f"Needs a {auth} API token."
        paths.setdefault(path, {})[method] = op
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "stackbench API",
            "version": __version__,
            "description": "Series, kernels, runs, samples, comparisons and regressions "
            "of stackbench. Reading needs no account; submitting needs a "
            "user token, uploading results a worker token, which may do nothing else.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
    }
    if server:
        doc["servers"] = [{"url": server}]
    return doc
