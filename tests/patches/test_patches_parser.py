"""parse_mbox on real git format-patch output (tests/data/patches) and broken variants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stackbench.errors import InputError
from stackbench.patches.parser import (
    clean_address,
    clean_header,
    clean_subject,
    parse_mbox,
)

DATA = Path(__file__).parents[1] / "data" / "patches"


def parse(name: str):
    return parse_mbox((DATA / name).read_bytes(), source=name)


def test_series_without_cover_letter():
    s = parse("no-cover.mbox")
    assert [p.idx for p in s.patches] == [1, 2, 3]
    assert {p.total for p in s.patches} == {3}
    assert s.title == "lib: raise a"
    assert s.version == 1 and not s.rfc
    assert s.cover_letter == ""
    assert s.message_id == s.patches[0].message_id
    assert s.message_id.startswith("<058fc9b0") and s.message_id.endswith(">")
    # patches 2 and 3 are threaded under patch 1
    assert s.patches[1].in_reply_to == s.patches[0].message_id
    assert s.in_reply_to is None
    assert s.base_commit is None
    assert (s.submitter, s.submitter_email) == ("Jörg Müller", "joerg@example.org")


def test_rfc2047_names_and_dates():
    s = parse("no-cover.mbox")
    assert [(p.author, p.author_email) for p in s.patches] == [
        ("Jörg Müller", "joerg@example.org"),
        ("Zhang Wěi", "wei@example.cn"),
        ("Ann Author", "ann@example.org"),
    ]
    assert s.patches[0].date == "2024-03-01T12:00:00+00:00"


def test_body_and_diff_are_split_like_git_am():
    p = parse("no-cover.mbox").patches[0]
    assert p.subject == "lib: raise a"
    assert p.body.startswith("Make a larger so the demo")
    assert p.body.endswith("Signed-off-by: Jörg Müller <joerg@example.org>")
    assert "lib.c | 2 +-" not in p.body  # the diffstat is not part of the message
    assert p.diff.startswith("diff --git a/lib.c b/lib.c\n")
    assert "-int a = 1;\n+int a = 10;\n" in p.diff
    assert "2.39" not in p.diff and not p.diff.rstrip().endswith("--")
    assert p.raw.startswith(b"From 058fc9b0") and b"+int a = 10;" in p.raw


def test_cover_letter_v2_with_base_commit_and_in_reply_to():
    s = parse("cover-v2.mbox")
    assert s.title == "lib: raise the constants"
    assert s.version == 2
    assert s.cover_letter.startswith("Raise a and b.")
    assert "Changes since v1" in s.cover_letter
    assert s.base_commit == "83049a6b3fa14c8976b46b37be41fdd4524fd4b5"
    assert s.message_id.startswith("<cover.")
    assert s.in_reply_to == "<cover.v1.1709290000.git.sender@example.org>"
    assert [p.subject for p in s.patches] == ["lib: raise a", "lib: raise b"]
    assert all(p.in_reply_to == s.message_id for p in s.patches)
    assert s.submitter == "Test Committer"


def test_rfc_prefix():
    s = parse("rfc.mbox")
    assert s.rfc
    assert [p.subject for p in s.patches] == ["lib: raise a", "lib: raise b"]
    assert [(p.idx, p.total) for p in s.patches] == [(1, 2), (2, 2)]


def test_single_patch_with_base_commit_after_the_diff():
    s = parse("single-base.mbox")
    assert len(s.patches) == 1
    p = s.patches[0]
    assert (p.idx, p.total) == (1, 1)
    assert s.title == p.subject == "README: add a line"
    assert s.base_commit == "74e6dd7ae27c47806cfefccada1525e0afbd1ebd"
    # the trailer and signature after the diff are not part of the diff
    assert "base-commit" not in p.diff
    assert p.diff.endswith("+second\n")


def test_one_of_one_counter():
    s = parse("one-of-one.mbox")
    assert [(p.idx, p.total) for p in s.patches] == [(1, 1)]


def test_replies_and_notes_are_ignored():
    s = parse("with-reply.mbox")
    assert [p.idx for p in s.patches] == [1, 2, 3]
    assert s.ignored == ["lib: raise a"]


def test_lore_mboxrd_unescapes_from_lines():
    s = parse("lore-mboxrd.mbox")
    assert len(s.patches) == 3
    assert "\nFrom now on a is ten." in s.patches[0].body
    assert b"\nFrom now on a is ten." in s.patches[0].raw


def test_crlf_mbox():
    s = parse("crlf.mbox")
    assert [p.subject for p in s.patches] == ["lib: raise a", "lib: raise b"]
    assert "\r" not in s.patches[0].diff


def test_patches_are_ordered_by_counter():
    data = (DATA / "no-cover.mbox").read_bytes()
    mails = re.split(rb"(?m)^(?=From [0-9a-f]{40} )", data)[1:]
    assert len(mails) == 3
    s = parse_mbox(mails[2] + mails[0] + mails[1], source="shuffled")
    assert [p.idx for p in s.patches] == [1, 2, 3]
    assert [p.subject for p in s.patches] == ["lib: raise a", "lib: raise b", "README: add a line"]


def test_hostile_headers_are_single_line_text():
    s = parse("hostile.mbox")
    p = s.patches[0]
    for value in (s.title, p.subject, p.author, p.author_email, s.submitter, p.message_id):
        assert "\r" not in value and "\n" not in value
    # the encoded CR/LF became a space: no "Bcc:" header can be smuggled out
    assert p.subject == (
        '<script>alert("x")</script> evil Bcc: victim@example.com <img src=x onerror=alert(1)>'
    )
    assert (p.author, p.author_email) == ("Mallory X-Injected: yes", "mallory@evil.example")
    # HTML stays literal text; escaping is the renderer's job
    assert "<b>bold</b>" in p.body


def test_clean_helpers():
    assert clean_header("a\r\nb\x00c\u2028d") == "a b c d"
    assert clean_subject("Re: [PATCH v3 02/10] mm: x")[0] == "mm: x"
    assert clean_subject("[PATCH net-next v2 1/2] y") == ("y", ["PATCH", "net-next", "v2", "1/2"])
    assert clean_address("plain@example.org") == ("plain", "plain@example.org")
    assert clean_address("not an address") == ("not an address", "")


@pytest.mark.parametrize(
    "name, message",
    [
        ("not-an-mbox.txt", "not an mbox"),
        ("cover-only.mbox", "no patches found"),
        ("missing-diff.mbox", "patch 2/3 'lib: raise b' has no diff"),
        ("gap.mbox", "missing patch 2/3"),
        ("counter-mismatch.mbox", "series of 5 patches has 4: missing patch 5/5"),
        ("duplicate.mbox", "patch 2/3 appears twice"),
        ("mixed-versions.mbox", "mixed versions v2 and v3"),
    ],
)
def test_malformed_input_is_one_clear_line(name, message):
    with pytest.raises(InputError) as err:
        parse(name)
    text = str(err.value)
    assert text.startswith(f"{name}: ")
    assert message in text
    assert "\n" not in text


def test_empty_and_binary_input():
    with pytest.raises(InputError, match="empty input"):
        parse_mbox(b"\n\n", source="empty.mbox")
    with pytest.raises(InputError, match="not an mbox"):
        parse_mbox(bytes(range(256)) * 4, source="blob")


def test_same_mail_twice_is_deduplicated():
    data = (DATA / "one-of-one.mbox").read_bytes()
    s = parse_mbox(data + b"\n" + data, source="twice")
    assert len(s.patches) == 1
