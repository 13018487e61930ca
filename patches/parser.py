"""Mail parsing for patch series: the output of ``git format-patch`` and ``git send-email``,
saved mailboxes and lore.kernel.org mboxrd downloads.

Structured the way patchwork's parser is: ``find_*`` helpers locate a piece of a mail,
``parse_*`` helpers interpret it, ``clean_*`` helpers (in :mod:`.mailheaders`) make a
header value safe to store, show and reuse in mail headers (decoded RFC 2047, unfolded, no
control characters). Every failure is an :class:`InputError` naming the source and what is
wrong, on one line.
"""

from __future__ import annotations

import codecs
import email
import email.message
import email.policy
import hashlib
import re
from dataclasses import dataclass, field

from stackbench.errors import InputError
from stackbench.patches.diffparse import find_diff_start, parse_diff
from stackbench.patches.mailheaders import (  # noqa: F401 - re-exported, parser's API
    MSGID,
    REPLY,
    clean_address,
    clean_date,
    clean_header,
    clean_msgid,
    clean_subject,
    is_mail_address,
    msgid_too_long,
)

# uploads are size-limited at the web layer too; this keeps the CLI and the hook honest
MAX_MBOX_BYTES = 64 * 1024 * 1024
MAX_PATCHES = 500
# larger counters or versions are refused before anything is sized by them; the digit
# bound also keeps int() far below Python's conversion limit
MAX_VERSION = 10000
_MAX_DIGITS = 9

