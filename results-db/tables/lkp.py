"""LKP's ``lkp ncompare`` table (``%stddev %change``), as the test robot mails show it.

Layout and number formats follow reference/FORMATS.md section 3 (checked against
lkp-tests' lib/compare.rb behaviour and real reports). One group per job; the columns are
the requested kernels that ran it, the first being the base every other column is compared
with. A kernel's value of a stat is the mean over its runs of the per-run value (a run with
several samples of the stat counts their mean); the ``±`` is the population standard
deviation over runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stackbench.resultsdb import query
from stackbench.resultsdb.tables import lkp_fail, lkp_rule, lkp_unite

ABS_WIDTH = 10
REL_WIDTH = 10
ERR_WIDTH = 6
FIRST_WIDTH = ABS_WIDTH + ERR_WIDTH  # 16
COL_WIDTH = FIRST_WIDTH + REL_WIDTH + 1  # 27
GROUP_RULE = "=" * 89
COMPARE_AXIS = "commit"
# perf-profile shares are shown by their leading two name components when sorting
_SORT_KEY_COMPONENTS = {"perf-profile": 2}


@dataclass
class Column:
    """One kernel in one group: ``matrix[stat]`` holds one value per run (LKP's matrix.json)."""

    kernel: query.Kernel
    runs: int
    matrix: dict[str, list[float]]
    axes: dict[str, str]


@dataclass
class Group:
    job: query.JobRow
    columns: list[Column] = field(default_factory=list)

    def common_axes(self) -> dict[str, str]:
        first = self.columns[0].axes
        return {
            k: v
            for k, v in sorted(first.items())
            if all(c.axes.get(k) == v for c in self.columns[1:])
        }


@dataclass
class StatRow:
    stat: str
    failure: bool
    values: list[list[float] | None]
    runs: list[int]
    avgs: list[float] = field(default_factory=list)
    stddevs: list[float] = field(default_factory=list)
    fails: list[float] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)
    abs_changes: bool = False


def _fmt(spec: str, value: Any) -> str:
    # printf-style on purpose: LKP's layout is defined by C/Ruby printf conversions
    return spec % value


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _pstddev(values: Sequence[float]) -> float:
    m = _mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / len(values))


def uses_absolute_change(stat: str) -> bool:
    """Percentages and perf-profile shares change by points, not by percent."""
    return stat.startswith("perf-profile") or stat.endswith("%")


def job_axes(job: query.JobRow) -> dict[str, str]:
    axes = {"testcase": job.suite}
    for k, v in (job.params or {}).items():
        if v is None or isinstance(v, (dict, list)):
            continue
        axes[str(k)] = str(v)
    if axes.get("suite_source") == "upstream":
        # the upstream commit the job ran (its suite version is upstream-N+<commit>+<hash>)
        parts = job.suite_version.split("+")
        if len(parts) == 3:
            axes["suite_commit"] = parts[1][:12]
    return {k: v for k, v in axes.items() if v != ""}


def column_axes(job: query.JobRow, kernel: query.Kernel, runs: list[query.RunRow]) -> dict:
    axes = job_axes(job)
    machines = {r.machine for r in runs}
    if len(machines) == 1 and next(iter(machines)):
        axes["tbox_group"] = next(iter(machines))
    if kernel.config_name:
        axes["kconfig"] = kernel.config_name
    if kernel.compiler:
        axes["compiler"] = kernel.compiler
    return axes


