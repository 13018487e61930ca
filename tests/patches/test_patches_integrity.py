"""What is built is the diff that is shown: the two hostile mboxes of issue #27 (an inner
mbox separator, a second diff in a patch attachment) through the parser, the CLI and real
``git am``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.patchrepo import ENV, LIB, sh

from stackbench.errors import InputError
from stackbench.patches.apply import apply_series
from stackbench.patches.parser import parse_mbox

SEP = b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
SNEAKY = (
    b"From: Sneaky <sneaky@evil.example>\n"
    b"Subject: [PATCH] evil: add a file\n\n"
    b"---\n"
    b"diff --git a/evil.c b/evil.c\n"
    b"new file mode 100644\n"
    b"--- /dev/null\n"
    b"+++ b/evil.c\n"
    b"@@ -0,0 +1 @@\n"
    b"+int evil = 1;\n"
)
SECOND_DIFF = SNEAKY[SNEAKY.index(b"diff --git") :]


@pytest.fixture
def repo(tmp_path):
    """A repository whose main branch is the base, and the mbox of three patches on it."""
    r = tmp_path / "repo"
    sh(tmp_path, "init", "-q", "-b", "main", str(r))
    (r / "lib.c").write_text(LIB)
    sh(r, "add", ".")
    sh(r, "commit", "-q", "-m", "base")
    sh(r, "checkout", "-q", "-b", "topic")
    for old, new in [("a = 1", "a = 10"), ("b = 2", "b = 20"), ("c = 3", "c = 30")]:
        (r / "lib.c").write_text((r / "lib.c").read_text().replace(old, new))
        sh(r, "commit", "-q", "-a", "-m", f"lib: {new}")
    mbox = subprocess.run(
        ["git", "-C", str(r), "format-patch", "--stdout", "main..topic"],
        env=ENV,
        capture_output=True,
        check=True,
    ).stdout
    sh(r, "checkout", "-q", "main")
    return r, mbox


def first_mail_end(mbox: bytes) -> int:
    """Where the first mail's signature starts (just after its diff, no blank line)."""
    return mbox.index(b"-- \n")


def sneaky_mbox(mbox: bytes) -> bytes:
    """Another author's mail glued into patch 1/3 right after its diff, no blank line."""
    at = first_mail_end(mbox)
    return mbox[:at] + SEP + SNEAKY + mbox[at:]


def attachment_mbox(mbox: bytes, ctype: bytes, *, signed: bool = True) -> bytes:
    """Patch 1/3 as multipart: its text inline (ending in its signature when ``signed``)
    and a second diff as an attachment."""
    head, _, rest = mbox.partition(b"\n\n")
    body, _, others = rest.partition(b"-- \n")
    signature, _, others = others.partition(b"\n\n")
    inline = body + (b"-- \n" + signature + b"\n" if signed else b"")
    return (
        head
        + b'\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"\n\n'
        + b"--XX\nContent-Type: text/plain; charset=UTF-8\n\n"
        + inline
        + b"--XX\nContent-Type: "
        + ctype
        + b'; name="more.patch"\nContent-Disposition: attachment; filename="more.patch"\n\n'
        + SECOND_DIFF
        + b"--XX--\n\n"
        + others
    )


def test_git_am_alone_would_build_what_is_not_shown(repo, tmp_path):
    """The hazard is real: plain ``git am`` of the sneaky mbox makes four commits, the
    attachment one adds a file that no page shows."""
    r, mbox = repo
    for name, data, commits in [
        ("sneaky", sneaky_mbox(mbox), 4),
        ("attachment", attachment_mbox(mbox, b"text/x-patch"), 3),
    ]:
        wt = tmp_path / name
        sh(r, "worktree", "add", "-q", "--detach", str(wt), "main")
        (tmp_path / f"{name}.mbox").write_bytes(data)
        sh(wt, "am", "-q", str(tmp_path / f"{name}.mbox"))
        assert sh(wt, "rev-list", "--count", "main..HEAD") == str(commits)
        assert (wt / "evil.c").exists()


@pytest.mark.parametrize(
    "make, message",
    [
        (
            sneaky_mbox,
            "line 20 'From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 "
            "2001' is an mbox separator inside a mail (no blank line before it): git am "
            "would split the mail there",
        ),
        (
            lambda m: attachment_mbox(m, b"text/x-patch"),
            "patch 1/3 'lib: a = 10' has a second diff after its patch ('diff --git "
            "a/evil.c b/evil.c'): git am would apply it unseen; send one diff per mail",
        ),
        (
            lambda m: attachment_mbox(m, b"application/x-patch"),
            "patch 1/3 'lib: a = 10' has a second diff after its patch",
        ),
        (
            lambda m: m.replace(b"-- \n", SECOND_DIFF + SECOND_DIFF + b"-- \n", 1),
            "patch 1/3 'lib: a = 10' changes a file twice ('diff --git a/evil.c b/evil.c')",
        ),
        (
            lambda m: attachment_mbox(m, b"application/octet-stream"),
            "mail 1: a diff in a application/octet-stream part, which is not shown",
        ),
    ],
)
def test_hostile_mboxes_are_refused_with_the_reason(repo, tmp_path, make, message):
    _r, mbox = repo
    with pytest.raises(InputError) as err:
        parse_mbox(make(mbox), source="hostile.mbox")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_prints_the_refusal_on_one_line(repo, tmp_path, db_url):
    _r, mbox = repo
    path = tmp_path / "sneaky.mbox"
    path.write_bytes(sneaky_mbox(mbox))
    out = subprocess.run(
        [sys.executable, "-m", "stackbench", "submit", "--mbox", str(path), "--no-wait"],
        capture_output=True,
        text=True,
        env={**os.environ, "STACKBENCH_DATABASE_URL": db_url},
        timeout=120,
    )
    assert out.returncode != 0
    assert "stored" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "is an mbox separator inside a mail" in lines[0]
    assert "Traceback" not in out.stderr


