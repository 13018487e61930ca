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

import numpy as np

from stackbench.resultsdb import query
from stackbench.resultsdb.tables import lkp_columns, lkp_fail, lkp_format, lkp_rule, lkp_unite
from stackbench.resultsdb.tables.lkp_format import (
    failure_header,
    perf_header,
    uses_absolute_change,
)


@dataclass
class Column:
    """One kernel in one group: ``matrix[stat]`` holds one value per run (LKP's matrix.json);
    ``array`` is the same as a stats x runs array, rows in ``matrix`` order."""

    kernel: query.Kernel
    runs: int
    matrix: dict[str, list[float]]
    axes: dict[str, str]
    array: np.ndarray | None = None
    # perf-profile stats: (first run id, metric id), the order LKP's sort may fall back on
    origins: dict[str, tuple[int, int]] = field(default_factory=dict)

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


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _pstddev(values: Sequence[float]) -> float:
    m = _mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / len(values))


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
            col = Column(kernel, len(runs), matrix, column_axes(job, kernel, runs), array=arr)
            if any(n.startswith("perf-profile") for n in names):
                col.origins = _origins(names, row, smp.seg_run[idx], smp.seg_metric[idx])
            g.columns.append(col)
        if g.columns:
            groups.append(g)
    return groups


def _origins(names: list[str], row: np.ndarray, runs: np.ndarray, metrics: np.ndarray) -> dict:
    """Each perf-profile stat's first (run id, metric id) among a column's segments."""
    first = np.full(len(names), np.iinfo(np.int64).max)
    np.minimum.at(first, row, runs)
    metric = np.zeros(len(names), dtype=np.int64)
    metric[row] = metrics
    return {
        n: (r, m)
        for n, r, m in zip(names, first.tolist(), metric.tolist(), strict=True)
        if n.startswith("perf-profile")
    }


def _job_order(job: query.JobRow) -> tuple:
    return lkp_columns.job_order(job.suite, job.test, job.params)


def column_summaries(ds: query.Dataset) -> dict[tuple[int, int], lkp_columns.Column]:
    """Every (job id, build id) column of the dataset as lkp_columns keeps it."""
    return {
        (g.job.id, c.kernel.id): summarise_column(g.job, c)
        for g in lkp_unite.unite(build_groups(ds), ds)
        for c in g.columns
    }


def summarise_column(job: query.JobRow, col: Column) -> lkp_columns.Column:
    """One kernel's column: its stats' averages and cells over its complete runs (as
    calc_stats computes them for a group), and its failure stats' sums over every run; in
    the row order of its own stats (lkp_columns.in_row_order)."""
    perf = [k for k in col.matrix if not lkp_rule.is_function_stat(k)]
    fails = [k for k in col.matrix if lkp_rule.is_function_stat(k)]
    rows = calc_stats(perf, lkp_fail.complete_group(Group(job, [col])))
    avgs = [r.avgs[0] for r in rows]
    made = lkp_columns.Column(
        runs=col.runs,
        axes=col.axes,
        perf=perf,
        avgs=avgs,
        cells=[lkp_format.avg_cell(r.avgs[0], r.stddevs[0]) for r in rows],
        fails=fails,
        sums=[math.fsum(col.matrix[k]) if col.matrix[k] else 0 for k in fails],
        origins=col.origins,
    )
    return lkp_columns.in_row_order(made)


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
        row.changes = lkp_format.failure_changes(row.fails, row.runs)
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
    """LKP's order (lkp_format.row_order)."""
    key = lkp_format.row_order([(r.stat, r.failure) for r in rows])
    return sorted(rows, key=lambda r: key(r.stat, r.changes))


def format_perf_row(row: StatRow) -> str:
    parts = []
    absolute = row.abs_changes
    for i, avg in enumerate(row.avgs):
        if i:
            parts.append(lkp_format.change_cell(row.changes[i - 1], absolute))
        parts.append(lkp_format.avg_cell(avg, row.stddevs[i]))
    return "".join(parts) + f"  {row.stat}\n"


def format_failure_row(row: StatRow) -> str:
    return lkp_format.failure_row(row.stat, row.fails, row.runs, row.changes)


def format_group_header(group: Group) -> str:
    return lkp_format.group_header(
        [c.kernel.label for c in group.columns], [c.axes for c in group.columns]
    )


def render_group(group: Group, more: bool = True) -> str:
    """The rows LKP's change rule reports (every row: lkp_columns.render_group)."""
    keys = changed_stat_keys(group, more=more)
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
        if all_rows or len(g.columns) == 1:  # a lone kernel's table shows all its stats
            cols = [(c.kernel.label, summarise_column(g.job, c)) for c in g.columns]
            parts.append(lkp_columns.render_group(cols))
        else:
            parts.append(render_group(g, more=more))
    text = "".join(parts)
    if not text:
        return lkp_format.nothing_shown([k.label for k in ds.kernels], all_rows)
    return text
