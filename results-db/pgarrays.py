"""Binary ``int4[]``/``float8[]`` results straight into numpy, without psycopg (the CLI
reads samples through libpq alone, :mod:`stackbench.resultsdb.pgsession`). Format:
PostgreSQL's ``array_send`` (src/backend/utils/adt/arrayfuncs.c)."""

from __future__ import annotations

import struct

import numpy as np

INT4_ARRAY_OID, FLOAT8_ARRAY_OID = 1007, 1022

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
