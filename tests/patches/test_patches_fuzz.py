"""Fuzzing parse_mbox and the apply step: real mboxes from tests/data/patches, mutated with a
dictionary of the things mail carries (charsets, transfer encodings, multipart wrapping,
encoded words, long numbers, inner mbox separators, patch attachments, diffs after the
signature or in an HTML part) and with random byte edits. Whatever comes in, the parser either
returns a series or raises InputError, within a time and memory bound; and a series it returns
is applied with real ``git am`` either exactly as shown (each commit adds and removes the
lines its shown diff does, file by file) or not at all, with a one-line reason.

The runs are derandomized and bounded (a fixed number of examples), so CI sees the same
inputs every time and the file takes well under a minute."""

from __future__ import annotations

import itertools
import subprocess
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stackbench.errors import InputError
from stackbench.patches.apply import apply_series, remove_worktree
from stackbench.patches.parser import ParsedSeries, parse_mbox

SEEDS = sorted((Path(__file__).parents[1] / "data" / "patches").glob("*.mbox"))
CHARSETS = [
    "utf-8", "latin-1", "iso-8859-15", "us-ascii", "idna", "punycode", "utf-7", "utf-16",
    "utf-32", "cp1252", "koi8-r", "shift_jis", "big5", "base64", "zlib_codec", "rot13",
    "hex", "uu", "unicode_escape", "raw_unicode_escape", "nonexistent", "", '"', "x" * 300,
    "utf-\u00e9", "\u00e9\u00e9",
]  # fmt: skip
ENCODINGS = ["base64", "quoted-printable", "x-uuencode", "uuencode", "8bit", "7bit", "binary",
             "bogus", ""]  # fmt: skip
BIG = "9" * 5000
NUMBERS = ["0", "1", "2", "500", "501", "5000000", "10000000", BIG, "-1", "00001", "١", "²"]
SEPARATOR = b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
EXTRA_DIFF = (
    b"diff --git a/extra.c b/extra.c\nnew file mode 100644\n--- /dev/null\n+++ b/extra.c\n"
    b"@@ -0,0 +1 @@\n+int extra = 1;\n"
)
# what tests/data/patches' diffs apply to
BASE_FILES = {"lib.c": "int a = 1;\nint b = 2;\nint c = 3;\n", "README": "first\n"}


def _with_header(mail: bytes, name: bytes, value: bytes) -> bytes:
    head, sep, body = mail.partition(b"\n\n")
    lines = [ln for ln in head.split(b"\n") if not ln.lower().startswith(name.lower() + b":")]
    return b"\n".join([*lines, name + b": " + value]) + (sep or b"\n\n") + body


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


def _mails(data: bytes) -> list[bytes]:
    parts = data.split(b"\nFrom ")
    return [parts[0]] + [b"From " + p for p in parts[1:]]


@st.composite
def mutated_mbox(draw: st.DrawFn, edits: int = 4, seeds: list[Path] = SEEDS) -> bytes:
    data = draw(st.sampled_from(seeds)).read_bytes()
    mails = _mails(data)
    for _ in range(draw(st.integers(0, edits))):
        i = draw(st.integers(0, len(mails) - 1))
        m = mails[i]
        kind = draw(st.integers(0, 11))
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
                + b"\nContent-Transfer-Encoding: " + enc + b"\n\n" + body + b"\n--B--\n\n"
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
        elif kind == 10:
            # another mail glued in without the blank line git does not need to split there
            pos = _line_start(m, draw(st.integers(0, len(m))))
            glued = draw(st.sampled_from([b"", b"From: Sneaky <s@evil.example>\n\n"]))
            m = m[:pos] + SEPARATOR + glued + EXTRA_DIFF + m[pos:]
        elif kind == 11:
            # a second diff: right after the first, after the signature, in an attachment
            # of a patch type or in a part that is not shown
            where = draw(st.sampled_from(["inline", "signature", "attach", "html"]))
            if where in ("attach", "html"):
                ctype = draw(
                    st.sampled_from([b"text/x-patch", b"application/x-patch", b"text/html"])
                    if where == "attach"
                    else st.just(b"text/html")
                )
                head, _, body = m.partition(b"\n\n")
                m = _with_header(head + b"\n\n", b"Content-Type", b'multipart/mixed; boundary="B"')
                m = m.rstrip(b"\n") + (
                    b"\n\n--B\nContent-Type: text/plain\n\n" + body
                    + b"\n--B\nContent-Type: " + ctype + b"\n\n" + EXTRA_DIFF + b"--B--\n\n"
                )  # fmt: skip
            elif where == "inline":
                m = m.replace(b"\n-- \n", b"\n" + EXTRA_DIFF + b"-- \n", 1)
            else:
                m = m.replace(b"\n-- \n", b"\n-- \nsigned\n" + EXTRA_DIFF, 1)
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


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory):
    """A repository holding the files the seed mboxes patch, at their base content."""
    repo = tmp_path_factory.mktemp("fuzz") / "repo"
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "HOME": "/nonexistent"}
    env.update(GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@example.org", PATH="/usr/bin:/bin")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    for name, text in BASE_FILES.items():
        (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "base"], check=True, env=env)
    return repo


