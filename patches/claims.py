"""Claims from a mail: the performance numbers a cover letter, changelog or robot report prints.

A claim is one row of a comparison table for one kernel column against its base column:
LKP's ncompare blocks (:mod:`stackbench.patches.claims_lkp`), mmtests' compare tables and
monitor blocks (:mod:`stackbench.patches.claims_mmtests`), and the shorter shapes authors
write themselves (this module): ``mmap-pread-seq-mt: -18.3%``, value tables with one column
per kernel (seed 003), percentile lists per kernel (seed 001).

Mails are read as they arrive, which includes archives that lost their line breaks (the
seeds): every reader works on the words of the text and uses line breaks only where they
are there to use. Quoted replies (``> `` prefixes) are read like the original.

``printed_pct`` keeps the table's sign convention (LKP's %change: new against base; mmtests'
gain: positive is better); ``change_pct`` is always the relative change of the value, new
against base, in %. Where a table prints no percentage, both are the change its values give.
Rows that say nothing relative (LKP's absolute differences for ``...%`` and perf-profile
stats, a base of 0) are not claims.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

STYLES = ("lkp", "mmtests", "short")


@dataclass(frozen=True)
class Claim:
    style: str  # "lkp", "mmtests" or "short"
    job: dict[str, str]  # {"suite": ..., the header's parameters}
    kernel: str  # the kernel column as printed (sha, tag or name)
    base: str | None  # the base column as printed, when the table names it
    metric: str  # as printed
    printed_pct: float  # in the table's own sign convention
    change_pct: float  # relative change of the value, new vs base, in %
    stddev_pct: float | None
    significant: bool | None
    value: float | None = None  # the kernel column's value, when printed
    base_value: float | None = None
    statistic: str | None = None  # mmtests' row statistic (Amean, Stddev, ...)
    columns: tuple[str, ...] = field(default=())  # every kernel column of the table, in order
    column: int | None = None  # this claim's position in ``columns``
    base_column: int | None = None

    def __hash__(self) -> int:
        # ``job`` is a dict: hash what identifies the claim, so claims can key a mapping
        return hash((self.style, tuple(sorted(self.job.items())), self.kernel, self.base,
                     self.metric, self.statistic, self.column, self.printed_pct))  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        return {
            "style": self.style,
            "job": dict(self.job),
            "kernel": self.kernel,
            "base": self.base,
            "metric": self.metric,
            "statistic": self.statistic,
            "printed_pct": self.printed_pct,
            "change_pct": self.change_pct,
            "stddev_pct": self.stddev_pct,
            "significant": self.significant,
            "value": self.value,
            "base_value": self.base_value,
            "columns": list(self.columns),
            "column": self.column,
            "base_column": self.base_column,
        }


# ---- the text as words --------------------------------------------------------------------

_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+")
NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Word:
    text: str
    line: int


def unquote(text: str) -> list[str]:
    """The mail's lines without reply quoting."""
    return [_QUOTE.sub("", ln) for ln in text.replace("\r\n", "\n").split("\n")]


def words(lines: list[str]) -> list[Word]:
    out = []
    for i, ln in enumerate(lines):
        for w in ln.split():
            if w.strip(">"):  # a quote marker inside a line that lost its breaks
                out.append(Word(w, i))
    return out


def number(text: str) -> float | None:
    """The value of a printed number; None for other words and for numbers beyond a float."""
    if not NUMBER.match(text):
        return None
    x = float(text)
    return x if math.isfinite(x) else None


def relative(new: float, base: float) -> float | None:
    """The change new vs base in %; None from a base of 0 to anything else (no relative
    change exists), 0 when both are 0."""
    if base == 0:
        return 0.0 if new == 0 else None
    change = (new - base) * 100.0 / abs(base)
    return change if math.isfinite(change) else None


def round_pct(x: float) -> float:
    return round(x, 4)


# ---- mails ------------------------------------------------------------------------------

