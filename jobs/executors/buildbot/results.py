"""Run results as they travel from a worker to stackbench: JSON payloads, one per run.

A worker writes one payload file per run, then uploads them: to the stackbench API
(``POST /api/runs`` with the worker's own token) when ``STACKBENCH_URL`` is set, else straight
into the database (the embedded one-machine setup). Both paths are idempotent by the run's
``idempotency_key``, so a retried upload or a retried step never stores a run twice, and each
run is stored in one transaction, so a worker that dies mid-upload leaves no half run behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.errors import InputError, StackbenchError

PAYLOAD_VERSION = 1
SOURCE = "buildbot"


def key_base(
    submission: str, commit: str, config_hash: str, compiler: str, job: str, kind: str
) -> str:
    """The identity of one benchmark request, shared by every attempt at it.

    The worker's name is not part of it: a retry on another machine of the same kind is the
    same request, and its upload must not add a second copy of a run that did arrive.
    """
    ident = json.dumps([submission, commit, config_hash, compiler, job, kind])
    return hashlib.sha256(ident.encode()).hexdigest()


def run_key(base: str, iteration: int, subjob: str = "") -> str:
    """A run's key: its request, its iteration and, for every sub-job of a job but its
    first (``subjob`` empty), the sub-job. A job that expands into several sub-jobs
    (``vm-scalability[test=a|b]``) runs each of them at every iteration; keyed by iteration
    alone, all but one of them were taken for copies and dropped. The first keeps the bare
    form, which a queued bare-metal job's expected keys name."""
    if not subjob:
        return f"{base}:{iteration}"
    return f"{base}:{iteration}:{hashlib.sha256(subjob.encode()).hexdigest()[:12]}"


def lost_key(base: str, buildbot_build: str | int) -> str:
    return f"{base}:lost:{buildbot_build}"


def to_payload(run: Any) -> dict[str, Any]:
    """A :class:`stackbench.resultsdb.rundata.RunData` as a payload file's JSON: the run wire
    format (:mod:`stackbench.resultsdb.wire`) with the payload's version."""
    from stackbench.resultsdb import wire

    return {"version": PAYLOAD_VERSION, **wire.run_to_json(run)}


def from_payload(data: dict[str, Any], origin: str = "payload") -> Any:
    """The inverse of :func:`to_payload`; a clear error names what is missing or wrong."""
    from stackbench.resultsdb import wire

    if not isinstance(data, dict):
        raise InputError(Path(origin), "bad run payload: not a JSON object")
    if data.get("version", PAYLOAD_VERSION) != PAYLOAD_VERSION:
        raise InputError(
            Path(origin), f"bad run payload: unsupported payload version {data.get('version')!r}"
        )
    if not data.get("idempotency_key"):
        raise InputError(Path(origin), "bad run payload: missing idempotency_key")
    try:
        run = wire.parse_run(data, where="payload")
    except InputError as exc:
        raise InputError(Path(origin), f"bad run payload: {exc}") from None
    if not data.get("source"):
        run.source = SOURCE
    return run


def write_payload(directory: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write atomically: a reader never sees a half-written run file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = directory / f".{name}.json.tmp"
    tmp.write_text(json.dumps(payload, sort_keys=True))
    os.replace(tmp, path)
    return path


def read_payloads(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    if not directory.is_dir():
        raise InputError(directory, "results directory not found")
    out = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(path, f"not valid JSON: {exc}") from None
        from_payload(data, str(path))  # validate everything before uploading anything
        out.append((path, data))
    return out


@dataclass
class UploadResult:
    stored: int = 0
    present: int = 0
    target: str = ""


def worker_token_file() -> Path:
    raw = config.get("STACKBENCH_WORKER_TOKEN_FILE")
    return Path(raw) if raw else config.home() / "worker.token"


def worker_token() -> str:
    """The worker's own API token: $STACKBENCH_WORKER_TOKEN, or the file that
    $STACKBENCH_WORKER_TOKEN_FILE names (default $STACKBENCH_HOME/worker.token)."""
    token = config.get("STACKBENCH_WORKER_TOKEN").strip()
    if token:
        return token
    path = worker_token_file()
    if not path.exists():
        raise StackbenchError(
            f"no worker token: set STACKBENCH_WORKER_TOKEN or write it to {path} (mode 600)"
        )
    return path.read_text().strip()


def upload(payloads: Iterable[dict[str, Any]], url: str | None = None) -> UploadResult:
    """Store runs through the API (``url`` or $STACKBENCH_URL) or, without one, the database."""
    url = url or config.server_url()
    items = list(payloads)
    res = UploadResult(target=url or "database")
    if url:
        # imported here: a worker that stores into the database does not load the HTTP client
        from stackbench.apiclient import ApiClient

        answers = ApiClient(url, worker_token(), timeout=60).upload_runs(items) if items else []
        res.stored = sum(1 for a in answers if a.get("created"))
        res.present = len(answers) - res.stored
        return res
    from stackbench.resultsdb import db
    from stackbench.resultsdb.ingest import ingest

    out = ingest(db.engine(), [from_payload(p) for p in items])
    res.stored, res.present = len(out.inserted), out.skipped
    return res
