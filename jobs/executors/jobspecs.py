"""Job specs as users write them: ``NAME`` or ``NAME[key=value,...]``, comma separated, and
the sub-jobs a list of them expands to for a guest of a given size."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from stackbench.errors import InputError
from stackbench.jobs.benchmarks import definitions
from stackbench.jobs.benchmarks.definitions import JobDef, SubJob
from stackbench.jobs.executors.settings import DEFAULT_JOBS, Settings

_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(.*)\])?$")


def split_job_specs(text: str, *, spaces: bool = False) -> list[str]:
    """``a,b[x=1,y=2],c`` -> ``['a', 'b[x=1,y=2]', 'c']`` (commas inside brackets stay); with
    ``spaces``, whitespace outside brackets separates too (a form's one spec per line)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth == 0 and (ch == "," or (spaces and ch.isspace())):
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [s for s in out if s]


def format_job_spec(suite: str, params: Mapping[str, Any]) -> str:
    """The job spec that reproduces a stored job: ``suite[k=v,...]``, keys sorted, booleans as
    ``true``/``false`` so :func:`parse_job_spec` reads them back as booleans."""
    if not params:
        return suite

    def value(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    inner = ",".join(f"{k}={value(v)}" for k, v in sorted(params.items()))
    return f"{suite}[{inner}]"


def parse_job_spec(spec: str, runs: int | None = None) -> JobDef:
    """A job definition by name, with optional parameter overrides:
    ``thpscale[madvise=false,max_threads=2]``; ``a|b`` gives a list (one sub-job each).
    Overrides are validated against the suite's schema like the YAML file itself."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise InputError(f"job {spec!r}", "expected NAME or NAME[key=value,...]")
    job = definitions.load(m.group(1))
    params = dict(job.params)
    for item in split_job_specs(m.group(2) or ""):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"job {spec!r}", f"override {item!r} is not key=value")
        values = [yaml.safe_load(v) for v in raw.split("|")]
        params[key.strip()] = values if len(values) > 1 else values[0]
    data: dict[str, Any] = {
        "suite": job.suite,
        "params": params,
        "runs": runs if runs is not None else job.runs,
        "runner": job.runner,
        "timeout": job.timeout_s,
    }
    if job.description:
        data["description"] = job.description
    parsed = definitions.parse(data, path=f"job {spec}")
    parsed.name = job.name
    parsed.upstream = job.upstream  # the pinned repository stays with the named job
    return parsed


def resolve_jobs(specs: list[str] | None, runs: int | None) -> list[JobDef]:
    if runs is not None and runs < 1:
        raise InputError("runs", f"must be at least 1, not {runs}")
    return [parse_job_spec(s, runs) for s in (specs or list(DEFAULT_JOBS))]


def plan_for(jobs: list[JobDef], settings: Settings) -> list[SubJob]:
    return [sj for part in plans_for(jobs, settings) for sj in part]


def plans_for(jobs: list[JobDef], settings: Settings) -> list[list[SubJob]]:
    """Each job's sub-jobs, in the jobs' order; two jobs may not expand to the same one."""
    parts = [
        definitions.expand(job, guest_mem_mb=settings.mem_mb, guest_cpus=settings.cpus)
        for job in jobs
    ]
    names = [sj.name for part in parts for sj in part]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InputError("jobs", f"two jobs expand to the same sub-job: {', '.join(dup)}")
    return parts