# mbox separator lines as git mailsplit accepts them: "From <addr-or-sha> <asctime date>"
_FROM_LINE = re.compile(
    rb"^From \S+ +(?:[A-Z][a-z]{2} ){2}[ \d]?\d \d\d:\d\d(?::\d\d)?(?: [+-]?\w+)? \d{4}\s*$"
)
_HEADER_LINE = re.compile(rb"^[!-9;-~]+:[ \t]?")
# git mailinfo follows 5 nested multiparts; a patch mail needs one or two. The email package
# recurses once per level, so a deeper mail is refused before it is parsed.
MAX_MULTIPARTS = 16
_MULTIPART = re.compile(
    rb"^content-type:[ \t]*(?:multipart|message)/", re.IGNORECASE | re.MULTILINE
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_COUNTER = re.compile(r"^0*(\d+)/0*(\d+)$")
_VERSION = re.compile(r"^v(\d+)$", re.IGNORECASE)
_BASE_COMMIT = re.compile(r"^base-commit:\s*([0-9a-f]{7,64})\s*$", re.MULTILINE)


@dataclass
class ParsedPatch:
    idx: int
    total: int
    subject: str
    author: str
    author_email: str
    date: str
    message_id: str | None
    in_reply_to: str | None
    body: str
    diff: str
    raw: bytes
    # set by git-push intake, where each patch already is a commit
    commit_sha: str | None = None
    # the diff in the bytes of its mail part (``diff`` shows U+FFFD where those bytes are
    # not text in the declared charset); empty: ``diff`` as UTF-8
    diff_raw: bytes = b""

    def diff_bytes(self) -> bytes:
        """The shown diff as the bytes ``git am`` is to apply for it."""
        return self.diff_raw or self.diff.encode("utf-8", errors="replace")


@dataclass
class ParsedSeries:
    title: str
    version: int
    cover_letter: str
    message_id: str | None
    in_reply_to: str | None
    base_commit: str | None
    submitter: str
    submitter_email: str
    patches: list[ParsedPatch]
    rfc: bool = False
    # subjects of mails that were not part of the series (replies, notes) and were skipped
    ignored: list[str] = field(default_factory=list)

    def content_hash(self) -> str:
        """A digest of the patches themselves: two series with one Message-ID but other
        patches are two series."""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(f"{p.idx}/{p.total}\0{p.subject}\0{p.author_email}\0".encode())
            h.update(p.body.encode(errors="replace") + b"\0")
            h.update(p.diff.encode(errors="replace"))
            h.update(b"\0")
        return h.hexdigest()


@dataclass
class _Mail:
    """One mail of the mbox, with what the series checks need."""

    position: int
    raw: bytes
    msg: email.message.Message
    subject: str
    is_reply: bool
    counter: tuple[int, int] | None
    version: int
    rfc: bool
    tagged: bool  # [PATCH ...] or [RFC ...] in the subject
    text: str  # as shown: U+FFFD where the bytes are not text in their charset
    raw_text: str  # those bytes kept as lone surrogates (surrogateescape), for diff_raw
    codec: str  # of the part the diff is in


# ---------------------------------------------------------------- find_*


def find_mails(data: bytes, source: str) -> list[bytes]:
    """Split an mbox (mboxo or mboxrd) into mails; a lone RFC 822 mail is one mail.

    A separator line is a ``From `` line after a blank line. One without the blank line
    before it is refused: ``git am`` would split the mail there, and the commit made from
    the second half would not be the patch that is shown."""
    if not data.strip():
        raise InputError(source, "empty input: expected an mbox with patches")
    if len(data) > MAX_MBOX_BYTES:
        raise InputError(source, f"mbox larger than {MAX_MBOX_BYTES // (1024 * 1024)} MiB")
    data = data.replace(b"\r\n", b"\n")
    lines = data.split(b"\n")
    skipped = 0
    while lines and not lines[0].strip():
        lines.pop(0)
        skipped += 1
    if not lines:
        raise InputError(source, "empty input: expected an mbox with patches")
    if not _FROM_LINE.match(lines[0]) and not _HEADER_LINE.match(lines[0]):
        raise InputError(source, "not an mbox: no 'From ' separator line and no mail headers")
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise InputError(source, f"NUL byte on line {line}: an mbox is text")
    mboxrd = lines[0].startswith(b"From mboxrd@z ")
    mails: list[list[bytes]] = [[]]
    prev_blank = True
    for number, line in enumerate(lines, start=skipped + 1):
        if _FROM_LINE.match(line):
            if not prev_blank:
                shown = _short(line.decode(errors="replace"), 80)
                raise InputError(
                    source,
                    f"line {number} {shown!r} is an mbox separator inside a mail (no blank "
                    "line before it): git am would split the mail there; quote it as "
                    "'>From ' or put a blank line before it",
                )
            if mails[-1]:
                mails.append([])
        elif mboxrd and re.match(rb"^>+From ", line):
            line = line[1:]
        mails[-1].append(line)
        prev_blank = not line.strip()
    return [b"\n".join(m).rstrip(b"\n") + b"\n" for m in mails]


def join_mboxrd(mails: list[bytes]) -> bytes:
    """Mails as one mboxrd (what :func:`find_mails` splits again): a ``From mboxrd@z``
    line before each, ``>`` before body lines that start with ``>*From ``."""
    out: list[bytes] = []
    for raw in mails:
        out.append(b"From mboxrd@z Thu Jan  1 00:00:00 1970")
        lines = raw.replace(b"\r\n", b"\n").rstrip(b"\n").split(b"\n")
        if lines and lines[0].startswith(b"From "):
            lines = lines[1:]  # an mbox separator kept with the mail, not a header
        for line in lines:
            out.append(b">" + line if re.match(rb"^>*From ", line) else line)
        out.append(b"")
    return b"\n".join(out)


def find_text(msg: email.message.Message, where: str = "<mail>") -> tuple[str, str]:
    """The text of a mail (its text/plain parts and patch attachments, decoded) and the
    codec of the part its diff starts in.

    ``git am`` reads every part of a mail, whatever its type: a diff in a part that is not
    shown (HTML, an octet-stream attachment) is refused rather than applied unseen, and so is
    a NUL byte, which no patch mail carries and no text column stores."""
    chunks: list[str] = []
    codec = "utf-8"
    has_diff = False
    parts = msg.walk() if msg.is_multipart() else [msg]
    for part in parts:
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        text, part_codec = _decode(payload, part)
        text = text.replace("\r\n", "\n")
        diff_here = find_diff_start(text.split("\n")) is not None
        # patches come inline or as text/x-patch, text/x-diff... attachments
        if ctype != "text/plain" and not ctype.startswith(("text/x-", "application/x-patch")):
            if diff_here:
                raise InputError(
                    where, f"a diff in a {ctype} part, which is not shown: send it inline"
                )
            continue
        if "\0" in text:
            raise InputError(where, "a NUL byte in its decoded text: a patch mail is text")
        if diff_here and not has_diff:
            codec, has_diff = part_codec, True
        chunks.append(text)
    return "\n".join(chunks), codec


def _decode(payload: bytes, part: email.message.Message) -> tuple[str, str]:
    """The payload as text in its declared charset, else UTF-8, and the codec used; bytes
    that are not text in it become lone surrogates (surrogateescape), so the diff's own
    bytes can be had back.

    A mail names any codec Python has, and some (idna, punycode, the bytes-to-bytes ones)
    raise whatever they like on arbitrary bytes even with errors="replace"."""
    try:
        charset = part.get_content_charset() or "utf-8"
        info = codecs.lookup(charset)
        if info._is_text_encoding:
            try:
                return payload.decode(charset, errors="surrogateescape"), info.name
            except UnicodeError:  # bytes below 0x80 that the codec refuses
                return payload.decode(charset, errors="replace"), info.name
    except Exception:  # noqa: BLE001 - any codec failure means: fall back to UTF-8
        pass
    return payload.decode("utf-8", errors="surrogateescape"), "utf-8"


def _diff_bytes(mail: _Mail) -> bytes:
    """The patch's diff in the bytes of its mail part: what git applies for it."""
    diff = parse_body(mail.raw_text)[1]
    try:
        return diff.encode(mail.codec, errors="surrogateescape")
    except (UnicodeError, LookupError, ValueError):
        return diff.encode(mail.codec, errors="replace")


def find_base_commit(text: str) -> str | None:
    m = _BASE_COMMIT.search(text)
    return m.group(1) if m else None


# ---------------------------------------------------------------- parse_*


def parse_prefix(
    words: list[str], source: str = "<mbox>"
) -> tuple[tuple[int, int] | None, int, bool, bool]:
    """(counter, version, rfc, is_patch) from the subject's prefix words; a counter beyond
    :data:`MAX_PATCHES` or a version beyond :data:`MAX_VERSION` is refused."""
    counter = None
    version = 1
    rfc = False
    is_patch = False
    for w in words:
        up = w.upper()
        m = _COUNTER.match(w)
        if m:
            idx, total = (
                _bounded(source, m.group(1), "patch number"),
                _bounded(source, m.group(2), "series length"),
            )
            if total > MAX_PATCHES:
                raise InputError(source, f"series of {total} patches: at most {MAX_PATCHES}")
            counter = (idx, total)
        elif _VERSION.match(w):
            version = _bounded(source, w[1:], "version")
            if version > MAX_VERSION:
                raise InputError(source, f"version v{version}: at most v{MAX_VERSION}")
        elif up == "RFC":
            rfc = True
            is_patch = True
        elif up.startswith("PATCH"):
            is_patch = True
    return counter, version, rfc, is_patch


def _bounded(source: str, digits: str, what: str) -> int:
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        raise InputError(source, f"{what} {_short(digits, 20)} is too large")
    return int(digits)


def parse_body(text: str) -> tuple[str, str, str]:
    """(commit message, diff, text after the diff) of a patch mail's text."""
    lines = text.split("\n")
    start = find_diff_start(lines)
    if start is None:
        return _strip_signature(text).strip("\n"), "", ""
    # git mailinfo ends the message at the first "---" line (diffstat follows)
    end = start
    for i in range(start):
        if lines[i].rstrip() == "---":
            end = i
            break
    message = "\n".join(lines[:end]).strip("\n")
    diff, after = parse_diff(lines, start)
    trailer = "\n".join(lines[after:])
    return message, diff, trailer


def _strip_signature(text: str) -> str:
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] == "-- ":
            return "\n".join(lines[:i])
    return text