def test_a_patch_attached_alone_is_shown_and_built(repo, tmp_path):
    """An empty inline part and the patch as text/x-patch: accepted, and the commit is
    exactly the diff shown."""
    r, mbox = repo
    head, _, rest = mbox.partition(b"\n\n")
    first, sep, others = rest.partition(b"-- \n")
    data = (
        head.replace(b"Content-Type: text/plain; charset=UTF-8", b"Content-Type: text/plain")
        + b'\nContent-Type: multipart/mixed; boundary="XX"\n\n'
        + b"--XX\nContent-Type: text/plain\n\nSee the attachment.\n"
        + b"--XX\nContent-Type: text/x-patch; charset=UTF-8\n\n"
        + first
        + b"--XX--\n\n"
        + sep
        + others
    )
    series = parse_mbox(data, source="attached.mbox")
    assert "+int a = 10;" in series.patches[0].diff
    result = apply_series(r, "main", series.patches, tmp_path / "wt")
    assert result.ok, result.error
    shown = sh(r, "show", "--format=", result.commits[0])
    assert "+int a = 10;" in shown and "evil" not in shown


def test_an_attachment_that_continues_the_diff_is_shown_with_it(repo, tmp_path):
    """A second diff right after the first (no signature between) is one diff of two
    files: the page shows both, and both are built."""
    r, mbox = repo
    series = parse_mbox(attachment_mbox(mbox, b"text/x-patch", signed=False))
    assert "+++ b/evil.c\n@@ -0,0 +1 @@\n+int evil = 1;\n" in series.patches[0].diff
    result = apply_series(r, "main", series.patches, tmp_path / "wt")
    assert result.ok, result.error
    assert sh(r, "show", "--format=", "--name-only", result.commits[0]).split() == [
        "evil.c",
        "lib.c",
    ]


@pytest.mark.parametrize("hostile", ["sneaky", "attachment"])
def test_apply_refuses_what_the_parser_would_have_missed(repo, tmp_path, hostile):
    """The apply step's own guarantee, with the parser's refusal bypassed: patch 1/3's
    mail carries the hostile bytes while its shown diff is the clean one. Real git am
    makes the commit; it is not the diff shown, so the series stops there, saying why."""
    r, mbox = repo
    patches = parse_mbox(mbox, source="clean.mbox").patches
    bad = sneaky_mbox(mbox) if hostile == "sneaky" else attachment_mbox(mbox, b"text/x-patch")
    patches[0].raw = bad[: bad.index(b"\n\nFrom ", bad.index(b"evil.c")) + 1]  # to 2/3
    result = apply_series(r, "main", patches, tmp_path / "wt", ref="refs/stackbench/t")
    assert not result.ok
    assert result.failed_index == 0 and result.commits == []
    assert result.not_as_shown
    assert result.error == "git am built something other than the diff shown: evil.c differ"
    # nothing of it is kept for building
    assert sh(r, "for-each-ref", "refs/stackbench/") == ""


def test_a_from_line_in_a_commit_message_is_one_commit(repo, tmp_path):
    """A body line that reads like a separator (quoted in an mboxrd from lore) stays in its
    commit message: git am gets each mail as an mboxrd of its own and never splits it."""
    r, mbox = repo
    body_line = b">" + SEP
    data = mbox.replace(b"\n---\n", b"\nKeep this:\n\n" + body_line + b"\n---\n", 1)
    data = b"From mboxrd@z Thu Jan  1 00:00:00 1970\n" + data.split(b"\n", 1)[1]
    series = parse_mbox(data, source="lore.mbox")
    assert SEP.decode().strip() in series.patches[0].body
    result = apply_series(r, "main", series.patches, tmp_path / "wt")
    assert result.ok, result.error
    assert len(result.commits) == 3
    message = sh(r, "log", "-1", "--format=%B", result.commits[0])
    assert SEP.decode().strip() in message


def test_bytes_not_text_in_the_charset_are_shown_replaced_and_built_as_sent(tmp_path):
    """A latin-1 file in a mail that says UTF-8 (git format-patch does that): the page shows
    U+FFFD for the byte, git am applies the byte, and the check compares the byte."""
    r = tmp_path / "r"
    sh(tmp_path, "init", "-q", "-b", "main", str(r))
    (r / "c.c").write_bytes(b"/* caf\xe9 */\n")
    sh(r, "add", ".")
    sh(r, "commit", "-q", "-m", "base")
    (r / "c.c").write_bytes(b"/* caf\xe9 na\xefve */\n")
    sh(r, "commit", "-q", "-am", "c: latin-1")
    mbox = subprocess.run(
        ["git", "-C", str(r), "format-patch", "--stdout", "-1"], env=ENV, capture_output=True
    ).stdout
    patch = parse_mbox(mbox).patches[0]
    assert "+/* caf\ufffd na\ufffdve */" in patch.diff
    assert b"+/* caf\xe9 na\xefve */" in patch.diff_bytes()
    result = apply_series(r, "main~1", [patch], tmp_path / "wt")
    assert result.ok, result.error
    assert sh(r, "rev-parse", f"{result.commits[0]}^{{tree}}") == sh(r, "rev-parse", "main^{tree}")
