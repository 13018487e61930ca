"""Series and patches in the results database: creation (idempotent) and the patches'
apply outcomes (the series' state is the lifecycle's: stackbench.jobs.driver.lifecycle)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError
from stackbench.patches.apply import ApplyResult
from stackbench.patches.parser import ParsedSeries
from stackbench.resultsdb import series_store, trees_q, trees_store

_TREE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def series_key(parsed: ParsedSeries, tree: str | None, base: str | None) -> str:
    """The idempotency key of a submission: the cover letter's (or first patch's)
    Message-ID and the patches' content, together with the tree and the resolved base.

    The content is part of it so that another series reusing a Message-ID (by mistake or
    on purpose, by another user) is stored as its own series instead of being answered with
    the first one."""
    ident = f"msgid:{parsed.message_id or ''}\0content:{parsed.content_hash()}"
    digest = hashlib.sha256(f"{ident}\0{tree or ''}\0{base or ''}".encode()).hexdigest()
    return f"series:{digest}"


def resolve_base(parsed: ParsedSeries, base: str | None, tree_default: str | None) -> str:
    """The base a series is applied on: the one asked for, else the mbox's base-commit
    trailer, else the tree's default base. Every door (CLI, form, API) keys on this."""
    return base or parsed.base_commit or tree_default or ""


def create_series(
    session: Session,
    parsed: ParsedSeries,
    *,
    tree: str | None,
    base_ref: str,
    key: str,
    source: str = "mbox",
    owner_id: int | None = None,
    meta: dict[str, Any] | None = None,
    mbox: bytes | None = None,
) -> series_store.Series:
    """Store a parsed series and its patches (``new``, the model's first state / ``pending``).

    ``base_ref`` and ``key`` are the submission's :func:`resolve_base` and :func:`series_key`,
    resolved once by the intake (stackbench.jobs.driver.intake.take, the one caller).
    Submitting the same series again (same key) returns the stored one unchanged, also
    when two submissions race. ``meta``: facts the series page shows. ``mbox`` is the submission as received,
    kept so the patches are applied from the very bytes that were sent.
    """
    if not parsed.patches:
        raise InputError("series", "no patches to store")
    tree_row = _tree(session, tree) if tree else None
    existing = series_store.by_key(session, key)
    if existing is not None:
        return existing

    series_meta: dict[str, Any] = dict(meta or {})
    if parsed.rfc:
        series_meta["rfc"] = True
    if parsed.ignored:
        series_meta["ignored_mails"] = parsed.ignored[:50]

    patches = [
        dict(
            idx=p.idx,
            total=p.total,
            subject=p.subject,
            author=p.author,
            author_email=p.author_email,
            date=p.date,
            message_id=p.message_id,
            in_reply_to=p.in_reply_to,
            body=p.body,
            diff=p.diff,
            state="pending",
            meta={"pushed_sha": p.commit_sha} if p.commit_sha else {},
        )
        for p in parsed.patches
    ]
    series, created = series_store.add_series(
        session,
        patches=patches,
        tree=tree_row,
        title=parsed.title,
        version=parsed.version,
        submitter=parsed.submitter,
        submitter_email=parsed.submitter_email,
        cover_letter=parsed.cover_letter,
        message_id=parsed.message_id,
        in_reply_to=parsed.in_reply_to,
        base_ref=base_ref,
        base_commit=parsed.base_commit,
        source=source,
        owner_id=owner_id,
        idempotency_key=key,
        meta=series_meta,
        mbox=mbox,
    )
    if not created:
        return series
    series_store.add_event(
        session,
        series.id,
        f"series:{series.id}",
        "new",
        f"{len(parsed.patches)} patches from {source}",
    )
    return series


@dataclass(frozen=True)
class ApplyOutcome:
    """What an apply means for its series: the state it moves to (``applied`` or
    ``apply-failed``), the error to show, and the event's line. The lifecycle
    (stackbench.jobs.driver.lifecycle.record_apply) moves the series."""

    state: str
    error: str
    message: str


def apply_outcome(session: Session, series_id: int, result: ApplyResult) -> ApplyOutcome:
    """Record an :func:`apply_series` outcome on the patches: commits of the applied ones,
    the failing patch with git's message, the rest ``skipped``, the base's commit; what it
    means for the series, which is not moved here."""
    series = series_store.get(session, series_id)
    if series is None:
        raise NotFoundError(f"no series {series_id}")
    patches = sorted(series.patches, key=lambda p: p.idx)
    if len(result.commits) > len(patches) or (result.ok and len(result.commits) != len(patches)):
        raise InputError(
            f"series {series_id}",
            f"apply result has {len(result.commits)} commits for {len(patches)} patches",
        )
    if result.base_sha:
        series_store.save(series, base_commit=result.base_sha)
    for pos, patch in enumerate(patches):
        if pos < len(result.commits):
            facts = result.committed[pos] if pos < len(result.committed) else None
            series_store.save_patch(
                patch, commit_sha=result.commits[pos], state="applied", error="", committed=facts
            )
        elif not result.ok and result.failed_index == pos:
            series_store.save_patch(
                patch, commit_sha=None, state="apply-failed", error=result.error
            )
        else:
            series_store.save_patch(patch, commit_sha=None, state="skipped", error="")
    if result.ok:
        return ApplyOutcome(
            "applied", "", f"applied {len(patches)} patches on {result.base_sha[:12]}"
        )
    if result.failed_index is not None and result.failed_index < len(patches):
        bad = patches[result.failed_index]
        what = "is refused" if result.not_as_shown else "does not apply"
        error = f"patch {bad.idx}/{bad.total} '{bad.subject}' {what}: {result.error}"
    else:
        error = result.error or "the series could not be applied"
    return ApplyOutcome("apply-failed", error, error)


def _tree(session: Session, name: str) -> trees_q.Tree:
    if not _TREE_NAME.fullmatch(name):
        raise InputError(f"tree {name[:80]!r}", "not a valid tree name (letters, digits, ._+-)")
    # trees are normally registered from kernels/trees/*.yaml; a series naming another tree
    # still gets a row so it can be shown, and the build step reports the unknown tree
    return trees_store.ensure_tree(session, name)
