"""A series whose cover letter's claims are checked, stored the way claims_check reads one."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench.resultsdb import claims_store, series_runs_store
from stackbench.resultsdb.models import Patch, Series


def claims_series(
    eng,
    *,
    title: str,
    base: str,
    base_ref: str,
    patches: list[tuple[str, str]],
    claims: list[dict[str, Any]],
    message_id: str,
    cover_letter: str,
    version: int = 1,
    meta: dict[str, Any] | None = None,
) -> int:
    """A finished series of PATCHES, (commit, subject) each, whose CLAIMS are stored and
    whose attempt checks them; the kernel builds stored so far (by ingesting their runs
    first) become its kernels. Its id."""
    with Session(eng) as s, s.begin():
        series = Series(title=title, base_commit=base, base_ref=base_ref, state="done",
                        message_id=message_id, version=version, cover_letter=cover_letter,
                        meta=meta or {})  # fmt: skip
        for i, (sha, subject) in enumerate(patches, 1):
            series.patches.append(Patch(idx=i, total=len(patches), subject=subject, commit_sha=sha))
        s.add(series)
        s.flush()
        claims_store.put(series, claims)
        series_runs_store.begin(s, series.id, source="mbox", executor=series_runs_store.FOREGROUND,
                                check_claims=True)  # fmt: skip
        s.execute(text("UPDATE kernel_build SET series_id = :s WHERE series_id IS NULL"),
                  {"s": series.id})  # fmt: skip
        return series.id
