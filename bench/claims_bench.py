"""How fast claims are read from mails: the seeds and mmtests' real outputs repeated into a
few megabytes (a long thread's archive), and the same size of prose without a table.

    STACKBENCH_SHARED=/work/shared .venv/bin/python bench/claims_bench.py

Prints MB/s for each and the floor it is held to (1 MB/s: a 100 KB cover letter in a
tenth of a second, a robot report's thread in seconds)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from stackbench.patches import claims

FLOOR_MB_S = 1.0
SHARED = Path(
    os.environ.get("STACKBENCH_SHARED") or Path(__file__).resolve().parents[1].parent / "shared"
)


def corpus() -> str:
    files = sorted((SHARED / "seeds").glob("*.txt")) + sorted(
        (SHARED / "fixtures" / "mmtests" / "real-outputs").glob("*.txt")
    )
    if not files:
        sys.exit(f"skipped: no seeds under {SHARED} (set STACKBENCH_SHARED)")
    return "\n".join(f.read_text(errors="replace") for f in files)


def rate(text: str, repeat: int = 3) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = len(claims.parse(text))
        times.append(time.perf_counter() - t0)
    return len(text.encode()) / 1e6 / statistics.median(times), n


def main() -> None:
    tables = corpus()
    big = tables * max(1, 3_000_000 // len(tables))
    prose = ("the series makes compaction faster on 12 of 40 machines, said the author. " * 40_000)[
        : len(big)
    ]
    for name, text in (("tables", big), ("prose", prose)):
        mb_s, n = rate(text)
        verdict = "met" if mb_s >= FLOOR_MB_S else "NOT met"
        print(f"{name:7s} {len(text) / 1e6:5.1f} MB  {n:6d} claims  {mb_s:6.2f} MB/s  "
              f"floor {FLOOR_MB_S} MB/s, {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
