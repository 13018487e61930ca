"""PostgreSQL's binary wire formats for samples: int4[]/float8[] parameters and COPY rows.

Ingest is bound by formatting and parsing numbers, not by the database's inserts: text
literals cost the client a ``repr`` per value and the server a ``strtod``. The binary forms
are built with C-level ``array`` conversions and strided byte copies, so no Python code
runs per value, and the server reads the numbers as they are.

Formats: PostgreSQL's ``array_send``/``array_recv`` (src/backend/utils/adt/arrayfuncs.c) and
the COPY BINARY file layout (documentation, "COPY", "Binary Format").
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

import numpy as np
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format

INT4_OID, FLOAT8_OID = 23, 701
INT4_ARRAY_OID, FLOAT8_ARRAY_OID = 1007, 1022

_SWAP = sys.byteorder == "little"  # the wire is big-endian
_HEADER = struct.Struct(">iiiii")  # ndim, has-nulls flag, element oid, length, lower bound


def _big_endian(typecode: str, values: Sequence[float] | Sequence[int]) -> bytes:
    a = array(typecode, values)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _interleave(fields: list[tuple[bytes, int]], rows: int) -> bytearray:
    """Rows made of fixed-width fields: each field is ``(bytes, width)`` holding either one
    constant value (``len == width``) or one value per row (``len == width * rows``)."""
    row = sum(w for _, w in fields)
    out = bytearray(row * rows)
    at = 0
    for data, width in fields:
        for k in range(width):
            if len(data) == width:
                if data[k]:
                    out[at + k :: row] = data[k : k + 1] * rows
            else:
                out[at + k :: row] = data[k::width]
        at += width
    return out


def _array(oid: int, typecode: str, width: int, values: Sequence) -> bytes:
    n = len(values)
    if not n:
        return struct.pack(">iii", 0, 0, oid)
    body = _interleave([(struct.pack(">i", width), 4), (_big_endian(typecode, values), width)], n)
    return _HEADER.pack(1, 0, oid, n, 1) + body


class Int4Array(bytes):
    """An ``int4[]`` already in binary wire form."""

    @classmethod
    def of(cls, values: Sequence[int]) -> Int4Array:
        return cls(_array(INT4_OID, "i", 4, values))


class Float8Array(bytes):
    """A ``float8[]`` already in binary wire form."""

    @classmethod
    def of(cls, values: Sequence[float]) -> Float8Array:
        return cls(_array(FLOAT8_OID, "d", 8, values))


class _PassThrough(Dumper):
    format = Format.BINARY

    def dump(self, obj: bytes) -> bytes:
        return obj


class _Int4ArrayDumper(_PassThrough):
    oid = INT4_ARRAY_OID


class _Float8ArrayDumper(_PassThrough):
    oid = FLOAT8_ARRAY_OID


def register(conn) -> None:
    """Teach a psycopg connection to send the array classes above as they are."""
    conn.adapters.register_dumper(Int4Array, _Int4ArrayDumper)
    conn.adapters.register_dumper(Float8Array, _Float8ArrayDumper)


COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)


def copy_rows(run_id: int, metric_ids: Sequence[int], seqs: Sequence[int], values) -> bytes:
    """COPY BINARY rows ``(run_id int4, metric_id int4, seq int4, value float8)``, without
    the stream's header and trailer."""
    n = len(values)
    four, eight = struct.pack(">i", 4), struct.pack(">i", 8)
    return bytes(
        _interleave(
            [
                (struct.pack(">h", 4), 2),
                (four, 4),
                (struct.pack(">i", run_id), 4),
                (four, 4),
                (_big_endian("i", metric_ids), 4),
                (four, 4),
                (_big_endian("i", seqs), 4),
                (eight, 4),
                (_big_endian("d", values), 8),
            ],
            n,
        )
    )


# -- reading arrays back: binary int4[]/float8[] results straight into numpy -------------


_ELEMENT = {
    INT4_ARRAY_OID: np.dtype([("len", ">i4"), ("v", ">i4")]),
    FLOAT8_ARRAY_OID: np.dtype([("len", ">i4"), ("v", ">f8")]),
}
_NATIVE = {INT4_ARRAY_OID: np.int64, FLOAT8_ARRAY_OID: np.float64}


def array_from_wire(oid: int, data: bytes | memoryview) -> np.ndarray:
    """A one-dimensional ``int4[]``/``float8[]`` without NULLs in binary wire form, as a
    numpy array (int64 or float64), with no Python object per element."""
    ndim, has_nulls, _elem = struct.unpack_from(">iii", data, 0)
    if ndim == 0:
        return np.zeros(0, dtype=_NATIVE[oid])
    if ndim != 1 or has_nulls:
        raise ValueError("only one-dimensional arrays without NULLs are read as numpy arrays")
    n = struct.unpack_from(">i", data, 12)[0]
    rows = np.frombuffer(data, dtype=_ELEMENT[oid], count=n, offset=20)
    return rows["v"].astype(_NATIVE[oid])


class _ArrayLoader(Loader):
    format = Format.BINARY
    oid = 0

    def load(self, data) -> np.ndarray:
        return array_from_wire(self.oid, data)


class _Int4ArrayLoader(_ArrayLoader):
    oid = INT4_ARRAY_OID


class _Float8ArrayLoader(_ArrayLoader):
    oid = FLOAT8_ARRAY_OID


def register_numpy_loaders(ctx) -> None:
    """Make a psycopg connection or cursor return binary ``int4[]``/``float8[]`` results
    as numpy arrays."""
    ctx.adapters.register_loader(INT4_ARRAY_OID, _Int4ArrayLoader)
    ctx.adapters.register_loader(FLOAT8_ARRAY_OID, _Float8ArrayLoader)
