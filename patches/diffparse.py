"""Where a diff starts in a patch mail's text and where it ends: the part of the mail that
``git am`` hands to ``git apply``, as :mod:`stackbench.patches.parser` shows it."""

from __future__ import annotations

import re

# hunk counts with more digits are larger than any mbox can hold
_MAX_DIGITS = 9
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# lines git puts between "diff --git" and the first hunk (or instead of hunks)
_DIFF_HEADER_PREFIXES = (
    "index ",
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "--- ",
    "+++ ",
    "Binary files ",
)


def find_diff_start(lines: list[str]) -> int | None:
    """Index of the first line of the diff (``diff --git``, ``Index:`` or a bare
    ``---``/``+++`` pair), or None."""
    for i, line in enumerate(lines):
        if line.startswith("diff --git ") or line.startswith("Index: "):
            return i
        if (
            line.startswith("--- ")
            and i + 2 < len(lines)
            and lines[i + 1].startswith("+++ ")
            and lines[i + 2].startswith("@@ ")
        ):
            return i
    return None


def _hunk_count(digits: str | None) -> int:
    if digits is None:
        return 1
    # a count larger than any mbox can hold just means "to the end of the input"
    return int(digits) if len(digits) <= _MAX_DIGITS else 10**_MAX_DIGITS


def parse_diff(lines: list[str], start: int) -> tuple[str, int]:
    """The diff starting at ``start`` and the index of the first line after it.

    Hunks are consumed by their line counts, so a removed line reading ``- `` (which looks
    like the ``-- `` signature marker) cannot end the diff early, and whatever follows the
    last hunk (``base-commit:`` trailers, the signature) is not part of it."""
    i = start
    n = len(lines)
    in_binary = False
    while i < n:
        line = lines[i]
        if line.startswith("diff ") or line.startswith("Index: "):
            in_binary = False
            i += 1
            continue
        if in_binary:
            if line.startswith(("literal ", "delta ")) or line == "" or _is_base85(line):
                i += 1
                continue
            in_binary = False
            continue
        if line.startswith("GIT binary patch"):
            in_binary = True
            i += 1
            continue
        if line.startswith(_DIFF_HEADER_PREFIXES) or line.startswith("==="):
            i += 1
            continue
        m = _HUNK.match(line)
        if m:
            old = _hunk_count(m.group(1))
            new = _hunk_count(m.group(2))
            i += 1
            while i < n and (old > 0 or new > 0):
                h = lines[i]
                if h.startswith("\\"):
                    i += 1
                    continue
                tag = h[:1]
                if tag == " " or h == "":
                    old -= 1
                    new -= 1
                elif tag == "-":
                    old -= 1
                elif tag == "+":
                    new -= 1
                else:
                    break
                i += 1
            while i < n and lines[i].startswith("\\"):
                i += 1
            continue
        break
    diff = "\n".join(lines[start:i]).rstrip("\n")
    return (diff + "\n" if diff else ""), i


_BASE85 = re.compile(r"[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+")


def _is_base85(line: str) -> bool:
    return _BASE85.fullmatch(line) is not None
