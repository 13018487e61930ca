"""mmtests work-log directories written from a seeded random source, for running the real
compare-mmtests.pl beside stackbench on the same logs (test_mmtests_ci_conformance.py).

The layout is the one run-mmtests.sh leaves: ``<run>/iter-N/<bench>/logs/threads-T.log.gz``
plus the iteration's ``tests-timestamp`` and ``tests-sysstate`` (with /proc/vmstat snapshots
before and after). The logs are in the format thpscale, thpchallenge and thpcompact print.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

VMSTAT_KEYS = ("nr_free_pages", "pgfault", "thp_fault_alloc", "compact_stall")


def fault_log(rng: random.Random, threads: int, faults: int, huge_share: float, file: bool) -> str:
    """One threads-N.log: init lines and ``faults`` faults per thread, huge with the given
    probability (0 or 1 give a size that never occurs), some remote or of unknown node."""
    lines = [f"Running with {threads} thread{'s' if threads > 1 else ' '}", "", ""]
    lines += [f"anoninit {t} {rng.randint(1000, 200000):12d}" for t in range(threads)]
    if file:
        lines += [f"fileinit {t} {rng.randint(100, 90000):12d}" for t in range(threads)]
    stamp = 1_700_000_000
    for t in range(threads):
        for _ in range(faults):
            huge = rng.random() < huge_share
            latency = rng.randint(800, 7000) if huge else rng.randint(60, 240)
            where = rng.choices([1, 0, -1], weights=[8, 1, 1])[0]
            stamp += 1
            lines.append(
                f"fault {t} {'huge' if huge else 'base'} {latency:12d} "
                f"{stamp}.{rng.randint(0, 999999)} {where}"
            )
    return "\n".join(lines) + "\n"


def _vmstat(rng: random.Random) -> str:
    return "".join(f"{k} {rng.randint(0, 10**6)}\n" for k in VMSTAT_KEYS)


def write_run(
    root: Path,
    name: str,
    bench: str,
    seed: int,
    iterations: int = 2,
    threads: tuple[int, ...] = (1, 3, 5),
    huge_share: dict[int, float] | None = None,
) -> Path:
    """``root/<name>``: ``iterations`` iterations of ``bench``; ``huge_share`` per thread
    count (default 0.8)."""
    rng = random.Random(seed)
    run = root / name
    for it in range(iterations):
        d = run / f"iter-{it}"
        logs = d / bench / "logs"
        logs.mkdir(parents=True)
        for t in threads:
            share = (huge_share or {}).get(t, 0.8)
            text = fault_log(rng, t, rng.randint(12, 30), share, file=bench != "thpchallenge")
            (logs / f"threads-{t}.log.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        begin = 1_700_000_000 + it * 1000
        user, system, elapsed = rng.randint(1, 40), rng.randint(50, 300), rng.randint(300, 600)
        (d / "tests-timestamp").write_text(
            f"start :: {begin}\ntest begin :: {bench} {begin + 1}\n"
            f"test end :: {bench} {begin + elapsed} 0\n"
            f"time :: {bench} {user}.00 user {system}.00 system {elapsed}.00 elapsed\n"
            f"finish :: {begin + elapsed + 1}\n"
        )
        (d / "tests-sysstate").write_text(
            f"start :: {begin}\ntest begin :: {bench} {begin + 1}\n"
            f"file start :: /proc/vmstat\n{_vmstat(rng)}"
            f"file end :: /proc/vmstat\n{_vmstat(rng)}"
            f"test end :: {bench} {begin + elapsed} 0\nfinish :: {begin + elapsed + 1}\n"
        )
    return run