def build_groups(ds: query.Dataset) -> list[Group]:
    """LKP's matrices per (job, kernel): stat -> per-run values, zero-filled like LKP's."""
    by_job_build: dict[tuple[int, int], dict[int, dict[int, list[float]]]] = {}
    for (job_id, metric_id), per_build in ds.values.items():
        for build_id, per_run in per_build.items():
            by_job_build.setdefault((job_id, build_id), {})[metric_id] = per_run
    runs_by: dict[tuple[int, int], list[query.RunRow]] = {}
    for r in ds.runs.values():
        runs_by.setdefault((r.job_id, r.build_id), []).append(r)

    groups = []
    for job_id in sorted(ds.jobs, key=lambda j: _job_order(ds.jobs[j])):
        job = ds.jobs[job_id]
        g = Group(job)
        for kernel in ds.kernels:
            runs = sorted(runs_by.get((job_id, kernel.id), []), key=lambda r: (r.iteration, r.id))
            if not runs:
                continue
            order = {r.id: i for i, r in enumerate(runs)}
            matrix: dict[str, list[float]] = {}
            for metric_id, per_run in by_job_build.get((job_id, kernel.id), {}).items():
                row = [0.0] * len(runs)
                for run_id, samples in per_run.items():
                    if samples and run_id in order:
                        row[order[run_id]] = _mean(samples) if len(samples) > 1 else samples[0]
                matrix[ds.metrics[metric_id].name] = row
            g.columns.append(Column(kernel, len(runs), matrix, column_axes(job, kernel, runs)))
        if g.columns:
            groups.append(g)
    return groups


def _job_order(job: query.JobRow) -> tuple:
    return (job.suite, job.test, sorted((str(k), str(v)) for k, v in (job.params or {}).items()))


def changed_stat_keys(group: Group, more: bool = True) -> list[str]:
    """Stats LKP's rule reports for any later column against the first."""
    base = group.columns[0]
    options: dict[str, Any] = {"more": more, "perf-profile": 5}
    keys: list[str] = []
    seen: set[str] = set()
    for col in group.columns[1:]:
        for k in lkp_rule.changed_stats(_with_source(col), _with_source(base), options):
            if k not in seen:
                seen.add(k)
                keys.append(k)
    return keys


def _with_source(col: Column) -> dict[str, Sequence[Any]]:
    # LKP sizes a matrix by its stats_source list: one entry per run
    m: dict[str, Sequence[Any]] = dict(col.matrix)
    m["stats_source"] = [""] * col.runs
    return m


def all_stat_keys(group: Group) -> list[str]:
    keys: list[str] = []
    seen: set[str] = set()
    for col in group.columns:
        for k in col.matrix:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    return keys


def calc_stat(stat: str, group: Group) -> StatRow:
    row = StatRow(
        stat=stat,
        failure=lkp_rule.is_function_stat(stat),
        values=[c.matrix.get(stat) for c in group.columns],
        runs=[c.runs for c in group.columns],
    )
    if row.failure:
        row.fails = [math.fsum(v) if v else 0 for v in row.values]
        reproduce0 = row.fails[0] / row.runs[0]
        # LKP divides column i+1's failures by column i's run count; kept for identical output
        row.changes = [100 * (f / row.runs[i] - reproduce0) for i, f in enumerate(row.fails[1:])]
        return row
    row.avgs = [_mean(v) if v else 0.0 for v in row.values]
    row.stddevs = [_pstddev(v) if v and len(v) > 1 else -1.0 for v in row.values]
    avg0 = row.avgs[0]
    if uses_absolute_change(stat):
        row.abs_changes = True
        row.changes = [avg - avg0 for avg in row.avgs[1:]]
    else:
        avg0 = avg0 or 1e-100  # LKP's guard against dividing by a zero base
        row.changes = [100.0 * (avg - avg0) / avg0 for avg in row.avgs[1:]]
    return row


def sort_stats(rows: list[StatRow]) -> list[StatRow]:
    """LKP's order: the benchmark's own stats first, then monitors with fewer shown stats
    first, each by name; failure stats ahead of everything."""
    base_count: dict[str, int] = {}
    for r in rows:
        base = lkp_rule.stat_base(r.stat)
        base_count.setdefault(base, -10_000 if r.failure else 0)
        base_count[base] += 1
    for base, c in base_count.items():
        if c > 0 and lkp_rule.is_test_base(base):
            base_count[base] = 0

    def key(r: StatRow) -> tuple:
        base = lkp_rule.stat_base(r.stat)
        n = _SORT_KEY_COMPONENTS.get(base)
        name = ".".join(r.stat.split(".")[:n]) if n else r.stat
        return (base_count[base], name, r.changes)

    return sorted(rows, key=key)


