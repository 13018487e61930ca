"""What the guest's function tracer counted during a run of an evidence boot
(jobs/benchmarks/guest/init.sh writes it, jobs/executors/coverage_stage.py asks for it): the
calls of each function the series' patches change, as ``<function> <calls>`` lines (the
guest counts the trace buffer's entries; the same reader takes ftrace's
``trace_stat/function<cpu>`` tables, summing the CPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def parse_trace_stat(text: str) -> dict[str, int]:
    """Calls per function from the concatenated ``trace_stat/function*`` files: each has a
    ``Function  Hit ...`` header and a dashed line, then one row per function with calls on
    that CPU."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        calls[parts[0]] = calls.get(parts[0], 0) + int(parts[1])
    return calls


def read_run(run_dir: Path, wanted: list[str]) -> dict[str, Any] | None:
    """A run's coverage: ``calls`` (every wanted, traceable function, 0 when not called),
    ``untraceable`` (names the kernel refused: inlined, notrace or absent), or ``error``
    when the kernel had no profiler. None when the boot asked for none."""
    if not wanted:
        return None
    error = run_dir / "funcprof-error"
    if error.is_file():
        return {"error": error.read_text(errors="replace").strip()}
    untraceable_file = run_dir / "funcprof-untraceable"
    if not untraceable_file.is_file():
        return {"error": "the guest did not start the function profiler for this run"}
    untraceable = sorted(set(untraceable_file.read_text().split()))
    prof = run_dir / "funcprof"
    counted = parse_trace_stat(prof.read_text(errors="replace")) if prof.is_file() else {}
    calls = {fn: counted.get(fn, 0) for fn in wanted if fn not in untraceable}
    out: dict[str, Any] = {"calls": calls, "untraceable": untraceable}
    overrun = run_dir / "funcprof-overrun"
    lost = overrun.read_text().strip() if overrun.is_file() else ""
    if lost.isdigit() and int(lost):
        # the ring buffer was full: every count is a lower bound
        out["lost_events"] = int(lost)
    return out
