"""The run wire format: JSON in the shape of :class:`RunData`, checked completely before
anything is written, then stored through the shared ingest (idempotent by key).

:data:`RUN_SCHEMA` is the one definition of the format: :func:`parse_run` validates against
it, the API's OpenAPI document publishes it, and :func:`run_to_json` writes it (the API
client's uploads and the Buildbot workers' payload files alike). It lives in the data layer
so the web upload API, the CLI's API client and the workers share one codec without
importing each other.
"""

from __future__ import annotations

import base64
import binascii
import functools
from datetime import datetime
from typing import Any

from stackbench.errors import InputError
from stackbench.resultsdb import storable
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

RUN_STATUSES = ("done", "crashed", "timeout", "failed", "lost", "queued", "running")
MAX_SAMPLES = 2_000_000


def _s(limit: int) -> dict[str, Any]:
    return {"type": ["string", "null"], "maxLength": limit}  # null: empty


# integer columns: a larger number would reach PostgreSQL and fail there
_COUNT = {"type": ["integer", "null"], "minimum": 0, "maximum": storable.INT_MAX}
_TIME = {"type": ["string", "null"], "description": "ISO 8601", "maxLength": 64}

RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "one run (stackbench.resultsdb.rundata.RunData); logs base64-encoded",
    "properties": {
        "job": {
            "type": "object",
            "properties": {
                "suite": {"type": "string", "minLength": 1, "maxLength": 100},
                "test": _s(200),
                "params": {"type": ["object", "null"]},
                "suite_version": _s(100),
                "runner": _s(100),
            },
            "required": ["suite"],
        },
        "kernel": {
            "type": "object",
            "properties": {
                "commit": {"type": "string", "minLength": 1, "maxLength": 200},
                "name": _s(1000),
                "config_name": _s(200),
                "config_hash": _s(64),
                "compiler": _s(100),
                "tree": {"type": ["string", "null"], "pattern": f"^$|{storable.TREE_NAME_PATTERN}"},
                "status": _s(32),
                "meta": {"type": ["object", "null"]},
            },
            "required": ["commit"],
        },
        "machine": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "kind": _s(32),
                "cpus": _COUNT,
                "memory_mb": _COUNT,
                "nodes": _COUNT,
            },
            "required": ["name"],
        },
        "iteration": {"type": "integer", "minimum": 0, "maximum": storable.INT_MAX},
        "samples": {
            "type": ["object", "null"],
            "description": f"metric -> a number or a list of numbers; at most {MAX_SAMPLES} "
            "in one run, every one finite",
            "propertyNames": {"minLength": 1, "maxLength": 300},
            "additionalProperties": {
                "anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]
            },
        },
        "logs": {
            "type": ["object", "null"],
            "additionalProperties": {"type": "string", "contentEncoding": "base64"},
        },
        "source": _s(64),
        "status": {"enum": [*RUN_STATUSES, "", None]},
        "error": {"type": ["string", "null"], "maxLength": 10000},
        "sysstate": {"type": ["object", "null"]},
        "meta": {"type": ["object", "null"]},
        "started_at": _TIME,
        "finished_at": _TIME,
        "duration_s": {"type": ["number", "null"], "minimum": 0, "description": "finite"},
        "idempotency_key": {"type": ["string", "null"], "maxLength": 128},
    },
    "required": ["job", "kernel", "machine", "iteration"],
}

_TYPE_WORDS = {"object": "an object", "string": "a string", "integer": "an integer",
               "number": "a number", "array": "a list"}  # fmt: skip


@functools.cache
def _validator() -> Any:
    # imported here: commands that never parse a run do not pay for jsonschema
    import jsonschema

    return jsonschema.Draft202012Validator(RUN_SCHEMA)


