"""LKP's ``lkp ncompare`` table (``%stddev %change``), as the test robot mails show it.

Layout and number formats follow reference/FORMATS.md section 3 (checked against
lkp-tests' lib/compare.rb behaviour and real reports). One group per job; the columns are
the requested kernels that ran it, the first being the base every other column is compared
with. A kernel's value of a stat is the mean over its runs of the per-run value (a run with
several samples of the stat counts their mean); the ``±`` is the population standard
deviation over runs. Means add as Ruby's ``Array#sum`` does (Kahan-Babuska) and variances
left to right, as LKP's lib/statistics.rb; the matrices are numpy arrays, so each statistic
is computed for every stat of a column at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    """One kernel in one group: ``matrix[stat]`` holds one value per run (LKP's matrix.json);
    ``array`` is the same as a stats x runs array, rows in ``matrix`` order."""

    kernel: query.Kernel
    runs: int
    matrix: dict[str, list[float]]
    axes: dict[str, str]
    array: np.ndarray | None = None

    def as_array(self) -> np.ndarray:
        if self.array is None or len(self.array) != len(self.matrix):
            self.array = np.array(list(self.matrix.values()), dtype=np.float64).reshape(
                len(self.matrix), self.runs
            )
        return self.array


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
    smp = ds.samples()
    runs_by: dict[tuple[int, int], list[query.RunRow]] = {}
    for r in ds.runs.values():
        runs_by.setdefault((r.job_id, r.build_id), []).append(r)
    # per run (by position in run_ids): its job, kernel and column within that kernel
    run_ids = np.array(sorted(ds.runs), dtype=np.int64)
    run_job = np.array([ds.runs[r].job_id for r in run_ids.tolist()], dtype=np.int64)
    run_build = np.array([ds.runs[r].build_id for r in run_ids.tolist()], dtype=np.int64)
    run_col = np.zeros(len(run_ids), dtype=np.int64)
    for _key, runs in runs_by.items():
        runs.sort(key=lambda r: (r.iteration, r.id))
        for i, r in enumerate(runs):
            run_col[np.searchsorted(run_ids, r.id)] = i
    at = np.searchsorted(run_ids, smp.seg_run)
    seg_job, seg_build, seg_col = run_job[at], run_build[at], run_col[at]
    # a run's value of a stat: its sample, or the mean of its samples
    seg_val = smp.first().copy()
    for i in np.flatnonzero(smp.length > 1).tolist():
        seg_val[i] = _mean(smp.segment(i).tolist())
    # stats in the order they first appear (by run, then metric id), as LKP's matrices
    order_key = seg_job * (int(smp.seg_metric.max(initial=0)) + 1) + smp.seg_metric
    _, first, inverse = np.unique(order_key, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))[inverse]

    groups = []
    for job_id in sorted(ds.jobs, key=lambda j: _job_order(ds.jobs[j])):
        job = ds.jobs[job_id]
        g = Group(job)
        for kernel in ds.kernels:
            runs = runs_by.get((job_id, kernel.id), [])
            if not runs:
                continue
            idx = np.flatnonzero((seg_job == job_id) & (seg_build == kernel.id))
            _, at_first, row = np.unique(rank[idx], return_index=True, return_inverse=True)
            names = [ds.metrics[m].name for m in smp.seg_metric[idx][at_first].tolist()]
            arr = np.zeros((len(names), len(runs)))
            arr[row, seg_col[idx]] = seg_val[idx]
            matrix = dict(zip(names, arr.tolist(), strict=True))
            g.columns.append(
                Column(kernel, len(runs), matrix, column_axes(job, kernel, runs), array=arr)
            )
        if g.columns:
            groups.append(g)
    return groups


def _job_order(job: query.JobRow) -> tuple:
    return (job.suite, job.test, sorted((str(k), str(v)) for k, v in (job.params or {}).items()))


def changed_stat_keys(group: Group, more: bool = True) -> list[str]:
    """Stats LKP's rule reports for any later column against the first (the rule of
    lkp_rule.changed_stats with LKP's default options, over whole matrices at once)."""
    names = all_stat_keys(group)
    where = {k: i for i, k in enumerate(names)}
    aligned = [_aligned(c, where) for c in group.columns]
    base = group.columns[0]
    rules = lkp_rule.NameRules.of(names, {*base.matrix, "stats_source"})
    keys: list[str] = []
    seen: set[str] = set()
    for col, (arr, present) in zip(group.columns[1:], aligned[1:], strict=True):
        changed = lkp_rule.changed_mask(arr, present, *aligned[0], rules, more=more)
        hit = changed.tolist()
        # LKP walks the new column's stats, then the base's stats the new one lacks
        for k in [*col.matrix, *(k for k in base.matrix if k not in col.matrix)]:
            if hit[where[k]] and k not in seen:
                seen.add(k)
                keys.append(k)
    return keys


def _aligned(col: Column, where: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The column's matrix on the group's stat rows, and which rows it has."""
    arr = np.zeros((len(where), col.runs))
    present = np.zeros(len(where), dtype=bool)
    rows = np.fromiter((where[k] for k in col.matrix), dtype=np.int64, count=len(col.matrix))
    arr[rows] = col.as_array()
    present[rows] = True
    return arr, present


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


def _ruby_sum(arr: np.ndarray) -> np.ndarray:
    """Ruby's Array#sum of floats per row (Kahan-Babuska compensated, left to right)."""
    f = np.zeros(len(arr))
    c = np.zeros(len(arr))
    for j in range(arr.shape[1]):
        x = arr[:, j]
        t = f + x
        c += np.where(np.abs(f) >= np.abs(x), (f - t) + x, (x - t) + f)
        f = t
    return f + c


def _avg_stddev(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LKP's average and population standard deviation of each row (lib/statistics.rb:
    ``sum / length``, then ``1 / length * inject(0) { acc + (x - avg)**2 }``)."""
    n = arr.shape[1]
    avg = _ruby_sum(arr) / float(n)
    acc = np.zeros(len(arr))
    for j in range(n):
        acc = acc + (arr[:, j] - avg) ** 2
    return avg, np.sqrt(1 / float(n) * acc)


def calc_stats(keys: list[str], group: Group) -> list[StatRow]:
    """calc_stat for many stats at once: averages and deviations per column as arrays."""
    perf = [k for k in keys if not lkp_rule.is_function_stat(k)]
    pos = {k: i for i, k in enumerate(perf)}
    avgs, stddevs = [], []
    for c in group.columns:
        arr = np.zeros((len(perf), c.runs))
        present = np.zeros(len(perf), dtype=bool)
        if c.runs and perf:
            where = {k: i for i, k in enumerate(c.matrix)}
            src = [(pos[k], where[k]) for k in perf if k in where]
            if src:
                dst, rows = np.array(src).T
                arr[dst] = c.as_array()[rows]
                present[dst] = True
        avg, sd = _avg_stddev(arr) if c.runs else (np.zeros(len(perf)), np.zeros(len(perf)))
        avgs.append(np.where(present, avg, 0.0))
        many = present if c.runs > 1 else np.zeros(len(perf), dtype=bool)
        stddevs.append(np.where(many, sd, -1.0))
    # every later column's change against the first, for every stat at once: the same
    # IEEE operations, in the same order, as calc_stat's, so the same bits
    absolute = np.array([uses_absolute_change(k) for k in perf], dtype=bool)
    by_stat_avgs = np.array(avgs).T.reshape(len(perf), len(avgs))
    base = by_stat_avgs[:, :1]
    guarded = np.where(base == 0, 1e-100, base)  # LKP's guard against a zero base
    with np.errstate(all="ignore"):  # Ruby's floats overflow to Infinity silently too
        changes = np.where(
            absolute[:, None],
            by_stat_avgs[:, 1:] - base,
            100.0 * (by_stat_avgs[:, 1:] - guarded) / guarded,
        ).tolist()
    row_avgs = by_stat_avgs.tolist()
    row_stddevs = np.array(stddevs).T.reshape(len(perf), len(stddevs)).tolist()
    absolute_of = absolute.tolist()
    runs = [c.runs for c in group.columns]
    out = []
    for k in keys:
        i = pos.get(k)
        if i is None:
            out.append(calc_stat(k, group))
            continue
        out.append(
            StatRow(
                stat=k,
                failure=False,
                values=[c.matrix.get(k) for c in group.columns],
                runs=list(runs),
                avgs=row_avgs[i],
                stddevs=row_stddevs[i],
                changes=changes[i],
                abs_changes=absolute_of[i],
            )
        )
    return out


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


# the printf specs of a %stddev row, built once: a table formats tens of thousands of cells
_CHANGE_SPECS = {
    (small, absolute): f"%+{REL_WIDTH}{'.1f' if small else '.2g'}{'  ' if absolute else '%% '}"
    for small in (True, False)
    for absolute in (True, False)
}
_AVG_SMALL, _AVG_BIG, _AVG_INT = f"%{ABS_WIDTH}.2f", f"%{ABS_WIDTH}.4g", f"%{ABS_WIDTH}d"
_STDDEV, _NO_STDDEV = f" ±%{ERR_WIDTH - 3}d%%", " " * ERR_WIDTH


def format_perf_row(row: StatRow) -> str:
    parts = []
    absolute = row.abs_changes
    isfinite, trunc = math.isfinite, math.trunc
    for i, avg in enumerate(row.avgs):
        if i:
            p = row.changes[i - 1]
            parts.append(_CHANGE_SPECS[(abs(p) < 100_000, absolute)] % p)
        if abs(avg) < 1000:
            parts.append(_AVG_SMALL % avg)
        elif abs(avg) > 100_000_000 or not isfinite(avg):
            parts.append(_AVG_BIG % avg)
        else:
            parts.append(_AVG_INT % trunc(avg))
        stddev = row.stddevs[i]
        if avg != 0:
            stddev = 100 * stddev / avg
        if stddev > 2 and isfinite(stddev):
            parts.append(_STDDEV % trunc(stddev))
        else:
            parts.append(_NO_STDDEV)
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
    # failure rows count every run; %stddev rows leave incomplete runs out (lkp_fail)
    complete = lkp_fail.complete_group(group)
    failures = [calc_stat(k, group) for k in keys if lkp_rule.is_function_stat(k)]
    perf_keys = [k for k in keys if not lkp_rule.is_function_stat(k)]
    rows = sort_stats(failures + calc_stats(perf_keys, complete))
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
