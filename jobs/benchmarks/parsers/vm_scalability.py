"""LKP's parse of raw vm-scalability output, reimplemented from its documented behaviour.

The output must equal what LKP's ``stats/vm-scalability`` prints for the same input, because
results imported from LKP and results produced here land in the same tables and are compared
with each other. So the quirks are kept on purpose: the migrate rate is added to the byte
count, the single-sample stddev is scaled by the number of tasks, ``%d`` truncates means.

Raw input: usemem's ``N bytes / U usecs = K KB/s``, dd's ``N bytes (...) copied, S s, ...``,
``N bytes truncated|faulted in T1-T0 seconds``, ``N bytes remapped, U usecs, R MB/s``,
``N * M bytes migrated, U usecs, R MB/s`` and ``U usecs to free memory``; every line naming
``./case-<test>`` closes the sample collected so far.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PREFIX = "vm-scalability."

# The patterns follow the raw line formats (FORMATS.md section 1); order matters, the first
# match wins, exactly one kind per line.
_USEMEM = re.compile(r"^\.*(\d+) bytes / (\d+) usecs = (\d+) KB.s")
_DD = re.compile(
    r"(\d+) bytes \([0-9.]+ .B(?:, [0-9.]+ .iB)?\) copied, ([0-9.]+) s, ([0-9.]+) .B.s"
)
_TRUNCATED = re.compile(r"(\d+) bytes truncated in ([0-9.]+)-([0-9.]+) seconds")
_FAULTED = re.compile(r"(\d+) bytes faulted in ([0-9.]+)-([0-9.]+) seconds")
_MIGRATED = re.compile(r"\d+ \* \d+ bytes migrated, \d+ usecs, (\d+) MB.s")
_REMAPPED = re.compile(r"(\d+) bytes remapped, (\d+) usecs, (\d+) MB.s")
_FREE = re.compile(r"(\d+) usecs to free memory")
_CASE = re.compile(r"\./case-[a-z-]+")

# keys printed with %d (LKP truncates the float mean), with %g, and with %.2f
INT_KEYS = frozenset({"throughput", "median", "throughput_fault", "median_fault", "migrate_mbps"})
FLOAT2_KEYS = frozenset({"workload"})
# LKP pads two keys after the colon so their values line up under "throughput: "
_PADDED = {"stddev%": "   ", "free_time": "  ", "stddev_fault%": "   "}


@dataclass
class _Series:
    """One kind of per-task rate (normal or ``*_fault``) over all samples."""

    kbps: list[float] = field(default_factory=list)  # tasks of the current sample
    sums: list[float] = field(default_factory=list)  # per sample: sum of task rates
    medians: list[float] = field(default_factory=list)  # per sample: upper median task rate
    last: list[float] = field(default_factory=list)  # tasks of the last closed sample

    def close_sample(self) -> None:
        if not self.kbps:
            return
        tasks = sorted(self.kbps)
        self.sums.append(math.fsum(tasks) if _any_float(tasks) else sum(tasks))
        self.medians.append(tasks[len(tasks) // 2])
        self.last = tasks
        self.kbps = []


def _any_float(values: Iterable[float]) -> bool:
    return any(isinstance(v, float) for v in values)


def _mean(values: Sequence[float]) -> float:
    # compensated summation, as Ruby's Array#sum does for floats
    return math.fsum(values) / len(values)


def _pstddev(values: Sequence[float]) -> float:
    """Population standard deviation, as LKP's Array#standard_deviation."""
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def _div(a: float, b: float) -> float:
    # Ruby float division by zero gives Inf/NaN instead of raising; keep the parse total
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 else math.copysign(math.inf, a)


def _relative_stddev(s: _Series) -> float:
    """stddev/mean over samples; with one sample, LKP's per-task variant scaled by tasks."""
    if len(s.sums) > 1:
        return _div(_pstddev(s.sums), _mean(s.sums))
    tasks = s.last
    return _div(_pstddev(tasks) * len(tasks), _mean(tasks))


def _median_stddev(s: _Series) -> float:
    if len(s.medians) > 1:
        return _div(_pstddev(s.medians), _mean(s.medians))
    return 0.0


def _trunc(x: float) -> int | float:
    """Ruby's ``%d`` of a Float: truncation toward zero (non-finite values kept as they are)."""
    return int(x) if math.isfinite(x) else x


def _g(x: float) -> float | int:
    """The value LKP's ``%g`` prints, read back as a number (what lands in stats.json)."""
    text = format_g(x)
    try:
        v = float(text)
    except ValueError:
        return x
    return int(v) if v.is_integer() and "e" not in text and "." not in text else v


