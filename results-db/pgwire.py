"""PostgreSQL's frontend/backend protocol (version 3) over a Unix socket, in plain Python.

The quick paths of ``stackbench compare`` reach the embedded cluster over its owner's socket,
where the server knows the client by its process's user (peer authentication): nothing is
left for a client library to do but frame messages. libpq through ctypes costs 5-6 ms to load
(ctypes, then libpq with OpenSSL, GSSAPI and LDAP); this module costs a fraction of a
millisecond, a tenth of a 50 ms command. It offers what :mod:`libpq` offers (one statement
with text parameters, rows as text or binary values) and nothing more: a server that asks
for a password, or anything past a socket, is libpq's (see textcache.quick_connect).

Message layouts: PostgreSQL documentation, "Frontend/Backend Protocol", chapter 55 of the
PostgreSQL 15 manual (sections 55.2 "Message Flow" and 55.7 "Message Formats").
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

try:
    # the C socket alone: socket.py adds enums and selectors over it, 2.5 ms to import
    from _socket import AF_UNIX, SOCK_STREAM
    from _socket import socket as _Socket
except ImportError:  # an interpreter without CPython's module
    from socket import AF_UNIX, SOCK_STREAM
    from socket import socket as _Socket

_PROTOCOL = 196608  # 3.0
_NULL = b"\xff\xff\xff\xff"
_SYNC = b"S\x00\x00\x00\x04"
_TERMINATE = b"X\x00\x00\x00\x04"
# Describe the unnamed portal, Execute it for all its rows, then Sync
_DESCRIBE_EXECUTE_SYNC = (
    b"D\x00\x00\x00\x06P\x00" + b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00" + _SYNC
)


class Error(Exception):
    """A failed connection or statement (the server's message), for this client and libpq's."""


def connect(path: str, user: str, database: str, timeout: float = 3.0) -> Connection:
    """A connection over the socket at ``path``, which the server must accept without a
    password. Raises :class:`Error` when it asks for one or refuses, OSError when there is
    no server there."""
    sock = _Socket(AF_UNIX, SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        body = b"".join(
            _cstring(s) for s in ("user", user, "database", database, "client_encoding", "UTF8")
        )
        body += b"\x00"
        sock.sendall(_int32(len(body) + 8) + _int32(_PROTOCOL) + body)
        conn = Connection(sock)
        conn._startup()
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)  # as libpq: a statement takes as long as it takes
    return conn


class Client:
    """What both small clients offer (this module's :class:`Connection` and libpq's): one
    statement at a time; rows as tuples of str (bytes with ``binary``; None for NULL)."""

    def execute(self, sql: str, params: Sequence[str | None] = ()) -> list[tuple[str | None, ...]]:
        """Run ``sql`` with ``$1``-style text parameters; raises :class:`Error`."""
        return self.query(sql, params)[1]

    def query(
        self, sql: str, params: Sequence[str | None] = (), binary: bool = False
    ) -> tuple[list[int], list[tuple]]:
        """Run ``sql`` with ``$1``-style text parameters: the columns' type oids and the rows,
        values as str (bytes in PostgreSQL's binary forms with ``binary``; None for NULL).
        A command without rows gives no columns and no rows. Raises :class:`Error`."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Connection(Client):
    """One connection over a socket."""

    def __init__(self, sock: _Socket) -> None:
        self._sock: _Socket | None = sock
        self._buf = bytearray()

    def query(
        self, sql: str, params: Sequence[str | None] = (), binary: bool = False
    ) -> tuple[list[int], list[tuple]]:
        if self._sock is None:
            raise Error("the connection is closed")
        parse = _cstring("") + _cstring(sql) + b"\x00\x00"
        values = [_NULL if p is None else _sized(p.encode()) for p in params]
        bind = b"".join([b"\x00\x00\x00\x00", len(params).to_bytes(2, "big"), *values, b"\x00\x01"])
        bind += b"\x00\x01" if binary else b"\x00\x00"
        self._send(b"P" + _int32(len(parse) + 4) + parse + b"B" + _int32(len(bind) + 4) + bind)
        self._send(_DESCRIBE_EXECUTE_SYNC)
        oids: list[int] = []
        rows: list[tuple] = []
        failure = None
        while True:
            kind, body = self._message()
            if kind == b"D":
                rows.append(_row(body, binary))
            elif kind == b"T":
                oids = _oids(body)
            elif kind == b"E":
                failure = _failure(body)
            elif kind == b"Z":
                break
            # ParseComplete, BindComplete, NoData, CommandComplete, notices: nothing to keep
        if failure is not None:
            raise Error(failure)
        return oids, rows

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # a server gone already needs no goodbye
                self._sock.sendall(_TERMINATE)
            self._sock.close()
            self._sock = None

    def _startup(self) -> None:
        while True:
            kind, body = self._message()
            if kind == b"R" and body[:4] != b"\x00\x00\x00\x00":
                raise Error("the server asks for a password on its socket")
            if kind == b"E":  # the server closes the connection after a startup error
                raise Error(_failure(body))
            if kind == b"Z":
                return

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise Error(f"lost the connection to the server: {exc}") from None

    def _message(self) -> tuple[bytes, bytes]:
        """The next message's type and body, read from the socket as needed."""
        buf = self._buf
        while len(buf) < 5 or len(buf) < 1 + int.from_bytes(buf[1:5], "big"):
            want = 5 if len(buf) < 5 else 1 + int.from_bytes(buf[1:5], "big") - len(buf)
            try:
                chunk = self._sock.recv(max(want, 1 << 16))
            except OSError as exc:
                raise Error(f"lost the connection to the server: {exc}") from None
            if not chunk:
                raise Error("the server closed the connection")
            buf += chunk
        end = 1 + int.from_bytes(buf[1:5], "big")
        kind, body = bytes(buf[:1]), bytes(memoryview(buf)[5:end])
        del buf[:end]
        return kind, body


def _int32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def _cstring(s: str) -> bytes:
    return s.encode() + b"\x00"


def _sized(data: bytes) -> bytes:
    return _int32(len(data)) + data


def _oids(body: bytes) -> list[int]:
    """The type oids of a RowDescription's fields."""
    oids = []
    at = 2
    for _ in range(int.from_bytes(body[:2], "big")):
        at = body.index(b"\x00", at) + 1 + 6  # name, table oid, column number
        oids.append(int.from_bytes(body[at : at + 4], "big"))
        at += 12  # type oid, size, modifier, format
    return oids


def _row(body: bytes, binary: bool) -> tuple:
    values: list[object] = []
    at = 2
    for _ in range(int.from_bytes(body[:2], "big")):
        size = int.from_bytes(body[at : at + 4], "big", signed=True)
        at += 4
        if size < 0:
            values.append(None)
            continue
        raw = body[at : at + size]
        values.append(raw if binary else raw.decode())
        at += size
    return tuple(values)


def _failure(body: bytes) -> str:
    """An ErrorResponse as libpq's first line of it: ``SEVERITY:  message``."""
    fields = {}
    for part in body.split(b"\x00"):
        if part:
            fields[part[:1]] = part[1:].decode(errors="replace")
    return f"{fields.get(b'S', 'ERROR')}:  {fields.get(b'M', 'unknown error')}"
