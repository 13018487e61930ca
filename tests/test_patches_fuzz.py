"""Fuzzing parse_mbox: real mboxes from tests/data/patches, mutated with a dictionary of the
things mail carries (charsets, transfer encodings, multipart wrapping, encoded words, long
numbers) and with random byte edits. Whatever comes in, the parser either returns a series
or raises InputError, within a time and memory bound.

The run is derandomized and bounded (a fixed number of examples), so CI sees the same inputs
every time and the file takes well under a minute."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackbench.errors import InputError
from stackbench.patches.parser import parse_mbox

SEEDS = sorted((Path(__file__).parent / "data" / "patches").glob("*.mbox"))
CHARSETS = [
    "utf-8", "latin-1", "iso-8859-15", "us-ascii", "idna", "punycode", "utf-7", "utf-16",
    "utf-32", "cp1252", "koi8-r", "shift_jis", "big5", "base64", "zlib_codec", "rot13",
    "hex", "uu", "unicode_escape", "raw_unicode_escape", "nonexistent", "", '"', "x" * 300,
]  # fmt: skip
ENCODINGS = ["base64", "quoted-printable", "x-uuencode", "uuencode", "8bit", "7bit", "binary",
             "bogus", ""]  # fmt: skip
BIG = "9" * 5000
NUMBERS = ["0", "1", "2", "500", "501", "5000000", "10000000", BIG, "-1", "00001", "١", "²"]


def _with_header(mail: bytes, name: bytes, value: bytes) -> bytes:
    head, sep, body = mail.partition(b"\n\n")
    lines = [ln for ln in head.split(b"\n") if not ln.lower().startswith(name.lower() + b":")]
    return b"\n".join([*lines, name + b": " + value]) + (sep or b"\n\n") + body


def _mails(data: bytes) -> list[bytes]:
    parts = data.split(b"\nFrom ")
    return [parts[0]] + [b"From " + p for p in parts[1:]]


@st.composite
def mutated_mbox(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(SEEDS)).read_bytes()
    mails = _mails(data)
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(mails) - 1))
        m = mails[i]
        kind = draw(st.integers(0, 9))
        if kind == 0:
            cs = draw(st.sampled_from(CHARSETS)).encode()
            m = _with_header(m, b"Content-Type", b"text/plain; charset=" + cs)
        elif kind == 1:
            m = _with_header(
                m, b"Content-Transfer-Encoding", draw(st.sampled_from(ENCODINGS)).encode()
            )
        elif kind == 2:
            a, b = draw(st.sampled_from(NUMBERS)), draw(st.sampled_from(NUMBERS))
            v = draw(st.sampled_from(["", f"v{draw(st.sampled_from(NUMBERS))} "]))
            m = _with_header(m, b"Subject", f"[PATCH {v}{a}/{b}] lib: fuzz".encode())
        elif kind == 3:
            n = draw(st.sampled_from(NUMBERS)).encode()
            m = m.replace(b"@@ -1,3 +1,3 @@", b"@@ -1," + n + b" +" + n + b",1 @@", 1)
        elif kind == 4:
            # wrap the body into a multipart with an attachment in a drawn charset/encoding
            head, _, body = m.partition(b"\n\n")
            cs = draw(st.sampled_from(CHARSETS)).encode()
            enc = draw(st.sampled_from(ENCODINGS)).encode()
            m = _with_header(head + b"\n\n", b"Content-Type", b'multipart/mixed; boundary="B"')
            m = m.rstrip(b"\n") + (
                b"\n\n--B\nContent-Type: text/x-patch; charset=" + cs
                + b"\nContent-Transfer-Encoding: " + enc + b"\n\n" + body + b"\n--B--\n"
            )  # fmt: skip
        elif kind == 5:
            cs = draw(st.sampled_from(CHARSETS))
            word = draw(st.sampled_from(["q?=FF=00=0A", "b?////", "q?a", "b?" + "A" * 7]))
            hdr = draw(st.sampled_from([b"From", b"Subject", b"Message-ID", b"In-Reply-To"]))
            m = _with_header(m, hdr, f"=?{cs}?{word}?= <a,evil@example.com>".encode())
        elif kind == 6:
            pos = draw(st.integers(0, len(m)))
            m = m[:pos] + draw(st.binary(max_size=64)) + m[pos:]
        elif kind == 7:
            pos = draw(st.integers(0, len(m)))
            m = m[:pos] + m[pos + draw(st.integers(1, 200)) :]
        elif kind == 8:
            mails.append(m)  # the same mail twice, or later edited into a different one
        else:
            m = _with_header(
                m, b"Date", draw(st.sampled_from([b"Mon, 1 Jan " + BIG.encode(), b"x"]))
            )
        mails[i] = m
    return b"".join(m if m.endswith(b"\n") else m + b"\n" for m in mails)


@settings(
    max_examples=1000,
    derandomize=True,
    deadline=None,  # the bound is checked below, including tracemalloc's overhead
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_mbox())
def test_parser_raises_only_input_errors_within_bounds(data: bytes) -> None:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        parse_mbox(data, source="fuzz.mbox")
    except InputError as exc:
        assert len(str(exc)) < 2000, str(exc)[:200]
    finally:
        elapsed = time.perf_counter() - started
        _size, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < 2.0, elapsed
    # the email package keeps a few copies of each mail; nothing should grow beyond that
    assert peak < 64 * 1024 * 1024 + 40 * len(data), peak
