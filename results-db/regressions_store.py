"""Regressions and their bisections as the nightly run and the bisector write them, and
the metric a verdict names; reading one row by id is :mod:`regressions_q`'s and
:mod:`jobs_q`'s. Every function takes the caller's session
(:func:`stackbench.resultsdb.db.session`) and leaves committing to it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Bisect, Metric, Regression


def metric_named(s: Session, name: str) -> Metric:
    """The metric NAME (it must be stored)."""
    return s.scalars(select(Metric).where(Metric.name == name)).one()


def open_regression(
    s: Session,
    *,
    tree_id: int,
    branch: str,
    job_id: int,
    metric_id: int,
    good_id: int,
    bad_id: int,
    **columns: Any,
) -> tuple[Regression, bool]:
    """The regression of the metric from build ``good_id`` to ``bad_id`` and whether it is
    new: the stored one of these builds, else the one still open from the same baseline on
    the branch (a later head still worse: ``bad_id`` is noted in its ``still_worse_at``),
    else a new row with ``columns``. Flushed, so a new row has its id."""
    row = s.scalars(
        select(Regression).where(
            Regression.job_id == job_id,
            Regression.metric_id == metric_id,
            Regression.good_build_id == good_id,
            Regression.bad_build_id == bad_id,
        )
    ).one_or_none()
    if row is not None:
        return row, False
    row = s.scalars(
        select(Regression)
        .where(
            Regression.job_id == job_id,
            Regression.metric_id == metric_id,
            Regression.good_build_id == good_id,
            Regression.tree_id == tree_id,
            Regression.branch == branch,
            Regression.state != "closed",
        )
        .order_by(Regression.id)
    ).first()
    if row is not None:
        seen = list((row.meta or {}).get("still_worse_at", []))
        if bad_id not in seen:
            row.meta = {**(row.meta or {}), "still_worse_at": [*seen, bad_id]}
        return row, False
    row = Regression(
        tree_id=tree_id,
        branch=branch,
        job_id=job_id,
        metric_id=metric_id,
        good_build_id=good_id,
        bad_build_id=bad_id,
        **columns,
    )
    s.add(row)
    s.flush()
    return row, True


def close_fixed(s: Session, tree_id: int, branch: str, good_id: int, head_id: int) -> list[int]:
    """Close the branch's regressions still open against baseline ``good_id``, noting the
    head they were gone at and the state they had; their ids."""
    rows = list(
        s.scalars(
            select(Regression).where(
                Regression.tree_id == tree_id,
                Regression.branch == branch,
                Regression.good_build_id == good_id,
                Regression.state != "closed",
            )
        )
    )
    for reg in rows:
        reg.meta = {**(reg.meta or {}), "fixed_at": head_id, "closed_as": reg.state}
        reg.state = "closed"
    return [r.id for r in rows]


def merge_meta(row: Regression | Bisect, **values: Any) -> None:
    """Merge VALUES into the row's meta (a new dict, so the change is stored)."""
    row.meta = {**(row.meta or {}), **values}


def update(row: Regression | Bisect, **columns: Any) -> None:
    """Set the row's columns given (``meta`` replaces it: see :func:`merge_meta`)."""
    for k, v in columns.items():
        setattr(row, k, v)


def add_bisect(s: Session, **columns: Any) -> Bisect:
    """A new bisect row, flushed so it has its id."""
    row = Bisect(**columns)
    s.add(row)
    s.flush()
    return row


def bisect(s: Session, bisect_id: int) -> Bisect | None:
    return s.get(Bisect, bisect_id)
