"""Rendered comparison tables kept in the database by content, for the CLI.

A ``stackbench compare`` whose kernels and runs have not changed since the same command last
ran prints the stored text: one psycopg connection and one query, no SQLAlchemy and no numpy.
Entries live in ``kept_table`` (migration 0009) under a hash of the command's arguments,
with the runs' fingerprint they were made from: the kernels table's size, the count,
largest and sum of the ids of the finished runs of the kernels, and a digest of their
evidence boots' coverage and profile (:data:`EVIDENCE_DIGEST`). A stored entry whose
fingerprint no longer matches is recomputed. The text is kept as bytes and read in psycopg's
binary format: the command writes it to stdout as it comes, with no decoding. A database
that is not at this stackbench's revision raises :class:`Schema`, so that the caller
migrates it or says how. The key also holds the state of the table code
(:func:`code_version`): an upgraded stackbench computes its tables afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import namedtuple

import psycopg

from stackbench.resultsdb import db

# what an evidence boot keeps about the kernels {ids} (coverage counts and profile on the
# kernel, the functions its patch changes on the patch: stackbench.resultsdb.coverage_store,
# profile_store), as a digest: it is stored on rows that exist, after their runs, so no count
# or id of rows moves. The comparisons' fingerprint has it too (comparisons_q).
EVIDENCE_DIGEST = (
    "SELECT md5(coalesce(string_agg(coalesce((kb.meta->'coverage')::text, '') || '|' || "
    "coalesce((kb.meta->'profile')::text, '') || '|' || "
    "coalesce((pt.meta->'changed_functions')::text, ''), ',' ORDER BY kb.id), '')) "
    "FROM kernel_build kb LEFT JOIN patch pt ON pt.id = kb.patch_id WHERE kb.id = ANY({ids})"
)
_FINGERPRINT = (
    "(SELECT count(*) || ':' || coalesce(max(id), 0) FROM kernel_build) || '/' || "
    "(SELECT count(*) || ':' || coalesce(max(id), 0) || ':' || coalesce(sum(id), 0) FROM run "
    "WHERE status = 'done' AND build_id = ANY({ids})) || '/' || (" + EVIDENCE_DIGEST + ")"
)
_LOOKUP = (
    "SELECT (SELECT version_num FROM alembic_version), k.fingerprint, "
    + _FINGERPRINT.format(ids="k.build_ids")
    + ", k.text, k.warnings FROM kept_table k WHERE k.key = %s"
)

_VIEW_FIELDS = (
    "refs",  # tuple[str, ...]
    "style",  # str
    "all_rows",  # bool
    "table",  # str | None
    "monitor",  # str | None
    "suite",  # str | None
    "machine",  # str | None
    "pool_machines",  # bool
    "metric",  # str | None
    "pass_no",  # int
    "suite_source",  # str | None
)


class View(
    namedtuple("View", _VIEW_FIELDS, defaults=(False, None, None, None, None, False, None, 1, None))
):
    """What ``stackbench compare`` was asked for: the key of its text. Every option that
    changes the printed table is a field (the CLI builds one from compare.options)."""

    __slots__ = ()

    @property
    def key(self) -> str:
        # repr of str, bool, int, None and tuples is stable across runs
        raw = repr((sorted(self._asdict().items()), code_version()))
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


_code: list[str] = []


def code_version() -> str:
    """The state of the code that makes the tables (results-db's modules and its tables'):
    name, size and modification time of each, so that a text kept by another version of
    stackbench is never printed by this one. A few stat calls; no module is imported."""
    if not _code:
        here = os.path.dirname(os.path.realpath(__file__))
        files = []
        for folder in (here, os.path.dirname(here)):
            with os.scandir(folder) as entries:
                files += [e for e in entries if e.name.endswith(".py") and e.is_file()]
        files.sort(key=lambda e: e.path)
        _code.append(";".join(f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}" for e in files))
    return _code[0]


class Hit(namedtuple("Hit", ("text", "warnings"))):
    """A kept table (bytes, UTF-8) and its warnings (list[str])."""

    __slots__ = ()


class Schema(Exception):
    """The database is not at this stackbench's revision (db.engine() migrates or says so)."""


def lookup(view: View, conn: psycopg.Connection) -> Hit | None:
    """The stored text of ``view`` when its runs are unchanged, else None. Raises
    :class:`Schema` when the database is not at the head revision, psycopg's errors on
    failures."""
    try:
        # binary: the text comes as the bytes the server keeps (a 6 MB table is not decoded
        # here to be encoded again on its way to stdout)
        row = conn.execute(_LOOKUP, (view.key,), binary=True).fetchone()
        if row is None:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            if row is None or row[0] != db.head_revision():
                raise Schema()
            return None
    except psycopg.errors.UndefinedTable:  # a database never migrated
        raise Schema() from None
    revision, stored, live, text, warnings = row
    if revision != db.head_revision():
        raise Schema()
    if stored is None or stored != live or text is None:
        return None
    listed = warnings if isinstance(warnings, list) else []
    return Hit(bytes(text), [str(w) for w in listed])


def fingerprint(raw: psycopg.Connection, build_ids: list[int]) -> str:
    """The fingerprint of ``build_ids``' runs now."""
    sql = "SELECT " + _FINGERPRINT.format(ids="%(ids)s::int[]")
    return raw.execute(sql, {"ids": build_ids}).fetchone()[0]


def store(
    raw: psycopg.Connection, view: View, build_ids: list[int], fp: str, text: str,
    warnings: list[str],
) -> None:  # fmt: skip
    """Keep ``text`` for ``view``, made from the runs with fingerprint ``fp`` (taken before
    the text was computed, so runs added meanwhile make the entry stale, not wrong), in the
    caller's transaction."""
    options = {k: v for k, v in view._asdict().items() if k != "refs"}
    # a kept table lost in a crash is computed again: its commit need not wait for the WAL
    # to reach the disk (a cold command's last wait, long when the disk is busy)
    raw.execute("SET LOCAL synchronous_commit = off")
    raw.execute(
        "INSERT INTO kept_table (key, build_ids, fingerprint, options, warnings, text) "
        "VALUES (%s, %s::int[], %s, %s::jsonb, %s::jsonb, %s) ON CONFLICT (key) DO UPDATE SET "
        "build_ids = EXCLUDED.build_ids, fingerprint = EXCLUDED.fingerprint, "
        "options = EXCLUDED.options, warnings = EXCLUDED.warnings, text = EXCLUDED.text, "
        "created_at = now()",
        (view.key, build_ids, fp, json.dumps(options), json.dumps(warnings), text.encode()),
    )


def not_kept(exc: Exception) -> str:
    """The warning of a table the database would not keep (it is printed all the same)."""
    return "could not keep the table for next time: " + (str(exc).splitlines() or [""])[0]