def parse_mail(raw: bytes, position: int, source: str = "<mbox>") -> _Mail:
    where = f"{source}: mail {position + 1}"
    multiparts = len(_MULTIPART.findall(raw))
    if multiparts > MAX_MULTIPARTS:
        raise InputError(
            where, f"{multiparts} multipart or message/rfc822 MIME parts: at most {MAX_MULTIPARTS}"
        )
    try:
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        subject_raw = msg.get("Subject", "")
        is_reply = bool(REPLY.match(clean_header(subject_raw)))
        subject, words = clean_subject(subject_raw)
        counter, version, rfc, tagged = parse_prefix(words, source)
        raw_text, codec = find_text(msg, where)
        _check_msgids(msg, where)
    except RecursionError:
        # parts nested in a way the count above does not see (folded headers...)
        raise InputError(where, "MIME parts nested too deep") from None
    return _Mail(
        position=position,
        raw=raw,
        msg=msg,
        subject=subject,
        is_reply=is_reply,
        counter=counter,
        version=version,
        rfc=rfc,
        tagged=tagged,
        text=_SURROGATE.sub("\ufffd", raw_text),
        raw_text=raw_text,
        codec=codec,
    )


def _check_msgids(msg: email.message.Message, where: str) -> None:
    """Refuse a mail whose Message-ID, In-Reply-To or References holds an id too long to
    keep whole (see :data:`.mailheaders.MAX_MSGID`)."""
    for name in ("Message-ID", "In-Reply-To", "References"):
        text = clean_header(msg.get(name))
        ids = MSGID.findall(text) or ([text] if name == "Message-ID" and " " not in text else [])
        for msgid in ids:
            why = msgid_too_long(msgid)
            if why:
                raise InputError(where, f"{name} holds {why} (RFC 5322)")