def format_g(x: float) -> str:
    """C/Ruby ``%g``; Ruby spells the non-finite values NaN, Inf and -Inf."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return f"{x:g}"


def parse_line(line: str, state: _State) -> None:
    m = _USEMEM.search(line)
    if m:
        state.bytes += int(m.group(1))
        state.normal.kbps.append(int(m.group(3)))
        return
    m = _DD.search(line)
    if m:
        n = int(m.group(1))
        state.bytes += n
        state.normal.kbps.append(_div(n >> 10, float(m.group(2))))
        return
    m = _TRUNCATED.search(line)
    if m:
        n = int(m.group(1))
        state.bytes += n
        state.normal.kbps.append(_div(n >> 10, float(m.group(2)) - float(m.group(3))))
        return
    m = _FAULTED.search(line)
    if m:
        n = int(m.group(1))
        state.bytes_fault += n
        state.fault.kbps.append(_div(n >> 10, float(m.group(2)) - float(m.group(3))))
        return
    m = _MIGRATED.search(line)
    if m:
        rate = int(m.group(1))
        state.bytes += rate  # LKP adds the MB/s figure to the byte count; kept for parity
        state.stats.append(("migrate_mbps", rate))
        return
    m = _REMAPPED.search(line)
    if m:
        n = int(m.group(1))
        state.bytes += n
        usecs_k = int(m.group(2)) >> 10
        state.normal.kbps.append(n // usecs_k if usecs_k else _div(n, 0))
        return
    m = _FREE.search(line)
    if m:
        state.free_secs.append(int(m.group(1)) / 1_000_000.0)
        return
    if _CASE.search(line):
        state.normal.close_sample()
        state.fault.close_sample()


@dataclass
class _State:
    normal: _Series = field(default_factory=_Series)
    fault: _Series = field(default_factory=_Series)
    bytes: int = 0
    bytes_fault: int = 0
    free_secs: list[float] = field(default_factory=list)
    stats: list[tuple[str, float | int]] = field(default_factory=list)


def parse(text: str) -> list[tuple[str, float | int]]:
    """The stats LKP derives from raw vm-scalability output, in LKP's print order.

    Keys are unprefixed (``throughput``, ``stddev%``...), as LKP's parser prints them; the
    values are what LKP's printed text reads back as (ints for ``%d`` keys).
    """
    state = _State()
    for line in text.splitlines():
        parse_line(line, state)
    # the last sample is closed by the end of the output, not by a case line
    pending_tasks = state.normal.kbps
    state.normal.close_sample()
    state.fault.close_sample()
    out = state.stats
    normal = state.normal
    if not normal.sums:
        return out
    out.append(("throughput", _trunc(_mean(normal.sums))))
    # LKP stops after the throughput when the output ends right after a case line
    if not pending_tasks:
        return out
    out.append(("stddev%", _g(_relative_stddev(normal) * 100)))
    if state.free_secs:
        out.append(("free_time", _g(_mean(state.free_secs))))
    out.append(("median", _trunc(_mean(normal.medians))))
    out.append(("median_stddev%", _g(_median_stddev(normal) * 100)))
    out.append(("workload", float(f"{state.bytes / 1024:.2f}")))
    fault = state.fault
    if fault.sums:
        out.append(("throughput_fault", _trunc(_mean(fault.sums))))
        out.append(("stddev_fault%", _g(_relative_stddev(fault) * 100)))
        out.append(("median_fault", _trunc(_mean(fault.medians))))
        out.append(("median_fault_stddev%", _g(_median_stddev(fault) * 100)))
    return out


def format_value(key: str, value: float | int) -> str:
    if key in INT_KEYS and math.isfinite(value):
        return str(int(value))
    if key in FLOAT2_KEYS:
        return f"{value:.2f}"
    return format_g(float(value))


def format_stats(stats: Iterable[tuple[str, float | int]]) -> str:
    """``key: value`` lines exactly as LKP's parser prints them."""
    lines = []
    for key, value in stats:
        sep = _PADDED.get(key, " ")
        lines.append(f"{key}:{sep}{format_value(key, value)}\n")
    return "".join(lines)


def to_samples(stats: Iterable[tuple[str, float | int]]) -> dict[str, list[float]]:
    """Samples for ingest: ``vm-scalability.<key>`` -> values (a key may repeat)."""
    out: dict[str, list[float]] = {}
    for key, value in stats:
        out.setdefault(PREFIX + key, []).append(float(value))
    return out
