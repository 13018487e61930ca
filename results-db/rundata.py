"""What one run is, as importers, the boot stage and workers hand it over: a job, the kernel
and machine it ran on, its samples and logs. Plain data, no database: a worker builds and
sends runs without loading the data layer (:mod:`stackbench.resultsdb.ingest` stores them,
:mod:`stackbench.resultsdb.wire` carries them as JSON).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class JobSpec:
    suite: str
    test: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    suite_version: str = ""
    runner: str = ""

    @property
    def params_key(self) -> str:
        return params_key(self.params)


@dataclass
class KernelSpec:
    commit: str
    name: str = ""
    config_name: str = ""
    config_hash: str = ""
    compiler: str = ""
    tree: str | None = None
    status: str = "imported"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class MachineSpec:
    name: str
    kind: str = "import"
    cpus: int | None = None
    memory_mb: int | None = None
    nodes: int | None = None


@dataclass
class RunData:
    job: JobSpec
    kernel: KernelSpec
    machine: MachineSpec
    iteration: int
    samples: dict[str, Sequence[float]]
    source: str = ""
    status: str = "done"
    error: str = ""
    logs: dict[str, bytes] = field(default_factory=dict)
    sysstate: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    idempotency_key: str | None = None

    def key(self) -> str:
        if self.idempotency_key:
            return self.idempotency_key
        ident = [
            self.source,
            self.job.suite,
            self.job.params_key,
            self.job.suite_version,
            self.job.runner,
            self.kernel.commit,
            self.kernel.config_hash,
            self.kernel.compiler,
            self.machine.name,
            self.iteration,
        ]
        return hashlib.sha256(json.dumps(ident).encode()).hexdigest()


def params_key(params: dict[str, Any]) -> str:
    """Parameter values sorted by key and joined by '/', with their keys (stable identity)."""
    return "/".join(f"{k}={params[k]}" for k in sorted(params))
