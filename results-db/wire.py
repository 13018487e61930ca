"""The run wire format: JSON in the shape of :class:`RunData`, checked completely before
anything is written, then stored through the shared ingest (idempotent by key).

It lives in the data layer so the web upload API and the CLI's API client share one codec
without the client importing web."""

from __future__ import annotations

import base64
import binascii
import math
from datetime import datetime
from typing import Any

from stackbench.errors import InputError
from stackbench.resultsdb.ingest import JobSpec, KernelSpec, MachineSpec, RunData

RUN_STATUSES = {"done", "crashed", "timeout", "failed", "lost", "queued", "running"}
MAX_SAMPLES = 2_000_000


def _obj(d: Any, where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise InputError(where, "must be an object")
    return d


def _str(d: dict, key: str, where: str, required: bool = False, limit: int = 200) -> str:
    v = d.get(key, "")
    if v is None:
        v = ""
    if not isinstance(v, str):
        raise InputError(f"{where}.{key}", "must be a string")
    if required and not v:
        raise InputError(f"{where}.{key}", "is required")
    if len(v) > limit:
        raise InputError(f"{where}.{key}", f"longer than {limit} characters")
    return v


def _int(d: dict, key: str, where: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"{where}.{key}", "must be a non-negative integer")
    return v


def _time(d: dict, key: str) -> datetime | None:
    v = d.get(key)
    if v in (None, ""):
        return None
    try:
        return datetime.fromisoformat(str(v))
    except ValueError:
        raise InputError(key, f"not an ISO 8601 time: {str(v)[:40]!r}") from None


def parse_run(raw: Any, where: str = "run") -> RunData:
    d = _obj(raw, where)
    j = _obj(d.get("job"), f"{where}.job")
    params = j.get("params") or {}
    if not isinstance(params, dict):
        raise InputError(f"{where}.job.params", "must be an object")
    job = JobSpec(
        suite=_str(j, "suite", f"{where}.job", required=True, limit=100),
        test=_str(j, "test", f"{where}.job"),
        params=params,
        suite_version=_str(j, "suite_version", f"{where}.job", limit=100),
        runner=_str(j, "runner", f"{where}.job", limit=100),
    )
    k = _obj(d.get("kernel"), f"{where}.kernel")
    kernel = KernelSpec(
        commit=_str(k, "commit", f"{where}.kernel", required=True),
        name=_str(k, "name", f"{where}.kernel", limit=1000),
        config_name=_str(k, "config_name", f"{where}.kernel"),
        config_hash=_str(k, "config_hash", f"{where}.kernel", limit=64),
        compiler=_str(k, "compiler", f"{where}.kernel", limit=100),
        tree=_str(k, "tree", f"{where}.kernel") or None,
        status=_str(k, "status", f"{where}.kernel", limit=32) or "built",
        meta=_obj(k.get("meta") or {}, f"{where}.kernel.meta"),
    )
    m = _obj(d.get("machine"), f"{where}.machine")
    machine = MachineSpec(
        name=_str(m, "name", f"{where}.machine", required=True),
        kind=_str(m, "kind", f"{where}.machine", limit=32) or "qemu",
        cpus=_int(m, "cpus", f"{where}.machine"),
        memory_mb=_int(m, "memory_mb", f"{where}.machine"),
        nodes=_int(m, "nodes", f"{where}.machine"),
    )
    iteration = _int(d, "iteration", where)
    if iteration is None:
        raise InputError(f"{where}.iteration", "is required")
    samples_raw = _obj(d.get("samples") or {}, f"{where}.samples")
    samples: dict[str, list[float]] = {}
    total = 0
    for name, vals in samples_raw.items():
        if not name or len(name) > 300:
            raise InputError(f"{where}.samples", f"bad metric name {name[:40]!r}")
        if isinstance(vals, (int, float)) and not isinstance(vals, bool):
            vals = [vals]
        if not isinstance(vals, list):
            raise InputError(f"{where}.samples.{name}", "must be a number or a list of numbers")
        clean = []
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"{where}.samples.{name}", f"not a finite number: {v!r}")
            clean.append(float(v))
        total += len(clean)
        samples[name] = clean
    if total > MAX_SAMPLES:
        raise InputError(f"{where}.samples", f"more than {MAX_SAMPLES} samples in one run")
    logs: dict[str, bytes] = {}
    for name, b64 in _obj(d.get("logs") or {}, f"{where}.logs").items():
        if not isinstance(b64, str):
            raise InputError(f"{where}.logs.{name}", "must be base64 text")
        try:
            logs[name] = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{where}.logs.{name}", "is not valid base64") from None
    status = _str(d, "status", where, limit=32) or "done"
    if status not in RUN_STATUSES:
        raise InputError(f"{where}.status", f"unknown status {status!r}")
    sysstate = _obj(d.get("sysstate") or {}, f"{where}.sysstate")
    meta = _obj(d.get("meta") or {}, f"{where}.meta")
    key = _str(d, "idempotency_key", where, limit=128) or None
    dur = d.get("duration_s")
    if dur is not None and (isinstance(dur, bool) or not isinstance(dur, (int, float))):
        raise InputError(f"{where}.duration_s", "must be a number")
    return RunData(
        job=job,
        kernel=kernel,
        machine=machine,
        iteration=iteration,
        samples=samples,
        source=_str(d, "source", where, limit=64) or "upload",
        status=status,
        error=_str(d, "error", where, limit=10000),
        logs=logs,
        sysstate=sysstate,
        meta=meta,
        started_at=_time(d, "started_at"),
        finished_at=_time(d, "finished_at"),
        duration_s=float(dur) if dur is not None else None,
        idempotency_key=key,
    )


def run_to_json(data: RunData) -> dict[str, Any]:
    """The upload body for ``data`` (what the API client sends)."""
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
        "samples": {k: list(v) for k, v in data.samples.items()},
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
