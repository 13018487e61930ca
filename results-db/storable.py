"""What PostgreSQL refuses in any text or jsonb value, whatever the column: the NUL character
and text that is not UTF-8 (a lone surrogate, which JSON's ``\\ud800`` escapes can carry).
Front doors (the web's request checks, the run wire format) ask :func:`problem` first, so the
user hears which field is at fault instead of meeting a DataError from deep inside a query."""

from __future__ import annotations

# PostgreSQL ``integer``, the type of every id and count column
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


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
    return None


def int_problem(value: int) -> str | None:
    """Why ``value`` does not fit an integer column, or None."""
    if INT_MIN <= value <= INT_MAX:
        return None
    shown = str(value) if len(str(value)) <= 24 else str(value)[:20] + "..."
    return f"{shown} is out of range (at most {INT_MAX})"