def _label(mail: _Mail) -> str:
    if mail.counter:
        return f"patch {mail.counter[0]}/{mail.counter[1]} '{_short(mail.subject)}'"
    return f"mail {mail.position + 1} '{_short(mail.subject)}'"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_mbox(data: bytes, *, source: str = "<mbox>") -> ParsedSeries:
    """Parse one patch series from an mbox.

    A cover letter ``[PATCH 0/N]`` is optional; patches are ordered by their counter (or by
    position when unnumbered); replies and other mails without a diff are skipped and listed
    in ``ignored``. Gaps, duplicates, mixed versions or totals, a numbered patch without a
    diff, or no patches at all raise :class:`InputError`.
    """
    mails = [parse_mail(raw, i, source) for i, raw in enumerate(find_mails(data, source))]

    cover: _Mail | None = None
    patch_mails: list[tuple[_Mail, str, str, str]] = []
    ignored: list[str] = []
    for mail in mails:
        if mail.is_reply:
            ignored.append(mail.subject)
            continue
        message, diff, trailer = parse_body(mail.text)
        extra = find_diff_start(trailer.split("\n")) if diff else None
        if extra is not None:
            line = _short(trailer.split("\n")[extra], 60)
            raise InputError(
                source,
                f"{_label(mail)} has a second diff after its patch ({line!r}): git am would "
                "apply it unseen; send one diff per mail",
            )
        heads = [h for h in diff.split("\n") if h.startswith("diff --git ")]
        if len(heads) != len(set(heads)):
            twice = next(h for h in heads if heads.count(h) > 1)
            raise InputError(source, f"{_label(mail)} changes a file twice ({_short(twice, 60)!r})")
        if mail.counter and mail.counter[0] == 0:
            if cover is not None:
                raise InputError(source, f"two cover letters: {_label(cover)} and {_label(mail)}")
            cover = mail
            continue
        if not diff:
            if mail.counter:
                raise InputError(source, f"{_label(mail)} has no diff")
            ignored.append(mail.subject)
            continue
        if not mail.msg.get("From"):
            raise InputError(source, f"{_label(mail)} has no From header")
        patch_mails.append((mail, message, diff, trailer))

    if any(m.counter for m, *_ in patch_mails):
        # a numbered series: an untagged mail that happens to carry a diff is discussion
        ignored.extend(m.subject for m, *_ in patch_mails if not m.counter and not m.tagged)
        patch_mails = [pm for pm in patch_mails if pm[0].counter or pm[0].tagged]
    if not patch_mails:
        raise InputError(source, "no patches found (no mail with a diff)")
    if len(patch_mails) > MAX_PATCHES:
        raise InputError(source, f"{len(patch_mails)} patches: at most {MAX_PATCHES} per series")

    _check_versions(source, cover, [m for m, *_ in patch_mails])
    ordered = _order(source, cover, patch_mails)

    patches: list[ParsedPatch] = []
    base_commit = find_base_commit(_strip_signature(cover.text)) if cover else None
    for idx, total, (mail, message, diff, trailer) in ordered:
        if base_commit is None:
            base_commit = find_base_commit(trailer)
        author, author_email = clean_address(mail.msg.get("From"))
        patches.append(
            ParsedPatch(
                idx=idx,
                total=total,
                subject=mail.subject,
                author=author,
                author_email=author_email,
                date=clean_date(mail.msg.get("Date")),
                message_id=clean_msgid(mail.msg.get("Message-ID")),
                in_reply_to=_find_parent(mail.msg),
                body=message,
                diff=diff,
                raw=mail.raw,
                diff_raw=_diff_bytes(mail),
            )
        )

    head = cover or ordered[0][2][0]
    submitter, submitter_email = clean_address(head.msg.get("From"))
    return ParsedSeries(
        title=head.subject or patches[0].subject,
        version=head.version,
        cover_letter=_strip_signature(cover.text).strip("\n") if cover else "",
        message_id=clean_msgid(head.msg.get("Message-ID")),
        in_reply_to=_find_parent(head.msg),
        base_commit=base_commit,
        submitter=submitter,
        submitter_email=submitter_email,
        patches=patches,
        rfc=any(m.rfc for m in [head, *(m for m, *_ in patch_mails)]),
        ignored=ignored,
    )


