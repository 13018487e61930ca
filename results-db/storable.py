"""What PostgreSQL refuses in any text or jsonb value, whatever the column: the NUL character,
text that is not UTF-8 (a lone surrogate, which JSON's ``\\ud800`` escapes can carry), and
the NaN and Infinity Python's JSON reader accepts but jsonb does not; beyond that, numbers no
integer or double precision column holds.
Front doors (the web's request checks, the run wire format) ask :func:`problem` first, so the
user hears which field is at fault instead of meeting a DataError from deep inside a query."""

from __future__ import annotations

import math
import re
import sys

# a tree's name is also a file name (kernels/trees/NAME.yaml) and a path of the kernel cache
TREE_NAME_MAX = 100
TREE_NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{TREE_NAME_MAX - 1}}}$"
_TREE_NAME_RE = re.compile(TREE_NAME_PATTERN)

# PostgreSQL ``integer``, the type of every id and count column
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# PostgreSQL ``double precision``: IEEE 754, as Python's float
FLOAT_MAX = sys.float_info.max


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character, which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        return f"is not valid Unicode (a lone surrogate U+{ord(bad):04X})"
    return None


def problem(value: object, where: str) -> str | None:
    """The first string (key or value) anywhere in ``value`` (JSON-like: dicts, lists,
    scalars) that cannot be stored, as ``"where.key[2]: why"``; None when all can be. The walk
    keeps its own stack: a deeply nested document is not a reason to run out of recursion."""
    stack: list[tuple[str, object]] = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            why = text_problem(v)
            if why:
                return f"{path}: {why}"
        elif isinstance(v, dict):
            for k, x in v.items():
                key = str(k)
                why = text_problem(key)
                if why:
                    return f"{path}: a key {why}"
                stack.append((f"{path}.{key}", x))
        elif isinstance(v, list | tuple):
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            return f"{path}: not a finite number: {v!r}"
    return None


def shown(value: int | float) -> str:
    """A number as a one-line error names it: at most 24 characters (``str()`` of an integer
    of over 4,300 digits even raises)."""
    if isinstance(value, int) and abs(value) >= 10**24:
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        return f"a {'negative ' if value < 0 else ''}number of about {digits} digits"
    return repr(value)[:24]


def int_problem(value: int) -> str | None:
    """Why ``value`` does not fit an integer column, or None."""
    if INT_MIN <= value <= INT_MAX:
        return None
    return f"{shown(value)} is out of range (at most {INT_MAX})"


def float_problem(value: object) -> str | None:
    """Why ``value`` is not a number a double precision column stores (not a number at all,
    NaN or infinite, or an integer beyond its range), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"not a finite number: {value!r}"
    if -FLOAT_MAX <= value <= FLOAT_MAX:
        return None
    return f"{shown(value)} is out of range (at most {FLOAT_MAX:.3g})"


def tree_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a tree, or None."""
    if _TREE_NAME_RE.fullmatch(name):
        return None
    if len(name) > TREE_NAME_MAX:
        return f"tree name longer than {TREE_NAME_MAX} characters"
    return f"tree name {name[:40]!r}: ASCII letters, digits, . _ - (a letter or digit first)"
