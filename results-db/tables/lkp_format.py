"""The text of LKP's ``lkp ncompare`` table: cells, rows, headers and row order.

Layout and number formats follow reference/FORMATS.md section 3. This module is plain
Python on purpose (no numpy, no dataclasses): a table computed from kept column summaries
(lkp_columns) is formatted here by a command that must start, read and print in tens of
milliseconds. lkp.py computes the statistics and formats through the same functions, so
both paths print the same bytes.
"""

from __future__ import annotations

import math

ABS_WIDTH = 10
REL_WIDTH = 10
ERR_WIDTH = 6
FIRST_WIDTH = ABS_WIDTH + ERR_WIDTH  # 16
COL_WIDTH = FIRST_WIDTH + REL_WIDTH + 1  # 27
GROUP_RULE = "=" * 89
COMPARE_AXIS = "commit"
# perf-profile shares are shown by their leading two name components when sorting
SORT_KEY_COMPONENTS = {"perf-profile": 2}

# LKP's monitors: stat groups that are not a benchmark's own results
_MONITOR_NAMES = """boot-meminfo boot-memory boot-slabinfo boot-time buddyinfo cpufreq-stats
    cpuidle diskstats dmesg energy ftrace heartbeat interrupts iostat kmsg last_state
    latency_stats lock_stat max_iostat meminfo memmap mpstat numa-meminfo numa-numastat
    numa-vmstat pagetypeinfo perf-c2c perf-profile perf-sched perf-stat pmeter proc-stat
    proc-vmstat sched_debug slabinfo softirqs stderr time turbostat uptime vmstat zoneinfo"""
MONITORS = frozenset(_MONITOR_NAMES.split())


def stat_base(stat: str) -> str:
    return stat.partition(".")[0]


def is_test_base(base: str) -> bool:
    """A benchmark's own stat group (vm-scalability, thpscale...) rather than a monitor."""
    return base not in MONITORS


def uses_absolute_change(stat: str) -> bool:
    """Percentages and perf-profile shares change by points, not by percent."""
    return stat.startswith("perf-profile") or stat.endswith("%")


# printf specs built once: a table formats tens of thousands of cells, and LKP's layout is
# defined by C/Ruby printf conversions
CHANGE_SPECS = {
    (small, absolute): f"%+{REL_WIDTH}{'.1f' if small else '.2g'}{'  ' if absolute else '%% '}"
    for small in (True, False)
    for absolute in (True, False)
}
_AVG_SMALL, _AVG_BIG, _AVG_INT = f"%{ABS_WIDTH}.2f", f"%{ABS_WIDTH}.4g", f"%{ABS_WIDTH}d"
_STDDEV, _NO_STDDEV = f" ±%{ERR_WIDTH - 3}d%%", " " * ERR_WIDTH


def avg_cell(avg: float, stddev: float) -> str:
    """A kernel's part of a %stddev row: its average, then ``±N%`` when the relative
    standard deviation is over 2% (``stddev`` -1 for a single run)."""
    if abs(avg) < 1000:
        cell = _AVG_SMALL % avg
    elif abs(avg) > 100_000_000 or not math.isfinite(avg):
        cell = _AVG_BIG % avg
    else:
        cell = _AVG_INT % math.trunc(avg)
    if avg != 0:
        stddev = 100 * stddev / avg
    if stddev > 2 and math.isfinite(stddev):
        return cell + _STDDEV % math.trunc(stddev)
    return cell + _NO_STDDEV


# the cell of a kernel without the stat (LKP counts it as 0, without a deviation)
ABSENT_CELL = avg_cell(0.0, -1.0)


def change(avg: float, base: float, absolute: bool) -> float:
    """A %change column's value: points for ``absolute`` stats, else percent of the base
    (LKP's guard makes a zero base 1e-100). The same IEEE operations, in the same order, as
    lkp.calc_stats does on arrays, so the same bits."""
    if absolute:
        return avg - base
    guarded = base if base != 0 else 1e-100
    return 100.0 * (avg - guarded) / guarded


