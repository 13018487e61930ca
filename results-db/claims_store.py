"""A series' claims, kept with the series: what its cover letter's tables claimed, and the
job and metric of ours each claim was mapped to when the series was submitted.

The claims are facts of the submission (they never change once read), so they live in the
series' ``meta`` (its jobs and runs are its attempt's plan), written and read only through these functions.
Each stored claim is a dict: ``claim`` (the parser's :meth:`Claim.as_json`), ``job`` (the
job spec it maps to, or None), ``suite`` and ``params`` (that job's suite and the parameters the spec sets, to find its
runs), ``metric`` (our metric name, or None), ``statistic`` (the row's reduction of it:
``Amean``, ``Stddev``, ``p50``...), ``kernel_index`` and
``base_index`` (places in the series' kernels, base first, as mapped at submission) and
``reason`` (why it could not be mapped, or None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, object_session

from stackbench.resultsdb import series_runs_store, series_store
from stackbench.resultsdb.models import Series, SeriesAttempt

# a cover letter with more rows than this is not a claim list a reviewer reads: the rest is
# said to be left out, never silently
MAX_CLAIMS = 500
KEYS = (
    "claim",
    "job",
    "suite",
    "params",
    "metric",
    "statistic",
    "kernel_index",
    "base_index",
    "reason",
)


def put(row: Series, claims: list[dict[str, Any]], *, added: Sequence[str] = ()) -> None:
    """Keep ``claims`` (dicts of :data:`KEYS`) with the series; ``added``: the jobs they
    added to the series' own (whether they are measured is the plan's ``check_claims``)."""
    kept = [{k: c.get(k) for k in KEYS} for c in claims[:MAX_CLAIMS]]
    series_store.merge_meta(
        row, claims=kept, claims_left_out=max(0, len(claims) - MAX_CLAIMS),
        claims_jobs=list(added),
    )  # fmt: skip


def replace(row: Series, claims: list[dict[str, Any]]) -> None:
    """The kept claims, as mapped again (their kernel columns onto the applied commits)."""
    series_store.merge_meta(row, claims=[{k: c.get(k) for k in KEYS} for c in claims])


def own_jobs(row: Series) -> list[str] | None:
    """The jobs the series asked for itself, without those its claims added."""
    jobs = getattr(_plan(row), "jobs", None)
    if jobs is None:
        return None
    added = set((row.meta or {}).get("claims_jobs") or [])
    return [j for j in jobs if j not in added]


def of_series(row: Series) -> list[dict[str, Any]]:
    """The stored claims of a series ([] when it kept none)."""
    claims = (row.meta or {}).get("claims")
    return [dict(c) for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []


def checks_claims(row: Series) -> bool:
    """Whether the series was submitted with its claims to be measured."""
    return bool(getattr(_plan(row), "check_claims", False))


def _plan(row: Series) -> SeriesAttempt | None:
    """The attempt whose plan the series follows (its latest), read in the row's session."""
    s = object_session(row)
    return series_runs_store.current(s, row.id) if s is not None and row.id else None


def previous_version(row: Series) -> int | None:
    """The series of the version before this one, if known: the one a list thread links (a
    list thread's v1 for its v2), else the newest earlier version that kept claims with the
    same title, submitter and tree (a v2 sent by the CLI, the form, the API or a push,
    whose subject prefix gave its version and which links nothing)."""
    from sqlalchemy import select

    prev = (row.meta or {}).get("previous_version")
    if isinstance(prev, int) and prev != row.id:
        return prev
    s = object_session(row)
    if s is None or row.id is None or (row.version or 1) < 2 or not row.title:
        return None
    return s.scalars(
        select(Series.id)
        .where(
            Series.id != row.id,
            Series.title == row.title,
            Series.submitter_email == (row.submitter_email or ""),
            Series.tree_id.is_not_distinct_from(row.tree_id),
            Series.version < row.version,
            Series.meta.has_key("claims"),
        )
        .order_by(Series.version.desc(), Series.id.desc())
        .limit(1)
    ).first()


def series_of_comparison(s: Session, key: str) -> Series | None:
    """The series whose own comparison (``meta.comparison.key``) is ``key``, if any."""
    from sqlalchemy import select

    return s.scalars(
        select(Series).where(Series.meta["comparison"]["key"].astext == key).order_by(Series.id)
    ).first()
