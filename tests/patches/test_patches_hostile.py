"""parse_mbox on crafted hostile mails: odd charsets, huge numbers, huge series lengths.
Each must end in one short InputError (or parse), quickly and without a large allocation."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from stackbench.errors import InputError
from stackbench.patches.parser import MAX_PATCHES, parse_mbox

DIFF = """\
diff --git a/lib.c b/lib.c
--- a/lib.c
+++ b/lib.c
@@ -1,N +1,1 @@
-int a = 1;
+int a = 2;
"""


def mail(subject: str, *, charset: str = "utf-8", hunk: str = "1", body: bytes | None = None):
    head = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Ann Author <ann@example.org>\n"
        f"Subject: {subject}\n"
        "Message-ID: <m1@example.org>\n"
        "MIME-Version: 1.0\n"
        f"Content-Type: text/plain; charset={charset}\n\n"
    ).encode()
    text = body if body is not None else ("lib: change a\n---\n" + DIFF).encode()
    return head + text.replace(b"-1,N", f"-1,{hunk}".encode())


def refused(data: bytes) -> InputError:
    started = time.perf_counter()
    with pytest.raises(InputError) as exc:
        parse_mbox(data, source="x.mbox")
    # a hostile number is refused at once, not after sizing anything by it
    assert time.perf_counter() - started < 1.0
    assert len(str(exc.value)) < 300, str(exc.value)[:300]
    return exc.value


def test_idna_and_other_failing_codecs_fall_back_to_utf8():
    for charset in ("idna", "punycode", "zlib_codec", "base64", "rot13", "utf-7", "nope"):
        s = parse_mbox(
            mail(
                "[PATCH] lib: change a",
                charset=charset,
                body=b"\xffx\n---\n" + DIFF.replace("N", "1").encode(),
            )
        )
        assert s.patches[0].diff.startswith("diff --git a/lib.c"), charset


@pytest.mark.parametrize(
    "subject, what",
    [
        ("[PATCH 1/" + "9" * 5000 + "] x", "series length 99999999999999999... is too large"),
        ("[PATCH " + "9" * 5000 + "/2] x", "patch number 99999999999999999... is too large"),
        ("[PATCH v" + "7" * 5000 + " 1/1] x", "version 77777777777777777... is too large"),
        ("[PATCH v99999 1/1] x", "version v99999: at most v10000"),
    ],
)
def test_huge_numbers_in_the_subject_are_refused(subject, what):
    assert what in str(refused(mail(subject)))


def test_huge_hunk_count_parses_to_the_end_of_input():
    s = parse_mbox(mail("[PATCH] lib: change a", hunk="9" * 5000))
    assert "+int a = 2;" in s.patches[0].diff


@pytest.mark.parametrize("total", [MAX_PATCHES + 1, 5_000_000, 10**7])
def test_huge_series_length_is_refused_fast_and_small(total):
    tracemalloc.start()
    try:
        err = refused(mail(f"[PATCH 1/{total}] lib: change a"))
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(err) == f"x.mbox: series of {total} patches: at most {MAX_PATCHES}"
    assert peak < 5 * 1024 * 1024


def test_missing_patches_message_is_bounded():
    err = refused(mail(f"[PATCH 1/{MAX_PATCHES}] lib: change a"))
    assert f"has 1: missing patch 2/{MAX_PATCHES}, 3/{MAX_PATCHES}" in str(err)
    assert f"and {MAX_PATCHES - 11} more" in str(err)


def nested(depth: int) -> bytes:
    """A patch mail whose text sits ``depth`` multiparts deep (57 KB at 1,000)."""
    head = mail("[PATCH] lib: change a").split(b"Content-Type:")[0]
    out = head + b'Content-Type: multipart/mixed; boundary="b0"\n\n'
    for i in range(1, depth):
        out += f'--b{i - 1}\nContent-Type: multipart/mixed; boundary="b{i}"\n\n'.encode()
    out += f"--b{depth - 1}\nContent-Type: text/plain\n\n".encode()
    out += ("lib: change a\n---\n" + DIFF.replace("N", "1")).encode()
    return out + b"".join(f"--b{i}--\n".encode() for i in reversed(range(depth)))


def test_mime_nested_a_thousand_deep_is_refused():
    data = nested(1000)
    assert 50_000 < len(data) < 70_000
    err = refused(data)
    assert str(err) == "x.mbox: mail 1: 1000 multipart or message/rfc822 MIME parts: at most 16"
    # a patch two levels deep, as mailers send it, still parses
    assert "+int a = 2;" in parse_mbox(nested(2)).patches[0].diff


@pytest.mark.parametrize("header", ["Subject", "From"])
def test_non_ascii_charset_name_in_an_encoded_word_is_kept_as_text(header):
    data = mail("[PATCH] lib: change a").replace(
        f"{header}: ".encode(), f"{header}: =?utf-\u00e9?q?x?= ".encode(), 1
    )
    s = parse_mbox(data, source="x.mbox")
    p = s.patches[0]
    assert "=?utf-" in (p.subject if header == "Subject" else p.author)
    assert "+int a = 2;" in p.diff


@pytest.mark.parametrize(
    "body, where",
    [
        (b"lib: \x00change a\n---\n", "NUL byte on line 8: an mbox is text"),
        # hidden by the transfer encoding: found in the decoded text
        (None, "mail 1: a NUL byte in its decoded text: a patch mail is text"),
    ],
)
def test_nul_bytes_are_refused(body, where):
    if body is None:
        data = mail("[PATCH] lib: change a").replace(
            b"Content-Type: text/plain; charset=utf-8\n",
            b"Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n",
        )
        data = data.replace(b"\n\nlib: change a\n", b"\n\nlib: =00change a\n", 1)
    else:
        data = mail("[PATCH] lib: change a").replace(b"lib: change a\n---\n", body, 1)
    assert where in str(refused(data))
