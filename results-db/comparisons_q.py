"""Saved comparisons: a set of kernels and table options under a permanent key, with the
rendered result kept beside a fingerprint of the runs it came from.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Comparison
from stackbench.resultsdb.tables.textcache import EVIDENCE_DIGEST

# the table options of a comparison nobody chose: every row hidden but the headline ones, every
# suite (the web's Options() says the same; its keys must stay what they were)
DEFAULT_OPTIONS: dict[str, Any] = {"all_rows": False, "suite": None}


def key_for(build_ids: list[int], options: dict[str, Any]) -> str:
    """The permanent key of the comparison of these kernels (base first) with these options."""
    raw = json.dumps([build_ids, options], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def publish(s: Session, build_ids: list[int]) -> Comparison:
    """The public comparison of these kernels with the default options, made by the service
    (no owner: it counts toward nobody's quota)."""
    key = key_for(build_ids, DEFAULT_OPTIONS)
    return get_or_create(s, key, build_ids, {**DEFAULT_OPTIONS, "owner_id": None})


def created_since(s: Session, owner_id: int, since: datetime) -> int:
    """Comparisons the user created after ``since`` (the comparison rate limit)."""
    used = s.scalar(
        select(func.count())
        .select_from(Comparison)
        .where(Comparison.params["owner_id"].astext == str(owner_id), Comparison.created_at > since)
    )
    return int(used or 0)


def by_key(s: Session, key: str) -> Comparison | None:
    return s.scalars(select(Comparison).where(Comparison.key == key)).one_or_none()


def get_or_create(s: Session, key: str, build_ids: list[int], params: dict[str, Any]) -> Comparison:
    """The comparison KEY, stored with these kernels and options unless it exists (a
    concurrent request storing the same key is no error)."""
    s.execute(
        insert(Comparison)
        .values(key=key, build_ids=build_ids, params=params, result={})
        .on_conflict_do_nothing(index_elements=["key"])
    )
    return s.scalars(select(Comparison).where(Comparison.key == key)).one()


def fingerprint(s: Session | Connection, build_ids: list[int]) -> str:
    """What changes whenever a run of the kernels is added or removed (count and newest
    id) or an evidence boot stores their coverage or profile (the digest the CLI's kept
    tables use too)."""
    n, mx, cov = s.execute(
        text(
            "SELECT count(*), coalesce(max(id), 0), "
            f"({EVIDENCE_DIGEST.format(ids=':ids')}) FROM run WHERE build_id = ANY(:ids)"
        ),
        {"ids": build_ids},
    ).one()
    return f"{n}:{mx}:{cov}"


# one round trip: the stored comparison, its result's fingerprint and its runs' live one
_IDS = "ARRAY(SELECT jsonb_array_elements_text(c.build_ids)::int)"
_LOOKUP = text(
    "SELECT c.id, c.build_ids, c.params, c.result->>'fingerprint', "
    "(SELECT count(*) || ':' || coalesce(max(r.id), 0) || ':' || "
    f"({EVIDENCE_DIGEST.format(ids=_IDS)}) FROM run r WHERE r.build_id = ANY({_IDS})) "
    "FROM comparison c WHERE c.key = :key"
)


def lookup(s: Session, key: str) -> tuple[int, list[int], dict[str, Any], str | None, str] | None:
    """(id, build ids, params, stored result's fingerprint, live fingerprint) of the
    comparison KEY, None when there is none."""
    row = s.execute(_LOOKUP, {"key": key}).first()
    return None if row is None else tuple(row)  # type: ignore[return-value]


def lock_result(s: Session, comparison_id: int, lock_class: int) -> tuple[str | None, dict]:
    """The stored result's fingerprint and the result, under a transaction-level advisory
    lock (``lock_class``, the comparison's id) so concurrent first views compute once."""
    s.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": lock_class, "b": comparison_id})
    fp, result = s.execute(
        text("SELECT result->>'fingerprint', result FROM comparison WHERE id = :i"),
        {"i": comparison_id},
    ).one()
    return fp, result


def save_result(s: Session, comparison_id: int, result: dict[str, Any]) -> None:
    s.execute(update(Comparison).where(Comparison.id == comparison_id).values(result=result))
