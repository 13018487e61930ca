"""Rendered comparison tables kept in the database by content, for the CLI.

A ``stackbench compare`` whose kernels and runs have not changed since the same command last
ran prints the stored text: one psycopg connection and one query, no SQLAlchemy and no numpy.
Entries live in the web's ``comparison`` table (the same content-keyed store the comparison
pages use), under keys of their own (``cli-`` and a hash of the command's arguments), with
the runs' fingerprint they were made from: the kernels table's size, and the count, largest
and sum of the ids of the finished runs of the kernels. A stored entry whose fingerprint no
longer matches is recomputed. Anything unexpected (no database yet, a schema to migrate, a
connection error) is a miss: the caller then takes the full path, which reports it. The key
also holds the state of the table code (:func:`code_version`): an upgraded stackbench
computes its tables afresh.
"""

from __future__ import annotations

import os
from collections import namedtuple

from stackbench.errors import StackbenchError

# typing, json and hashlib are 5 ms of a cached command's 65: none is imported for a hit
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KEY_PREFIX = "cli-"

_FINGERPRINT = (
    "(SELECT count(*) || ':' || coalesce(max(id), 0) FROM kernel_build) || '/' || "
    "(SELECT count(*) || ':' || coalesce(max(id), 0) || ':' || coalesce(sum(id), 0) FROM run "
    "WHERE status = 'done' AND build_id = ANY({ids}))"
)
_LOOKUP = (
    "SELECT (SELECT version_num FROM alembic_version), c.result -> 'cli', "
    + _FINGERPRINT.format(ids="ARRAY(SELECT jsonb_array_elements_text(c.build_ids)::int)")
    + " FROM comparison c WHERE c.key = %s"
)
# the same for libpq, with the entry's parts as text: the server hands over the stored text
# as it keeps it, and the client parses no JSON document of the size of the table. The entry
# is taken out of ``result`` once (OFFSET 0 keeps the subquery): each ``c.result -> ...``
# would read and decompress the whole stored value again, 2 ms each for a large table
_QUICK = (
    "SELECT (SELECT version_num FROM alembic_version), e ->> 'fingerprint', "
    + _FINGERPRINT.format(ids="ARRAY(SELECT jsonb_array_elements_text(c.build_ids)::int)")
    + ", e ->> 'text', e -> 'warnings' FROM (SELECT build_ids, result -> 'cli' AS e "
    "FROM comparison WHERE key = $1 OFFSET 0) c"
)


def _sha256(data: bytes) -> str:
    # the interpreter's own SHA-256 where it has one: hashlib loads OpenSSL's, 2 ms of a
    # cached command; the digest is the same
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # Python 3.12 and later
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()


# collections' namedtuples: dataclasses imports inspect (8 ms), typing.NamedTuple typing (2)
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
        # repr of str, bool, int, None and tuples is stable: no json to import for a key
        raw = repr((sorted(self._asdict().items()), code_version()))
        return KEY_PREFIX + _sha256(raw.encode())[:32]


_code: list[str] = []