def _message(err: Any) -> tuple[str, str]:
    """(where below the run, what is wrong) of a jsonschema error, in stackbench's words."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    v, arg = err.validator, err.validator_value
    if v == "required":
        # the schema's order, so two missing fields always name the same one first
        missing = next((k for k in arg if k not in err.instance), "?")
        return f"{path}.{missing}", "is required"
    if v == "type":
        kinds = [arg] if isinstance(arg, str) else [t for t in arg if t != "null"]
        return path, "must be " + " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
    if v == "maxLength":
        return path, f"longer than {arg} characters"
    if v == "minLength":
        return path, "is required"
    if v == "minimum":
        return path, f"must be at least {arg}"
    if v == "maximum":
        return path, f"must be at most {arg}"
    if v == "enum":
        return path, f"unknown value {err.instance!r}"
    if v == "anyOf":
        return path, "must be a number or a list of numbers"
    if v == "pattern":  # the tree's name, the one pattern of the schema
        return (
            path,
            f"not a tree name: at most {storable.TREE_NAME_MAX} ASCII letters, digits, . _ -",
        )
    if v == "propertyNames":
        return path, f"bad metric name {str(err.instance)[:40]!r}"
    return path, err.message[:200]


def parse_run(raw: Any, where: str = "run") -> RunData:
    """A run from its JSON, or InputError naming the first thing wrong (``where.job.suite``:
    is required)."""
    if not isinstance(raw, dict):
        raise InputError(where, "must be an object")
    # params, meta and sysstate are free-form jsonb: no schema says what they may not hold
    unstorable = storable.problem(raw, where)
    if unstorable:
        at, _, what = unstorable.partition(": ")
        raise InputError(at, what)
    errors = sorted(_validator().iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        at, what = _message(errors[0])
        raise InputError(f"{where}{at}", what)
    d, j, k, m = raw, raw["job"], raw["kernel"], raw["machine"]
    samples: dict[str, list[float]] = {}
    total = 0
    for name, vals in (d.get("samples") or {}).items():
        vals = vals if isinstance(vals, list) else [vals]
        for v in vals:
            _number(v, f"{where}.samples.{name}")
        total += len(vals)
        samples[name] = [float(v) for v in vals]
    if total > MAX_SAMPLES:
        raise InputError(f"{where}.samples", f"more than {MAX_SAMPLES} samples in one run")
    logs: dict[str, bytes] = {}
    for name, b64 in (d.get("logs") or {}).items():
        try:
            logs[name] = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{where}.logs.{name}", "is not valid base64") from None
    dur = d.get("duration_s")
    if dur is not None:
        _number(dur, f"{where}.duration_s")
    return RunData(
        job=JobSpec(
            suite=j["suite"], test=j.get("test") or "", params=j.get("params") or {},
            suite_version=j.get("suite_version") or "", runner=j.get("runner") or "",
        ),
        kernel=KernelSpec(
            commit=k["commit"], name=k.get("name") or "", config_name=k.get("config_name") or "",
            config_hash=k.get("config_hash") or "", compiler=k.get("compiler") or "",
            tree=k.get("tree") or None, status=k.get("status") or "built", meta=k.get("meta") or {},
        ),
        machine=MachineSpec(
            name=m["name"], kind=m.get("kind") or "qemu", cpus=m.get("cpus"),
            memory_mb=m.get("memory_mb"), nodes=m.get("nodes"),
        ),
        iteration=d["iteration"],
        samples=samples,
        source=d.get("source") or "upload",
        status=d.get("status") or "done",
        error=d.get("error") or "",
        logs=logs,
        sysstate=d.get("sysstate") or {},
        meta=d.get("meta") or {},
        started_at=_time(d, "started_at", where),
        finished_at=_time(d, "finished_at", where),
        duration_s=float(dur) if dur is not None else None,
        idempotency_key=d.get("idempotency_key") or None,
    )  # fmt: skip


def _number(v: Any, where: str) -> None:
    """A number a double precision column stores (the schema let every JSON number by)."""
    why = storable.float_problem(v)
    if why:
        raise InputError(where, why)


def _time(d: dict[str, Any], key: str, where: str) -> datetime | None:
    v = d.get(key)
    if v in (None, ""):
        return None
    try:
        return datetime.fromisoformat(str(v))
    except ValueError:
        raise InputError(f"{where}.{key}", f"not an ISO 8601 time: {str(v)[:40]!r}") from None


def run_to_json(data: RunData) -> dict[str, Any]:
    """The JSON of ``data`` in :data:`RUN_SCHEMA`'s shape (the key filled in)."""
    return {
        "job": {
            "suite": data.job.suite,
            "test": data.job.test,
            "params": data.job.params,
            "suite_version": data.job.suite_version,
            "runner": data.job.runner,
        },
        "kernel": {
            "commit": data.kernel.commit,
            "name": data.kernel.name,
            "config_name": data.kernel.config_name,
            "config_hash": data.kernel.config_hash,
            "compiler": data.kernel.compiler,
            "tree": data.kernel.tree,
            "status": data.kernel.status,
            "meta": data.kernel.meta,
        },
        "machine": {
            "name": data.machine.name,
            "kind": data.machine.kind,
            "cpus": data.machine.cpus,
            "memory_mb": data.machine.memory_mb,
            "nodes": data.machine.nodes,
        },
        "iteration": data.iteration,
        "samples": {k: [float(v) for v in vals] for k, vals in data.samples.items()},
        "source": data.source,
        "status": data.status,
        "error": data.error,
        "logs": {k: base64.b64encode(v).decode() for k, v in data.logs.items()},
        "sysstate": data.sysstate,
        "meta": data.meta,
        "started_at": data.started_at.isoformat() if data.started_at else None,
        "finished_at": data.finished_at.isoformat() if data.finished_at else None,
        "duration_s": data.duration_s,
        "idempotency_key": data.key(),
    }