_MAIL_HEADERS = ("from", "subject", "message-id", "date")


def mail_text(data: bytes) -> str:
    """The text to read claims from: a mail's or an mbox's text parts, decoded (base64,
    quoted-printable, charsets) as the patch parser decodes them; anything else as UTF-8."""
    import email
    import email.policy

    from stackbench.errors import StackbenchError
    from stackbench.patches import parser

    plain = data.decode("utf-8", errors="replace")
    try:
        raws = parser.find_mails(data, "<mail>")
    except StackbenchError:
        return plain
    texts = []
    for raw in raws:
        try:
            msg = email.message_from_bytes(raw, policy=email.policy.compat32)
            if not any(h in _MAIL_HEADERS for h in (k.lower() for k in msg)):
                return plain  # "Key: value" lines of a text, not a mail's headers
            text, _ = parser.find_text(msg)
        except (StackbenchError, RecursionError, ValueError, LookupError):
            return plain
        # undecodable bytes came back as lone surrogates: show them as replacement marks
        texts.append(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    return "\n".join(texts)


# ---- top level ----------------------------------------------------------------------------


def parse(text: str) -> list[Claim]:
    """Every claim of the mail, in the order its tables print them."""
    from stackbench.patches import claims_lkp, claims_mmtests, claims_short

    lines = unquote(text)
    ws = words(lines)
    found: list[tuple[int, list[Claim]]] = []
    taken: set[int] = set()
    for start, end, claims in claims_lkp.parse_words(ws):
        found.append((start, claims))
        taken.update(range(start, end))
    known: dict[int, list[str]] = {}  # the kernels of the last table of each width
    for start, end, claims in claims_mmtests.parse_words(ws, taken, known):
        found.append((start, claims))
        taken.update(range(start, end))
    for start, end, claims in claims_short.parse_words(ws, taken, known):
        found.append((start, claims))
        taken.update(range(start, end))
    found.sort(key=lambda f: f[0])
    return _linked([c for _, cs in found for c in cs])


def _linked(claims: list[Claim]) -> list[Claim]:
    """A sentence's claim (``mmap-pread-seq-mt: -18.3% if ...``) that a table of the same
    mail prints for exactly one column, same case and same percentage, is that column's
    claim in the author's words: it takes the table's job and columns."""
    tables = [c for c in claims if c.style != "short" or c.columns]
    out = []
    for c in claims:
        if c.style == "short" and c.base is None and not c.columns:
            same = {
                (t.kernel, t.base): t
                for t in tables
                if t.job.get("test") == c.metric and abs(t.printed_pct - c.printed_pct) < 0.051
            }
            if len(same) == 1:
                (t,) = same.values()
                c = replace(
                    c, job=dict(t.job), kernel=t.kernel, base=t.base, value=t.value,
                    base_value=t.base_value, stddev_pct=t.stddev_pct, columns=t.columns,
                    column=t.column, base_column=t.base_column, change_pct=t.change_pct,
                )  # fmt: skip
        out.append(c)
    return out


def format_table(claims: list[Claim]) -> str:
    """The claims as a plain text table, one line each."""
    if not claims:
        return "no claims found\n"
    heads = ("style", "job", "kernel", "base", "metric", "printed", "change", "stddev", "sig")
    rows = []
    for c in claims:
        job = c.job.get("suite", "") + "".join(
            f" {k}={v}" for k, v in c.job.items() if k in ("test", "scenario", "hogger")
        )
        rows.append(
            (
                c.style,
                job,
                c.kernel,
                c.base or "-",
                c.metric,
                f"{c.printed_pct:+.2f}%",
                f"{c.change_pct:+.2f}%",
                "-" if c.stddev_pct is None else f"{c.stddev_pct:.1f}%",
                {True: "yes", False: "no", None: "-"}[c.significant],
            )
        )
    cut = [[cell[:40] for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cut)) for i, h in enumerate(heads)]
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    for r in cut:
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out) + "\n"
