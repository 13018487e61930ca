"""The part of psycopg's connection interface the comparison tables use, over libpq alone.

``stackbench compare`` computing a table paid 0.15-0.2 s to import psycopg (asyncio, ssl,
its adapters), as much as reading and rendering the LKP data set of issue 16. The tables
need little of it: ``execute`` with ``%s``/``%(name)s`` parameters, rows of ints, floats,
strings, booleans and JSON, one binary query for the samples, and transactions. This module
does that over :mod:`stackbench.resultsdb.libpq` (ctypes) or, on the embedded cluster's
socket, :mod:`stackbench.resultsdb.pgwire`. A value or type it does not handle raises
:class:`Unsupported` (a :class:`pgwire.Error`, which both clients raise), so the caller can
take the psycopg path instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from stackbench.resultsdb import pgwire

# typing costs a quick command 4 ms; Any is only named in annotations
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Unsupported(pgwire.Error):
    """A parameter or result type this small client does not convert."""


_MISSING = object()
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")


def _text(value: Any) -> str | None:
    """A parameter in PostgreSQL's text form (the server infers its type from the SQL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float | str):
        return str(value) if not isinstance(value, float) else _float(value)
    if isinstance(value, list | tuple):
        return "{" + ",".join(_element(v) for v in value) + "}"
    raise Unsupported(f"parameter of type {type(value).__name__}")


def _float(x: float) -> str:
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def _element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple | bytes | dict):
        raise Unsupported("nested array parameter")
    text = _text(value)
    assert text is not None
    return text


def convert(sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> tuple[str, list]:
    """psycopg's placeholders as libpq's ``$n``, and the parameters as text in that order."""
    out: list[str | None] = []
    named: dict[str, int] = {}
    position = iter(params) if isinstance(params, Sequence) else iter(())

    def sub(m: re.Match) -> str:
        if m.group(0) == "%%":
            return "%"
        name = m.group(1)
        if name is None:
            value = next(position, _MISSING)
            if value is _MISSING:
                raise Unsupported("fewer parameters than placeholders")
            out.append(_text(value))
            return f"${len(out)}"
        if not isinstance(params, Mapping):
            raise Unsupported("named placeholder without a mapping of parameters")
        if name not in named:
            out.append(_text(params[name]))
            named[name] = len(out)
        return f"${named[name]}"

    return _PLACEHOLDER.sub(sub, sql) if params is not None else sql, out


def _int_array(text: str) -> list[int]:
    return [int(x) for x in text[1:-1].split(",")] if text != "{}" else []


def _json(text: str) -> object:
    import json  # only for a json column: 1.4 ms of a command that reads none

    return json.loads(text)


_READERS = {
    16: lambda v: v == "t",
    20: int,
    21: int,
    23: int,
    26: int,
    700: float,
    701: float,
    18: str,
    19: str,
    25: str,
    1042: str,
    1043: str,
    114: _json,
    3802: _json,
    1007: _int_array,
    1016: _int_array,
}


class Result:
    """Rows of one statement, typed as psycopg types them."""

    def __init__(self, rows: list[tuple]) -> None:
        self._rows = rows

    def fetchall(self) -> list[tuple]:
        return self._rows

    def fetchone(self) -> tuple | None:
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._rows)


class Session:
    """One libpq or pgwire connection in autocommit mode, used as a psycopg connection."""

    def __init__(self, conn: pgwire.Client) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Result:
        text, values = convert(sql, params)
        oids, rows = self.conn.query(text, values)
        readers = []
        for oid in oids:
            reader = _READERS.get(oid)
            if reader is None:
                raise Unsupported(f"result column of type oid {oid}")
            readers.append(reader)
        return Result(
            [
                tuple(None if v is None else f(v) for f, v in zip(readers, row, strict=True))
                for row in rows
            ]
        )

    def binary(self, sql: str, params: Sequence[Any]) -> tuple[list[int], list[tuple]]:
        """Rows in PostgreSQL's binary forms (bytes per value), with the columns' oids."""
        text, values = convert(sql, params)
        return self.conn.query(text, values, binary=True)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        self.conn.query("BEGIN")
        try:
            yield self
        except BaseException:
            self.conn.query("ROLLBACK")
            raise
        self.conn.query("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
