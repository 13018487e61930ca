"""The smallest PostgreSQL client: libpq through ctypes, for one text query and its rows.

Importing psycopg costs a fifth of a second (it pulls in asyncio, ssl and its adapters),
more than everything else a cached ``stackbench compare`` does. The CLI's lookup of a kept
table is one query with text parameters and text results, which libpq (PostgreSQL's own
client library, installed with the server) does by itself. Everything else goes through
psycopg; where libpq cannot be loaded, :func:`connect` returns None and the caller uses
psycopg as before.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

# one error type for both small clients (this and pgwire), so that callers catch either
from stackbench.resultsdb.pgwire import Client, Error

_CONNECTION_OK = 0
_PGRES_COMMAND_OK = 1
_PGRES_TUPLES_OK = 2
_lib: list[ctypes.CDLL | None] = []


def _load() -> ctypes.CDLL | None:
    if not _lib:
        try:
            # by its soname: ctypes.util.find_library would run ldconfig in a subprocess
            lib = ctypes.CDLL("libpq.so.5")
        except OSError:
            lib = None
        if lib is not None:
            lib.PQconnectdb.restype = ctypes.c_void_p
            lib.PQconnectdb.argtypes = [ctypes.c_char_p]
            lib.PQstatus.argtypes = [ctypes.c_void_p]
            lib.PQerrorMessage.restype = ctypes.c_char_p
            lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
            lib.PQfinish.argtypes = [ctypes.c_void_p]
            lib.PQexecParams.restype = ctypes.c_void_p
            lib.PQexecParams.argtypes = [
                ctypes.c_void_p,
                ctypes.c_char_p,
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_int,
            ]
            lib.PQresultStatus.argtypes = [ctypes.c_void_p]
            lib.PQresultErrorMessage.restype = ctypes.c_char_p
            lib.PQresultErrorMessage.argtypes = [ctypes.c_void_p]
            lib.PQntuples.argtypes = [ctypes.c_void_p]
            lib.PQnfields.argtypes = [ctypes.c_void_p]
            lib.PQgetisnull.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            lib.PQgetvalue.restype = ctypes.c_char_p
            lib.PQgetvalue.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            lib.PQclear.argtypes = [ctypes.c_void_p]
            lib.PQftype.restype = ctypes.c_uint
            lib.PQftype.argtypes = [ctypes.c_void_p, ctypes.c_int]
            lib.PQgetlength.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        _lib.append(lib)
    return _lib[0]


class Connection(Client):
    """One libpq connection."""

    def __init__(self, lib: ctypes.CDLL, handle: int) -> None:
        self._lib = lib
        self._handle: int | None = handle

    def query(
        self, sql: str, params: Sequence[str | None] = (), binary: bool = False
    ) -> tuple[list[int], list[tuple]]:
        lib = self._lib
        values = (ctypes.c_char_p * max(len(params), 1))(
            *[None if p is None else p.encode() for p in params]
        )
        res = lib.PQexecParams(
            self._handle, sql.encode(), len(params), None, values, None, None, int(binary)
        )
        if not res:
            raise Error(lib.PQerrorMessage(self._handle).decode(errors="replace").strip())
        try:
            status = lib.PQresultStatus(res)
            if status == _PGRES_COMMAND_OK:
                return [], []
            if status != _PGRES_TUPLES_OK:
                raise Error(lib.PQresultErrorMessage(res).decode(errors="replace").strip())
            cols = range(lib.PQnfields(res))
            oids = [lib.PQftype(res, c) for c in cols]
            if binary:
                # c_char_p stops at the first NUL byte: binary values are read by length
                raw = lib["PQgetvalue"]
                raw.restype = ctypes.c_void_p
                raw.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
                isnull, length, at = lib.PQgetisnull, lib.PQgetlength, ctypes.string_at
                rows = [
                    tuple(
                        None if isnull(res, r, c) else at(raw(res, r, c), length(res, r, c))
                        for c in cols
                    )
                    for r in range(lib.PQntuples(res))
                ]
                return oids, rows
            rows = [
                tuple(
                    None if lib.PQgetisnull(res, r, c) else lib.PQgetvalue(res, r, c).decode()
                    for c in cols
                )
                for r in range(lib.PQntuples(res))
            ]
            return oids, rows
        finally:
            lib.PQclear(res)

    def close(self) -> None:
        if self._handle is not None:
            self._lib.PQfinish(self._handle)
            self._handle = None


def connect(url: str, timeout: int = 3) -> Connection | None:
    """A connection to ``url`` (a postgresql:// URL), None when libpq is not installed.
    Raises :class:`Error` when the server refuses or cannot be reached."""
    lib = _load()
    if lib is None:
        return None
    sep = "&" if "?" in url else "?"
    handle = lib.PQconnectdb(f"{url}{sep}connect_timeout={timeout}".encode())
    if not handle:
        raise Error("out of memory")
    if lib.PQstatus(handle) != _CONNECTION_OK:
        msg = lib.PQerrorMessage(handle).decode(errors="replace").strip()
        lib.PQfinish(handle)
        raise Error(msg.splitlines()[0] if msg else "cannot connect")
    return Connection(lib, handle)