def change_cell(p: float, absolute: bool) -> str:
    return CHANGE_SPECS[(abs(p) < 100_000, absolute)] % p


def failure_row(stat: str, fails: list[float], runs: list[int], changes: list[float]) -> str:
    parts = []
    for i, f in enumerate(fails):
        if i:
            parts.append(f"%{REL_WIDTH}.0f%% " % changes[i - 1])
        if f == 0:
            parts.append(" " * (ABS_WIDTH + 1))
        else:
            parts.append(f"%{ABS_WIDTH + 1}d" % math.trunc(f))
        parts.append(f":%-{ERR_WIDTH - 2}d" % runs[i])
    return "".join(parts) + f"  {stat}\n"


def failure_changes(fails: list[float], runs: list[int]) -> list[float]:
    """%reproduction: LKP divides column i+1's failures by column i's run count; kept for
    identical output."""
    reproduce0 = fails[0] / runs[0]
    return [100 * (f / runs[i] - reproduce0) for i, f in enumerate(fails[1:])]


def group_header(labels: list[str], axes: list[dict[str, str]]) -> str:
    """The group's rule, its axes (those all columns share, else each column's), the
    commits and the column heads."""
    first = axes[0]
    common = {k: v for k, v in sorted(first.items()) if all(a.get(k) == v for a in axes[1:])}
    out = [GROUP_RULE + "\n"]
    if common:
        out.append("/".join(common) + ":\n")
        out.append("  " + "/".join(common.values()) + "\n\n")
    else:
        for a in axes:
            out.append("/".join(a) + ":\n")
            out.append("  " + "/".join(a.values()) + "\n\n")
    out.append(f"{COMPARE_AXIS}: \n")
    out.extend(f"  {label}\n" for label in labels)
    out.append("\n")
    heads = [f"{labels[0][:FIRST_WIDTH]:>{FIRST_WIDTH}} "]
    heads += [f"{label[:COL_WIDTH]:>{COL_WIDTH}} " for label in labels[1:]]
    out.append("".join(heads) + "\n")
    out.append("-" * FIRST_WIDTH + " " + ("-" * COL_WIDTH + " ") * (len(labels) - 1) + "\n")
    return "".join(out)


def perf_header(n: int) -> str:
    return (
        "         %stddev" + "     %change         %stddev" * n + "\n"
        "             \\  " + "        |                \\  " * n + "\n"
    )


def failure_header(n: int) -> str:
    return (
        "       fail:runs" + "  %reproduction    fail:runs" * n + "\n"
        "           |    " + "         |             |    " * n + "\n"
    )


def row_order(stats: list[tuple[str, bool]]):
    """The sort key of LKP's row order for a group's rows ``(stat, is failure)``, in the
    order the rows were made: call it as ``key(stat, changes)``. The benchmark's own stats
    come first, then monitors with fewer shown stats first, each by name; failure stats
    ahead of everything. Names are unique, so ``changes`` only orders perf-profile rows
    shown by the same leading components (and equal changes keep the rows' order)."""
    base_count: dict[str, int] = {}
    for stat, failure in stats:
        base = stat_base(stat)
        base_count.setdefault(base, -10_000 if failure else 0)
        base_count[base] += 1
    for base, c in base_count.items():
        if c > 0 and is_test_base(base):
            base_count[base] = 0

    def key(stat: str, changes: list[float]) -> tuple:
        base = stat_base(stat)
        n = SORT_KEY_COMPONENTS.get(base)
        name = ".".join(stat.split(".")[:n]) if n else stat
        return (base_count[base], name, changes)

    return key


def nothing_shown(labels: list[str], all_rows: bool) -> str:
    what = "no stat changed by LKP's rule" if not all_rows else "no stats"
    return f"{what} between {', '.join(labels)} (--all shows all)\n"
