"""mmtests' per-iteration bookkeeping files: ``tests-timestamp`` and ``tests-sysstate``.

Both record, per benchmark, ``test begin :: NAME <epoch>``, ``test end :: NAME <epoch> <rc>``
and ``time :: NAME <user> user <sys> system <elapsed> elapsed``. ``tests-sysstate`` also holds
snapshots of /proc files: ``file start :: /proc/vmstat`` opens the snapshot taken before the
benchmark and ``file end :: /proc/vmstat`` the one taken after; a snapshot runs until the next
bookkeeping line. /proc/vmstat snapshots are parsed into counters; the others (zoneinfo,
meminfo...) are kept as raw text.

mmtests writes more than these (run-mmtests.sh, shellpacks/common.sh): ``arch :: x86_64``,
``raid-create :: N``, ``status :: RC``, ``mount :: start`` followed by the output of
``mount``... and later versions add more. Any other ``key :: value`` line is kept in
``Bookkeeping.extra`` (the lines after it, up to the next ``key :: value`` line, are its
output and are not read); only a line that breaks a known record is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stackbench.errors import InputError

_HEADER = re.compile(
    r"^(start|version|finish|test begin|test end|time|file start|file end) :: ?(.*)$"
)
# what GNU time writes before its -f line when the command failed; run-mmtests.sh copies
# time's output file (``timestamp``) into both files after 'test end'
_TIME_STATUS = re.compile(r"^Command (exited with non-zero status|terminated by signal) (\d+)$")
# any other bookkeeping line: a key at the start of the line (no indentation), then " :: "
_OTHER = re.compile(r"^([A-Za-z/][\w./-]*(?: [\w./-]+)*) :: ?(.*)$")
_TIME = re.compile(
    r"^(\S+) (\d+(?:\.\d+)?) user (\d+(?:\.\d+)?) system (\d+(?:\.\d+)?) elapsed\s*$"
)
VMSTAT = "/proc/vmstat"


@dataclass
class BenchRecord:
    """What the bookkeeping files say about one benchmark of one iteration."""

    name: str
    begin: int | None = None
    end: int | None = None
    rc: int | None = None
    user: float | None = None
    system: float | None = None
    elapsed: float | None = None
    start_files: dict[str, str] = field(default_factory=dict)  # path -> raw snapshot
    end_files: dict[str, str] = field(default_factory=dict)
    # ("start"|"end", path) -> line number of the snapshot's first line, for errors
    file_lines: dict[tuple[str, str], int] = field(default_factory=dict)

    def durations(self) -> dict[str, float]:
        if self.elapsed is None:
            return {}
        return {"user": self.user or 0.0, "system": self.system or 0.0, "elapsed": self.elapsed}


@dataclass
class Bookkeeping:
    tests: dict[str, BenchRecord] = field(default_factory=dict)
    version: str = ""
    start: int | None = None
    finish: int | None = None
    extra: dict[str, str] = field(default_factory=dict)  # other "key :: value" lines


def _epoch(word: str, source: str, lineno: int, what: str) -> int:
    if not word.isdigit():
        raise InputError(source, f"line {lineno}: {what} time {word!r} is not an epoch")
    return int(word)


def parse_bookkeeping(text: str, source: str, *, snapshots: bool) -> Bookkeeping:
    """Parse ``tests-timestamp`` (``snapshots=False``) or ``tests-sysstate`` (True).

    A benchmark that began but never ended, or a ``file start`` snapshot without its
    ``file end``, means the file was cut short: that is an error, not an empty result.
    """
    book = Bookkeeping()
    current: BenchRecord | None = None
    block: list[str] | None = None
    block_owner: tuple[dict[str, str], str] | None = None

    def close_block() -> None:
        nonlocal block, block_owner
        if block is not None and block_owner is not None:
            files, path = block_owner
            files[path] = "".join(block)
        block = None
        block_owner = None

    in_other = False  # inside the output that follows an unknown "key :: value" line
    ended: BenchRecord | None = None  # the test whose 'test end' came last
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        m = _HEADER.match(line.rstrip("\n"))
        other = None if m else _OTHER.match(line.rstrip("\n"))
        if other:
            close_block()
            key, value = other.group(1), other.group(2).strip()
            book.extra[key] = value if key not in book.extra else f"{book.extra[key]}\n{value}"
            in_other = True
            continue
        if not m:
            if block is not None:
                block.append(line)
            elif (status := _TIME_STATUS.match(line.strip())) and ended is not None:
                if ended.rc is None:  # older mmtests log no exit code on 'test end'
                    code = int(status.group(2))
                    ended.rc = code if status.group(1).startswith("exited") else 128 + code
            elif line.strip() and not in_other:
                raise InputError(source, f"line {lineno}: unexpected line {line.strip()!r}")
            continue
        close_block()
        in_other = False
        kind, rest = m.group(1), m.group(2).strip()
        words = rest.split()
        if kind == "version":
            book.version = rest
        elif kind in ("start", "finish"):
            value = _epoch(rest, source, lineno, kind)
            if kind == "start":
                book.start = value
            else:
                book.finish = value
        elif kind == "test begin":
            if len(words) != 2:
                raise InputError(source, f"line {lineno}: malformed 'test begin' line")
            if current is not None:
                raise InputError(
                    source, f"line {lineno}: test {words[0]!r} begins before {current.name!r} ended"
                )
            current = book.tests.setdefault(words[0], BenchRecord(words[0]))
            current.begin = _epoch(words[1], source, lineno, "begin")
        elif kind == "test end":
            if len(words) not in (2, 3):
                raise InputError(source, f"line {lineno}: malformed 'test end' line")
            if current is None or current.name != words[0]:
                raise InputError(source, f"line {lineno}: test {words[0]!r} ends but never began")
            current.end = _epoch(words[1], source, lineno, "end")
            if len(words) == 3:
                rc = words[2].lstrip("-")
                if not rc.isdigit():
                    raise InputError(
                        source, f"line {lineno}: exit code {words[2]!r} is not a number"
                    )
                current.rc = int(words[2])
            _check_snapshots(current, source)
            ended, current = current, None
        elif kind == "time":
            t = _TIME.match(rest)
            if not t:
                raise InputError(
                    source,
                    f"line {lineno}: malformed time line (want 'time :: NAME <user> user "
                    f"<sys> system <elapsed> elapsed', got {line.strip()!r})",
                )
            rec = book.tests.setdefault(t.group(1), BenchRecord(t.group(1)))
            rec.user, rec.system, rec.elapsed = (float(t.group(i)) for i in (2, 3, 4))
        else:  # file start / file end
            if not snapshots:
                raise InputError(source, f"line {lineno}: a /proc snapshot in a timestamp file")
            if current is None:
                raise InputError(source, f"line {lineno}: '{kind} :: {rest}' outside a test")
            files = current.start_files if kind == "file start" else current.end_files
            current.file_lines[(kind.split()[1], rest)] = lineno + 1
            block = []
            block_owner = (files, rest)
    close_block()
    if current is not None:
        raise InputError(
            source, f"test {current.name!r} began but has no 'test end' line (file truncated?)"
        )
    for rec in book.tests.values():
        if rec.begin is None:
            raise InputError(source, f"test {rec.name!r} has a time line but no 'test begin'")
    return book


def _check_snapshots(rec: BenchRecord, source: str) -> None:
    for path in rec.start_files:
        if path not in rec.end_files:
            raise InputError(
                source,
                f"test {rec.name!r}: 'file start :: {path}' has no matching "
                f"'file end :: {path}' (snapshot truncated?)",
            )
    # an end snapshot alone is fine: run-mmtests.sh zeroes /proc/lock_stat when a test
    # begins and logs only 'file end :: /proc/lock_stat'


def parse_timestamp(text: str, source: str = "tests-timestamp") -> Bookkeeping:
    return parse_bookkeeping(text, source, snapshots=False)


def parse_sysstate(text: str, source: str = "tests-sysstate") -> Bookkeeping:
    return parse_bookkeeping(text, source, snapshots=True)


def parse_vmstat(
    raw: str, source: str, what: str = VMSTAT, first_line: int | None = None
) -> dict[str, int]:
    """Counters of one /proc/vmstat snapshot; any line that is not ``name <integer>`` is an
    error, and so is an empty snapshot (it was cut short). ``first_line``: the snapshot's
    line number in its file, so an error names the file's line."""
    out: dict[str, int] = {}
    for i, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        words = line.split()
        if len(words) != 2 or not words[1].lstrip("-").isdigit():
            at = f"line {first_line + i}: " if first_line is not None else ""
            raise InputError(source, f"{at}{what} snapshot: malformed line {line.strip()!r}")
        out[words[0]] = int(words[1])
    if not out:
        raise InputError(source, f"{what} snapshot is empty (truncated?)")
    return out


def vmstat_delta(start: dict[str, int], end: dict[str, int]) -> dict[str, int]:
    """end - start of every counter of the end snapshot; a counter missing from the start
    snapshot counts from 0 there, as mmtests does."""
    return {k: v - start.get(k, 0) for k, v in end.items()}


def find_vmstat(rec: BenchRecord, source: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """The before/after vmstat counters of one benchmark, or None without snapshots."""
    if VMSTAT not in rec.start_files:
        return None
    lines = rec.file_lines
    start = parse_vmstat(
        rec.start_files[VMSTAT], source, f"start {VMSTAT}", lines.get(("start", VMSTAT))
    )
    end = parse_vmstat(rec.end_files[VMSTAT], source, f"end {VMSTAT}", lines.get(("end", VMSTAT)))
    return start, end