def _parses(path: Path) -> bool:
    try:
        return bool(parse_mbox(path.read_bytes()))
    except InputError:
        return False


# the seeds that are series: their mutations are the ones that reach git am
GOOD_SEEDS = [p for p in SEEDS if _parses(p)]
_workdirs = itertools.count()


def _changes(diff: str) -> Counter[tuple[str, str]]:
    """(file, line) for every added or removed line of a diff: what the diff does, whatever
    its context sizes, hunk headers or index lines (``git show`` writes ``diff --git``
    headers a bare ``---``/``+++`` diff did not have)."""
    out: Counter[tuple[str, str]] = Counter()
    old = path = ""
    for line in diff.split("\n"):
        if line.startswith("--- "):
            old = line[4:].split("\t")[0].removeprefix("a/")
        elif line.startswith("+++ "):
            new = line[4:].split("\t")[0].removeprefix("b/")
            path = old if new == "/dev/null" else new
        elif line.startswith(("+", "-")):
            out[(path, line)] += 1
    return out


@settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(mutated_mbox(edits=2, seeds=GOOD_SEEDS))
def test_what_git_am_builds_is_what_is_shown(base_repo: Path, data: bytes) -> None:
    try:
        series: ParsedSeries = parse_mbox(data, source="fuzz.mbox")
    except InputError:
        return
    for text in [series.title, series.cover_letter, *series.ignored]:
        text.encode("utf-8")  # no lone surrogate: PostgreSQL stores UTF-8
    for p in series.patches:
        for text in (p.subject, p.author, p.body, p.diff):
            assert "\0" not in text  # nothing a text column refuses reaches the database
            text.encode("utf-8")
    workdir = base_repo.parent / f"wt{next(_workdirs)}"
    try:
        result = apply_series(base_repo, "main", series.patches, workdir, timeout=60)
    finally:
        remove_worktree(base_repo, workdir)
    assert "\n" not in result.error and len(result.error) <= 500
    assert len(result.commits) == (len(series.patches) if result.ok else result.failed_index)
    if result.commits:
        made = subprocess.run(
            ["git", "-C", str(base_repo), "rev-list", f"main..{result.commits[-1]}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert made[::-1] == result.commits  # one commit per patch, nothing in between
    for patch, commit in zip(series.patches, result.commits, strict=False):
        built = subprocess.run(
            ["git", "-C", str(base_repo), "show", "--format=", "--no-renames", commit],
            capture_output=True,
            check=True,
        ).stdout
        # bytes compared as latin-1: one character per byte, whatever the mail's charset
        shown = patch.diff_bytes().decode("latin-1")
        assert _changes(built.decode("latin-1")) == _changes(shown), (patch.idx, patch.subject)
        # the page shows these bytes decoded, line for line
        assert patch.diff.count("\n") == shown.count("\n")
