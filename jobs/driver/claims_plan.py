"""A series that checks its claims: the cover letter's claims read at submission, mapped to
jobs of ours, and the mapped jobs added to the series' own (so they join its plan like any
job it asked for). The claims are kept with the series (results-db claims_store) for the
report to check them (results-db claims_check)."""

from __future__ import annotations

import logging
import re
from typing import Any

from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.driver import claims_map
from stackbench.jobs.executors.jobspecs import parse_job_spec, plan_for, split_job_specs
from stackbench.jobs.executors.settings import DEFAULT_JOBS, Settings
from stackbench.patches import claims as parser

log = logging.getLogger(__name__)
# the kernel half of a mapper's reason, dropped when the kernels are mapped again
_KERNEL_REASON = re.compile(r"not in this series|has no kernels")
_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(.*)\])?$")


def kernels_at_submission(parsed: Any, base: str) -> list[tuple[str, str]]:
    """The series' kernels as known before ``git am`` (base first), as the mapper takes
    them: (commit, name), the commits a push carries and the patches' subjects (the names
    authors give their columns)."""
    out = [(base or "", base or "base")]
    for p in parsed.patches:
        out.append((getattr(p, "commit_sha", None) or "", p.subject or f"{p.idx}/{p.total}"))
    return out


def read_claims(parsed: Any, base: str) -> list[Any]:
    """The claims of the cover letter (of the first patch's changelog for a single patch),
    mapped (:func:`stackbench.jobs.driver.claims_map.cover_claims`)."""
    text = parsed.cover_letter or ""
    if not text and len(parsed.patches) == 1:
        text = parsed.patches[0].body or ""
    return claims_map.cover_claims(text, kernels_at_submission(parsed, base))


def _overrides(spec: str) -> dict[str, str]:
    m = _SPEC.match(spec.strip())
    if not m:
        return {}
    out = {}
    for item in split_job_specs(m.group(2) or ""):
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out


def _subjobs(specs: list[str], runs: int | None) -> set[str]:
    jobs = [parse_job_spec(s, runs) for s in specs]
    return {sj.name for sj in plan_for(jobs, Settings())}


def with_claims(
    parsed: Any, jobs: list[str] | None, runs: int | None, base: str
) -> tuple[list[str] | None, list[dict[str, Any]], list[str]]:
    """(the series' jobs with each mapped claim's job added where no job of the series
    already measures it, the claims to keep, the jobs added). A cover letter the parser
    cannot read keeps no claims: the submission goes on with its own jobs. ``parsed`` is a
    parsed mbox or a stored series (both have ``cover_letter`` and ``patches``)."""
    try:
        mapped = read_claims(parsed, base)
    except (InputError, ValueError, ImportError) as exc:
        log.warning("claims not read: %s", exc)
        return jobs, [], []
    if not mapped:
        return jobs, [], []
    plan = list(jobs or DEFAULT_JOBS)
    try:
        have = _subjobs(plan, runs)
        suites = {parse_job_spec(j).suite for j in plan}
    except StackbenchError:
        have, suites = set(), set()  # the submission's own validation reports its jobs
    kept: list[dict[str, Any]] = []
    for m in mapped:
        row = {
            "claim": m.claim.as_json(),
            "job": m.job,
            "suite": None,
            "params": None,
            "metric": m.metric,
            "statistic": getattr(m, "statistic", None),
            "kernel_index": m.kernel_index,
            "base_index": m.base_index,
            "reason": m.reason,
        }
        if m.job:
            try:
                row["suite"] = parse_job_spec(m.job).suite
                row["params"] = _overrides(m.job)
                names = _subjobs([m.job], runs)
            except StackbenchError as exc:
                row["reason"] = f"its job {m.job} cannot run here: {exc}"
                names = set()
            # a table that names no parameters (mmtests' headers) is measured by the
            # series' own job of that suite, whatever its parameters
            bare = not row["params"] and row["suite"] in suites
            if names and not names & have and not bare:
                plan.append(m.job)
                have |= names
                suites.add(row["suite"])
        kept.append(row)
    added = plan[len(list(jobs or DEFAULT_JOBS)) :]
    return (plan if added else jobs), kept, added


def opt_in(s: Any, series: Any) -> bool:
    """A stored series asked again with its claims checked (``demo --check-claims`` after a
    plain demo): keep its claims and add their jobs; whether its plan changed."""
    from stackbench.resultsdb import claims_store, series_runs_store

    if claims_store.checks_claims(series):
        return False
    plan = series_runs_store.current(s, series.id)
    if plan is None:  # stored before any attempt held its plan: its client takes this one
        plan = series_runs_store.begin(
            s, series.id, source="demo", executor=series_runs_store.WAITING
        )
    jobs, kept, added = with_claims(series, plan.jobs, plan.runs, series.base_ref)
    claims_store.put(series, kept, added=added)
    plan.check_claims = True
    if added:
        plan.jobs = list(jobs or [])
    s.flush()
    return bool(added)


def remap_kernels(s: Any, series: Any) -> None:
    """The kept claims' kernel columns mapped again onto the commits ``git am`` gave (by our
    tables' names, else by the patches' subjects): done once, when the apply is recorded."""
    from stackbench.resultsdb import claims_check, claims_store

    stored = claims_store.of_series(series)
    if not stored:
        return
    kernels, subjects = claims_check.stack_names(series)
    claims_store.replace(series, _remap(stored, kernels, subjects))


def _remap(
    stored: list[dict[str, Any]], kernels: list[tuple[str, str]], subjects: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The stored claims with their kernel columns mapped again onto the series' applied
    commits (the shas git am gave) by our tables' names, else by the patches' subjects."""
    try:
        fields = parser.Claim.__dataclass_fields__
        objs = [
            parser.Claim(**{k: _field(c["claim"], k) for k in fields if k in c["claim"]})
            for c in stored
        ]
        fresh = [
            a if a.kernel_index is not None and a.base_index is not None else b
            for a, b in zip(
                claims_map.map_claims(objs, kernels),
                claims_map.map_claims(objs, subjects),
                strict=True,
            )
        ]
    except (AttributeError, KeyError, TypeError, ValueError):
        return stored
    # the job was the submission's to choose (it joined the plan): only the kernels are
    # mapped again, and the reason keeps the job's part
    out = []
    for c, m in zip(stored, fresh, strict=True):
        missing = m.kernel_index is None or m.base_index is None
        c = dict(c, kernel_index=m.kernel_index, base_index=m.base_index)
        if m.job == c.get("job"):  # the same job: the mapper's metric and reason of now
            c.update(metric=m.metric, statistic=getattr(m, "statistic", None), reason=m.reason)
        else:
            c["reason"] = m.reason if missing else _job_reason(c.get("reason"))
        out.append(c)
    return out


def _job_reason(reason: str | None) -> str | None:
    # the mapper joins its job and kernel reasons with "; "
    parts = [p for p in (reason or "").split("; ") if p and not _KERNEL_REASON.search(p)]
    return "; ".join(parts) or None


def _field(claim: dict[str, Any], key: str) -> Any:
    v = claim[key]
    return tuple(v) if isinstance(v, list) else v