def code_version() -> str:
    """The state of the code that makes the tables (results-db's modules and its tables'):
    name, size and modification time of each, so that a text kept by another version of
    stackbench is never printed by this one. A few stat calls; no module is imported."""
    if not _code:
        # os.scandir, not pathlib's glob: the quick paths call this first (0.4 ms less)
        here = os.path.dirname(os.path.realpath(__file__))
        files = []
        for folder in (here, os.path.dirname(here)):
            with os.scandir(folder) as entries:
                files += [e for e in entries if e.name.endswith(".py") and e.is_file()]
        files.sort(key=lambda e: e.path)
        _code.append(";".join(f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}" for e in files))
    return _code[0]


class Hit(namedtuple("Hit", ("text", "warnings"))):
    """A kept table (str) and its warnings (list[str])."""

    __slots__ = ()


def _url() -> str | None:
    from stackbench import config

    url = config.database_url()
    if url is None:
        from stackbench.resultsdb.embedded import Cluster

        cluster = Cluster()
        if not cluster.exists:
            return None
        url = cluster.url()
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _connect():
    import psycopg

    url = _url()
    if url is None:
        return None
    return psycopg.connect(url, connect_timeout=3, autocommit=True)


class Schema(Exception):
    """The database is not at this stackbench's revision (the full path says so)."""


def lookup(view: View, conn: Any) -> Hit | None:
    """The stored text of ``view`` when its runs are unchanged, else None. Raises
    :class:`Schema` when the database needs migrating, psycopg's errors on failures."""
    from stackbench.resultsdb import db

    row = conn.execute(_LOOKUP, (view.key,)).fetchone()
    if row is None:
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        if revision is None or revision[0] != db.head_revision():
            raise Schema()
        return None
    revision, entry, live = row
    if revision != db.head_revision():
        raise Schema()
    if not isinstance(entry, dict):
        return None
    if entry.get("fingerprint") != live or not isinstance(entry.get("text"), str):
        return None
    return Hit(entry["text"], [str(w) for w in entry.get("warnings") or []])


def quick_connect() -> Any:
    """A small client's connection to the configured database, or None (no libpq, no
    database yet, an error): the embedded cluster's owner goes over its socket
    (:mod:`stackbench.resultsdb.pgwire`, no password exchange and no library to load),
    anyone else through libpq (:mod:`stackbench.resultsdb.libpq`) with the password."""
    from stackbench import config
    from stackbench.resultsdb import pgwire

    try:
        if config.database_url() is None:
            from stackbench.resultsdb.embedded import DB_NAME, DB_USER, Cluster

            cluster = Cluster()
            socket = cluster.socket_path() if cluster.exists else None
            if socket is not None:
                try:
                    return pgwire.connect(socket, DB_USER, DB_NAME)
                except (pgwire.Error, OSError):
                    pass  # not the home's owner, or the server is down: libpq says which
        from stackbench.resultsdb import libpq

        url = _url()
        return None if url is None else libpq.connect(url)
    except (pgwire.Error, OSError, StackbenchError):
        return None


def quick_lookup(view: View, conn: Any = None) -> Hit | None:
    """:func:`lookup` through libpq alone (no psycopg to import: the whole of a cached
    command's cost is then start-up), on ``conn`` (a libpq connection) or a connection of
    its own. None on a miss and on anything unexpected (no libpq, no database yet, a schema
    to migrate, an error): the caller then takes a path that looks again and reports what
    it meets."""
    from stackbench.resultsdb import db, pgwire

    own = conn is None
    if own:
        conn = quick_connect()
        if conn is None:
            return None
    try:
        rows = conn.execute(_QUICK, [view.key])
    except (pgwire.Error, OSError):
        return None
    finally:
        if own:
            conn.close()
    if not rows or rows[0][0] != db.head_revision():
        return None
    _revision, stored, live, text, warnings = rows[0]
    if stored is None or stored != live or text is None:
        return None
    if warnings in (None, "[]"):
        return Hit(text, [])
    try:
        import json

        listed = json.loads(warnings)
    except ValueError:
        return None
    return Hit(text, [str(w) for w in listed] if isinstance(listed, list) else [])


def connect_for_lookup():
    """A psycopg connection (autocommit) to the configured database, or None."""
    try:
        return _connect()
    except Exception:
        return None


def fingerprint(conn: Any, build_ids: list[int]) -> str:
    """The fingerprint of ``build_ids``' runs now (a psycopg or SQLAlchemy connection)."""
    from stackbench.resultsdb.query import _raw

    sql = "SELECT " + _FINGERPRINT.format(ids="%s::int[]")
    return _raw(conn).execute(sql, (build_ids,)).fetchone()[0]


def store(conn: Any, view: View, build_ids: list[int], fp: str, text: str, warnings: list[str]):
    """Keep ``text`` for ``view``, made from the runs with fingerprint ``fp`` (taken before
    the text was computed, so runs added meanwhile make the entry stale, not wrong).
    ``conn``: psycopg's, SQLAlchemy's or a pgsession.Session; the caller commits."""
    import json

    from stackbench.resultsdb.query import _raw

    raw = _raw(conn)
    params = {
        "all_rows": view.all_rows,
        "suite": view.suite,
        "cli": {k: v for k, v in view._asdict().items() if k != "refs"},
    }
    # a kept table lost in a crash is computed again: its commit need not wait for the WAL
    # to reach the disk (a cold command's last wait, long when the disk is busy)
    raw.execute("SET LOCAL synchronous_commit = off")
    # the entry is built by the server: no JSON document of the table's size (600 KB for an
    # LKP --all table) is encoded here
    raw.execute(
        "INSERT INTO comparison (key, build_ids, params, result) VALUES (%s, %s::jsonb, "
        "%s::jsonb, jsonb_build_object('cli', jsonb_build_object('fingerprint', %s::text, "
        "'text', %s::text, 'warnings', %s::jsonb))) ON CONFLICT (key) DO UPDATE SET "
        "build_ids = EXCLUDED.build_ids, params = EXCLUDED.params, result = EXCLUDED.result",
        (view.key, json.dumps(build_ids), json.dumps(params), fp, text, json.dumps(warnings)),
    )