def format_perf_row(row: StatRow) -> str:
    parts = []
    for i, avg in enumerate(row.avgs):
        if i:
            p = row.changes[i - 1]
            spec = ".1f" if abs(p) < 100_000 else ".2g"
            tail = "  " if row.abs_changes else "%% "
            parts.append(_fmt(f"%+{REL_WIDTH}{spec}{tail}", p))
        if abs(avg) < 1000:
            parts.append(_fmt(f"%{ABS_WIDTH}.2f", avg))
        elif abs(avg) > 100_000_000 or not math.isfinite(avg):
            parts.append(_fmt(f"%{ABS_WIDTH}.4g", avg))
        else:
            parts.append(_fmt(f"%{ABS_WIDTH}d", math.trunc(avg)))
        stddev = row.stddevs[i]
        if avg != 0:
            stddev = 100 * stddev / avg
        if stddev > 2 and math.isfinite(stddev):
            parts.append(_fmt(f" ±%{ERR_WIDTH - 3}d%%", math.trunc(stddev)))
        else:
            parts.append(" " * ERR_WIDTH)
    return "".join(parts) + f"  {row.stat}\n"


def format_failure_row(row: StatRow) -> str:
    parts = []
    for i, f in enumerate(row.fails):
        if i:
            parts.append(_fmt(f"%{REL_WIDTH}.0f%% ", row.changes[i - 1]))
        if f == 0:
            parts.append(" " * (ABS_WIDTH + 1))
        else:
            parts.append(_fmt(f"%{ABS_WIDTH + 1}d", math.trunc(f)))
        parts.append(_fmt(f":%-{ERR_WIDTH - 2}d", row.runs[i]))
    return "".join(parts) + f"  {row.stat}\n"


def format_group_header(group: Group) -> str:
    common = group.common_axes()
    labels = [c.kernel.label for c in group.columns]
    out = [GROUP_RULE + "\n"]
    if common:
        out.append("/".join(common) + ":\n")
        out.append("  " + "/".join(common.values()) + "\n\n")
    else:
        for c in group.columns:
            out.append("/".join(c.axes) + ":\n")
            out.append("  " + "/".join(c.axes.values()) + "\n\n")
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


def render_group(group: Group, all_rows: bool = False, more: bool = True) -> str:
    keys = all_stat_keys(group) if all_rows else changed_stat_keys(group, more=more)
    complete = lkp_fail.complete_group(group)  # %stddev rows leave incomplete runs out
    rows = sort_stats(
        [calc_stat(k, group if lkp_rule.is_function_stat(k) else complete) for k in keys]
    )
    failure = [r for r in rows if r.failure]
    perf = [r for r in rows if not r.failure]
    if not failure and not perf:
        return ""
    n = len(group.columns) - 1
    out = [format_group_header(group)]
    if failure:
        out.append(failure_header(n))
        out.extend(format_failure_row(r) for r in failure)
    if perf:
        out.append(perf_header(n))
        out.extend(format_perf_row(r) for r in perf)
    out.append("\n")
    return "".join(out)


def render(ds: query.Dataset, all_rows: bool = False, *, more: bool = True) -> str:
    """LKP ncompare groups for every job of the dataset's kernels.

    Without ``all_rows`` only the stats LKP's change rule reports (``more``: also monitor
    stats, as the test robot's mails; LKP's plain ``ncompare`` leaves those out). A job one
    kernel did not run is compared among the kernels that did, as LKP does; groups with
    nothing to show are left out.
    """
    single = len(ds.kernels) == 1
    parts = []
    for g in lkp_unite.unite(build_groups(ds), ds):  # no 0 -> 0 rows, as in LKP
        if len(g.columns) < 2 and not single:
            continue
        # a lone kernel has nothing to be compared with: show all its stats
        parts.append(render_group(g, all_rows=all_rows or len(g.columns) == 1, more=more))
    text = "".join(parts)
    if not text:
        what = "no stat changed by LKP's rule" if not all_rows else "no stats"
        return f"{what} between {', '.join(k.label for k in ds.kernels)} (--all shows all)\n"
    return text
