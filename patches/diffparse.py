"""Where a diff starts in a patch mail's text and where it ends: the part of the mail that
``git am`` hands to ``git apply``, as :mod:`stackbench.patches.parser` shows it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

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


# ---- the functions a diff changes ------------------------------------------------------------

# C sources whose functions the kernel can have; other files (Kconfig, docs, scripts) change none
_C_SOURCE = (".c", ".h")
_DIFF_GIT = re.compile(r"^diff --git a/(\S+) b/(\S+)")
_HUNK_AT = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*\(")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# a declaration line above a function's opening brace never is one of these
_NOT_DECL = ("#", "}", "/*", "*", "//")


@dataclasses.dataclass(frozen=True)
class FunctionSpan:
    """A function definition in a C file: its name, first and last line (1-based, the
    declaration through the closing brace) and how it is declared."""

    name: str
    start: int
    end: int
    static: bool
    inline: bool


@dataclasses.dataclass(frozen=True)
class ChangedFunction:
    """A function whose code (comments and spacing aside) a diff changes: ``modified``,
    ``added`` (not in the parent's tree) or ``removed`` (not in the commit's)."""

    name: str
    path: str
    change: str
    static: bool
    inline: bool

    @property
    def kind(self) -> str:
        """ "static inline", "static", "inline" or "" (what the report notes beside it)."""
        return " ".join(w for w, on in (("static", self.static), ("inline", self.inline)) if on)


@dataclasses.dataclass
class FileChange:
    """One file of a diff: its old and new path (None when added/deleted) and the line
    numbers each side's changed lines have (removed lines in the old file, added ones in the
    new), with the function names git wrote in the hunk headers."""

    old_path: str | None
    new_path: str | None
    old_lines: set[int] = dataclasses.field(default_factory=set)
    new_lines: set[int] = dataclasses.field(default_factory=set)
    header_names: list[str] = dataclasses.field(default_factory=list)


def file_changes(diff: str) -> list[FileChange]:
    """The files a diff (``git format-patch`` text or a bare diff) changes, with their
    changed line numbers. Hunks are read by their line counts, so the signature after the
    last one is no removed line."""
    out: list[FileChange] = []
    cur: FileChange | None = None
    old_no = new_no = old_left = new_left = 0
    for line in diff.splitlines():
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == "-":
                cur.old_lines.add(old_no)  # type: ignore[union-attr]
                old_no, old_left = old_no + 1, old_left - 1
            elif tag == "+":
                cur.new_lines.add(new_no)  # type: ignore[union-attr]
                new_no, new_left = new_no + 1, new_left - 1
            elif tag == " " or line == "":
                old_no, new_no = old_no + 1, new_no + 1
                old_left, new_left = old_left - 1, new_left - 1
            elif tag != "\\":
                old_left = new_left = 0
            continue
        m = _DIFF_GIT.match(line)
        if m:
            cur = FileChange(m.group(1), m.group(2))
            out.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("--- /dev/null"):
            cur.old_path = None
        elif line.startswith("+++ /dev/null"):
            cur.new_path = None
        h = _HUNK_AT.match(line)
        if h:
            old_no, new_no = int(h.group(1)), int(h.group(3))
            old_left, new_left = _hunk_count(h.group(2)), _hunk_count(h.group(4))
            name = _NAME_BEFORE_PAREN.search(h.group(5))
            if name:
                cur.header_names.append(name.group(1))
    return out


def function_spans(source: str) -> list[FunctionSpan]:
    """The function definitions of a C file in the kernel's style: the opening brace alone
    at the start of a line, the closing one too, the declaration on the lines just above."""
    lines = source.splitlines()
    out: list[FunctionSpan] = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip() != "{":
            i += 1
            continue
        first = i
        while first > 0:
            above = lines[first - 1]
            bare = above.strip()
            if not bare or bare.startswith(_NOT_DECL) or bare.endswith((";", "*/")):
                break
            first -= 1
        decl = " ".join(ln.strip() for ln in lines[first:i])
        end = i + 1
        while end < len(lines) and not lines[end].startswith("}"):
            end += 1
        head = decl.split("(", 1)[0]
        name = _NAME_BEFORE_PAREN.search(decl)
        if name and "=" not in head and first < i:
            words = set(re.findall(r"\w+", head))
            out.append(
                FunctionSpan(
                    name=name.group(1),
                    start=first + 1,
                    end=end + 1,
                    static="static" in words,
                    inline=bool(words & {"inline", "__always_inline", "__inline__"}),
                )
            )
        i = end + 1
    return out


def _code_of(source: str, span: FunctionSpan) -> str:
    text = "\n".join(source.splitlines()[span.start - 1 : span.end])
    return " ".join(_COMMENT.sub(" ", text).split())


def _touched(spans: list[FunctionSpan], lines: set[int]) -> list[FunctionSpan]:
    return [s for s in spans if any(s.start <= n <= s.end for n in lines)]


def changed_functions(
    diff: str,
    old_source: Callable[[str], str | None],
    new_source: Callable[[str], str | None],
) -> list[ChangedFunction]:
    """The functions whose code a diff changes, read against the trees it goes between:
    ``old_source(path)`` / ``new_source(path)`` give a file's text in the parent's / the
    commit's tree (None when absent). A function counts when a changed line falls in it and
    its code differs once comments and spacing are dropped: a patch that only edits comments
    changes none. A C file whose text cannot be read falls back to its hunk headers' names."""
    out: dict[tuple[str, str], ChangedFunction] = {}
    for fc in file_changes(diff):
        path = fc.new_path or fc.old_path or ""
        if not path.endswith(_C_SOURCE):
            continue
        old = old_source(fc.old_path) if fc.old_path else ""
        new = new_source(fc.new_path) if fc.new_path else ""
        if old is None or new is None:
            for name in fc.header_names:
                out.setdefault((path, name), ChangedFunction(name, path, "modified", False, False))
            continue
        old_spans = {s.name: s for s in function_spans(old)}
        new_spans = {s.name: s for s in function_spans(new)}
        names = [s.name for s in _touched(list(new_spans.values()), fc.new_lines)]
        names += [s.name for s in _touched(list(old_spans.values()), fc.old_lines)]
        for name in dict.fromkeys(names):
            before, after = old_spans.get(name), new_spans.get(name)
            if before and after and _code_of(old, before) == _code_of(new, after):
                continue
            decl = after or before
            assert decl is not None
            change = "added" if before is None else "removed" if after is None else "modified"
            out.setdefault((path, name), ChangedFunction(name, path, change, decl.static, decl.inline))  # fmt: skip
    return list(out.values())


def callers(source: str, name: str) -> list[str]:
    """The functions of a C file whose bodies call ``name``: where a count of ``name``'s
    calls must come from when the compiler folded it into them."""
    call = re.compile(rf"\b{re.escape(name)}\s*\(")
    lines = source.splitlines()
    return [
        s.name
        for s in function_spans(source)
        if s.name != name and call.search(_COMMENT.sub(" ", "\n".join(lines[s.start : s.end])))
    ]
