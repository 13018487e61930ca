"""/proc/buddyinfo and the fragmentation figures the kernel derives from the same free lists.

``/proc/buddyinfo`` has one line per zone: ``Node 0, zone   Normal   <free blocks of order 0>
... <order MAX_ORDER-1>``. From those counts the kernel computes (mm/vmstat.c, mm/compaction.c)

- the unusable free index of an order: the share of free memory in blocks too small for it,
  ``(free_pages - suitable_blocks << order) / free_pages`` (debugfs ``unusable_index``);
- the external fragmentation index of an order: only meaningful when the allocation would
  fail, ``1 - (1 + free_pages / 2^order) / free_blocks`` (debugfs ``extfrag_index``; -1 when a
  suitable block exists);
- the fragmentation score of a zone, which proactive compaction (seed 001) keeps between its
  thresholds: the unusable share for the huge page order, in percent.

We compute them from buddyinfo so every guest kernel gets them, with or without debugfs;
the debugfs files, when the kernel has them, are kept beside as read.
"""

from __future__ import annotations

import re

from stackbench.errors import InputError

HPAGE_ORDER = 9
_LINE = re.compile(r"^Node\s+(\d+),\s*zone\s+(\S+)((?:\s+\d+)+)\s*$")


def parse(text: str, source: str = "/proc/buddyinfo") -> dict[str, list[int]]:
    """``{"Node0/Normal": [free blocks of order 0, 1, ...]}``."""
    out: dict[str, list[int]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise InputError(source, f"line {lineno}: not a buddyinfo line: {line.strip()!r}")
        out[f"Node{m.group(1)}/{m.group(2)}"] = [int(x) for x in m.group(3).split()]
    if not out:
        raise InputError(source, "no zones")
    return out


def _info(counts: list[int], order: int) -> tuple[int, int, int]:
    """(free pages, free blocks, free blocks of at least ``order`` in units of 2^order)."""
    free_pages = sum(n << o for o, n in enumerate(counts))
    free_blocks = sum(counts)
    suitable = sum(n << (o - order) for o, n in enumerate(counts) if o >= order)
    return free_pages, free_blocks, suitable


def unusable_index(counts: list[int], order: int) -> float:
    """0..1: the share of free memory unusable for an allocation of ``order``."""
    free_pages, _, suitable = _info(counts, order)
    if not free_pages:
        return 1.0
    return (free_pages - (suitable << order)) / free_pages


def extfrag_index(counts: list[int], order: int) -> float:
    """The kernel's fragmentation index: -1 when a block of ``order`` is free (no failure
    to explain), towards 0 when failure is for lack of memory, towards 1 for fragmentation."""
    free_pages, free_blocks, suitable = _info(counts, order)
    if not free_blocks:
        return 0.0
    if suitable:
        return -1.0
    # integer arithmetic in thousandths, as the kernel reports it
    return (1000 - (1000 + free_pages * 1000 // (1 << order)) // free_blocks) / 1000


def score(counts: list[int], order: int = HPAGE_ORDER) -> float:
    """The zone's fragmentation score (0..100) as proactive compaction sees it."""
    free_pages, _, suitable = _info(counts, order)
    if not free_pages:
        return 0.0
    return round((free_pages - (suitable << order)) * 100 / free_pages, 2)


def summary(text: str, source: str = "/proc/buddyinfo") -> dict[str, dict[str, object]]:
    """Per zone: free pages, the score, and the unusable and extfrag indexes per order."""
    out: dict[str, dict[str, object]] = {}
    for zone, counts in parse(text, source).items():
        out[zone] = {
            "free_pages": _info(counts, 0)[0],
            "score": score(counts),
            "unusable_index": [round(unusable_index(counts, o), 3) for o in range(len(counts))],
            "extfrag_index": [round(extfrag_index(counts, o), 3) for o in range(len(counts))],
        }
    return out
