"""Header values of patch mails made safe to store, show and reuse in mail headers:
RFC 2047 words decoded, folding unfolded, no control characters; addresses reduced to one
plain ``local@domain``. Used by :mod:`stackbench.patches.parser` (which re-exports them)
and by the mailer."""

from __future__ import annotations

import email.errors
import email.header
import email.utils
import re

_PREFIX_GROUP = re.compile(r"^\s*\[([^\[\]]*)\]\s*")
REPLY = re.compile(r"^\s*(re|aw|fwd?|sv)\s*(\[\d+\])?\s*:", re.IGNORECASE)
MSGID = re.compile(r"<[^<>\s]+>")
_NAME_ADDR = re.compile(r"^(.*?)\s*<([^<>\s]+@[^<>\s]+)>\s*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
# one addr-spec, without the RFC 5322 specials that would make it a list or a route
# ("a,evil@x" is two addresses to an MTA); quoted local parts are not accepted
_ADDR_SPEC = re.compile(r"[^\s<>()\[\]\\,;:@\"]+@[^\s<>()\[\]\\,;:@\"]+")


def clean_header(value: object) -> str:
    """A header as one line of text: RFC 2047 words decoded, folding and any control
    characters (CR/LF included, even when they were hidden in an encoded word) replaced by
    spaces, runs of whitespace collapsed."""
    if value is None:
        return ""
    if isinstance(value, email.header.Header):
        raw = str(value)
    else:
        raw = str(value)
    try:
        text = str(email.header.make_header(email.header.decode_header(raw)))
    except (LookupError, ValueError, UnicodeError, email.errors.MessageError):
        # MessageError: HeaderParseError and CharsetError (a charset name that is not ASCII)
        text = raw
    # CR/LF hidden in an encoded word must not survive into anything that is later put in
    # a mail header or a log line
    text = _CONTROL.sub(" ", text)
    return " ".join(text.split())


def clean_subject(subject: str) -> tuple[str, list[str]]:
    """The subject without ``Re:`` and bracketed prefixes, and the prefix words found
    (``[RFC PATCH v3 2/5]`` -> ``["RFC", "PATCH", "v3", "2/5"]``)."""
    text = clean_header(subject)
    words: list[str] = []
    while True:
        m = REPLY.match(text)
        if m:
            text = text[m.end() :]
            continue
        m = _PREFIX_GROUP.match(text)
        if not m:
            break
        words.extend(w for w in re.split(r"[\s,]+", m.group(1)) if w)
        text = text[m.end() :]
    return text.strip(), words


# RFC 5322 lines are at most 998 octets: a ``<id>`` alone on a folded line (after one
# space) fits when it has at most 997. A longer one is refused, never cut: a cut id names
# another mail (or none), and a thread or a reply made from it lands elsewhere.
MAX_MSGID = 997


def msgid_too_long(msgid: str) -> str:
    """Why ``msgid`` cannot be kept whole; empty when it can."""
    size = len(msgid.encode("utf-8", errors="replace"))
    if size <= MAX_MSGID:
        return ""
    return f"an id of {size} characters; at most {MAX_MSGID} fit on a mail header line"


def clean_msgid(value: object) -> str | None:
    """The first ``<id@host>`` of a Message-ID / In-Reply-To header, whole, or None (also
    for one longer than :data:`MAX_MSGID`)."""
    text = clean_header(value)
    m = MSGID.search(text)
    if m:
        found = m.group(0)
    else:
        text = text.strip()
        # some mailers drop the angle brackets; keep such ids if they look like one
        if not text or " " in text or "@" not in text or "<" in text or ">" in text:
            return None
        found = f"<{text}>"
    return None if msgid_too_long(found) else found


def clean_address(value: object) -> tuple[str, str]:
    """(name, email) of a From header; names are decoded, both are single-line."""
    raw = " ".join(_CONTROL.sub(" ", str(value or "")).split())
    m = _NAME_ADDR.match(raw)
    if m:
        # "Name <addr>": split before decoding, as a decoded name may hold ':' ',' '<'
        name = clean_header(m.group(1)).strip().strip('"').replace('\\"', '"').strip()
        addr = clean_header(m.group(2))
    else:
        name, addr = email.utils.parseaddr(raw)
        name = clean_header(name)
        addr = clean_header(addr)
    if not is_mail_address(addr):
        # an unparsable address: keep what was there as the name rather than invent one
        return clean_header(raw), ""
    if not name:
        name = addr.split("@", 1)[0]
    return name, addr


def is_mail_address(addr: str) -> bool:
    """True for one plain ``local@domain`` address that is safe in a To: header."""
    return len(addr) <= 254 and _ADDR_SPEC.fullmatch(addr) is not None


def clean_date(value: object) -> str:
    """ISO 8601 when the Date header parses, else the cleaned header text."""
    text = clean_header(value)
    if not text:
        return ""
    try:
        return email.utils.parsedate_to_datetime(text).isoformat()
    except (TypeError, ValueError, IndexError, OverflowError):
        return text