def _find_parent(msg: email.message.Message) -> str | None:
    parent = clean_msgid(msg.get("In-Reply-To"))
    if parent:
        return parent
    refs = MSGID.findall(clean_header(msg.get("References")))
    return refs[-1] if refs else None


def _check_versions(source: str, cover: _Mail | None, mails: list[_Mail]) -> None:
    versions = sorted({m.version for m in ([cover] if cover else []) + mails})
    if len(versions) > 1:
        listed = " and ".join(f"v{v}" for v in versions)
        raise InputError(source, f"mixed versions {listed} in one mbox: send one version")


def _order(
    source: str, cover: _Mail | None, patch_mails: list[tuple[_Mail, str, str, str]]
) -> list[tuple[int, int, tuple[_Mail, str, str, str]]]:
    numbered = [pm for pm in patch_mails if pm[0].counter]
    if not numbered:
        total = len(patch_mails)
        if cover and cover.counter and cover.counter[1] != total:
            raise InputError(
                source, f"cover letter announces {cover.counter[1]} patches, found {total}"
            )
        return [(i + 1, total, pm) for i, pm in enumerate(patch_mails)]
    for mail, *_ in patch_mails:
        if not mail.counter and mail.tagged:
            raise InputError(source, f"{_label(mail)} has no n/N counter unlike the others")

    totals = {pm[0].counter[1] for pm in numbered}
    if cover and cover.counter:
        totals.add(cover.counter[1])
    if len(totals) > 1:
        listed = ", ".join(str(t) for t in sorted(totals))
        raise InputError(source, f"patches disagree on the series length ({listed})")
    total = totals.pop()

    by_idx: dict[int, tuple[_Mail, str, str, str]] = {}
    for pm in numbered:
        idx = pm[0].counter[0]
        if idx > total:
            raise InputError(source, f"{_label(pm[0])}: index beyond the series length")
        if idx in by_idx:
            first = by_idx[idx]
            if first[1:] == pm[1:] and first[0].subject == pm[0].subject:
                continue  # the same mail saved twice
            same_id = clean_msgid(first[0].msg.get("Message-ID"))
            if same_id and same_id == clean_msgid(pm[0].msg.get("Message-ID")):
                raise InputError(
                    source,
                    f"patch {idx}/{total} appears twice with Message-ID {_short(same_id)} "
                    "but different content",
                )
            raise InputError(source, f"patch {idx}/{total} appears twice")
        by_idx[idx] = pm
    if len(by_idx) < total:
        # total is bounded by MAX_PATCHES; the message names the first few gaps only
        missing = [i for i in range(1, total + 1) if i not in by_idx]
        listed = ", ".join(f"{i}/{total}" for i in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise InputError(
            source, f"series of {total} patches has {len(by_idx)}: missing patch {listed}{more}"
        )
    return [(i, total, by_idx[i]) for i in range(1, total + 1)]
