"""Header values built from patch data (subjects, names) must never carry a line break:
a subject like ``x\\r\\nBcc: someone`` would otherwise add a header."""

from __future__ import annotations

import re

from stackbench.errors import InputError
from stackbench.patches.mailheaders import is_mail_address

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def clean_header(value: str, limit: int = 900) -> str:
    """One line: control characters (CR, LF, TAB...) become single spaces."""
    return _CONTROL.sub(" ", value).strip()[:limit]


def clean_address(value: str) -> str:
    """An address or ``Name <addr>``; anything with a control character or a second
    address separator is refused (an :class:`InputError`, one line for the CLI) rather
    than repaired."""
    value = value.strip()
    m = re.fullmatch(r"[^<>]*<([^<>]*)>", value)
    addr = m.group(1) if m else value
    if (
        _CONTROL.search(value)
        or value.count("@") != 1
        or "," in value
        or ";" in value
        or not is_mail_address(addr)
    ):
        raise InputError("mail address", f"not a single mail address: {value[:120]!r}")
    return value
