"""compare-mmtests.pl's tables, as printed by mmtests b0b1d143 (the thpscale era);
thpchallenge's and thpcompact's, from later mmtests commits, are in mmtests_ci.py.

Layout (FORMATS.md section 6): two header rows with each run name split at its first ``-``
(a ``-rcN`` stays in the first part; a name without ``-`` shows as the name minus its last
character on the first row), then one row per statistic and operation: the statistic
``%-Ss`` and the operation ``%-Os`` padded to the longest of each, then per kernel the value
``%12.2f`` and the gain `` (%7.2f%%)``, positive always meaning better. A mean that differs
significantly from the base's has its gain framed by ``*`` instead of parentheses.

Tables: ``latency`` (thpscale's fault latencies, the multi-sample statistics), ``counts``
(Percentage huge), ``locality``, ``significance`` (latency plus mmtests' ``Significant`` rows,
as ``--print-significance``), ``highalloc`` (stress-highalloc pass success rates). Monitors:
``duration`` (``Duration User/System/Elapsed``) and ``vmstat`` (the ``Ops ...`` mmtests-vmstat
block). Samples of all iterations of a kernel are pooled for the statistics; single-value
reports show the best per-iteration value in the metric's preferred direction.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import mmtests_stats as st

FIELD = 12  # value width of thpscale-era tables
GAIN = 7  # width of the gain number
VMSTAT_FIELD = 15

TABLES = ("latency", "counts", "locality", "significance", "highalloc")
MONITORS = ("duration", "vmstat")
THP_SUITES = ("thpscale", "thpchallenge", "thpcompact")

_FAULT = re.compile(r"^fault-(base|huge|both)-(\d+)$")
_COUNT = re.compile(r"^Percentage huge-(\d+)$")
LOCALITY = re.compile(r"^(local-base|local-huge|remote-base|remote-huge|uncertain)-(\d+)$")
_PASS = re.compile(r"^pass(\d+)$")
LOCALITY_ORDER = ["local-base", "local-huge", "remote-base", "remote-huge", "uncertain"]
_SIZE_ORDER = {"base": 0, "huge": 1, "both": 2}


@dataclass
class Series:
    """One metric of one suite: per kernel, the sample arrays of its runs in iteration
    order."""

    name: str  # without the suite prefix
    higher_is_better: bool
    runs: dict[int, list[np.ndarray]]  # build_id -> per-run samples
    _pooled: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def pooled(self, build_id: int) -> np.ndarray:
        """Every sample of the kernel's runs, in run order (one array, made once)."""
        got = self._pooled.get(build_id)
        if got is None:
            runs = self.runs.get(build_id, [])
            got = np.concatenate(runs) if runs else np.zeros(0)
            self._pooled[build_id] = got
        return got

    def best(self, build_id: int, higher: bool | None = None) -> float | None:
        """The best per-iteration value (each run's last sample), None without runs."""
        values = [float(run[-1]) for run in self.runs.get(build_id, []) if len(run)]
        if not values:
            return None
        hib = self.higher_is_better if higher is None else higher
        return max(values) if hib else min(values)


# ---------------------------------------------------------------- data access


def _suites(ds: query.Dataset) -> list[str]:
    seen: list[str] = []
    for run in sorted(ds.runs.values(), key=lambda r: r.id):
        suite = ds.jobs[run.job_id].suite
        if suite not in seen:
            seen.append(suite)
    return seen


def _pick_suite(ds: query.Dataset, wanted: Sequence[str]) -> str:
    suites = _suites(ds)
    for s in wanted:
        if s in suites:
            return s
    have = ", ".join(suites) or "none"
    raise StackbenchError(f"no {' or '.join(wanted)} results for these kernels (stored: {have})")


def collect(ds: query.Dataset, suite: str, prefix: str | None = None) -> dict[str, Series]:
    """Every metric of one suite whose name starts with ``prefix`` (default ``<suite>.``),
    keyed by the name without the prefix. Jobs of the same suite are merged, so runs made
    with different mmtests checkouts still line up."""
    prefix = f"{suite}." if prefix is None else prefix
    job_ids = {j.id for j in ds.jobs.values() if j.suite == suite}
    refuse_mixed_sources(ds, suite)
    smp = ds.samples()
    picked: dict[tuple[int, int], list[tuple[tuple[int, int], int, int]]] = {}
    first: dict[tuple[int, int], int] = {}  # (job, metric) -> first segment, for the order
    runs = ds.runs
    for i, (run_id, metric_id) in enumerate(
        zip(smp.seg_run.tolist(), smp.seg_metric.tolist(), strict=True)
    ):
        run = runs[run_id]
        if run.job_id not in job_ids or not ds.metrics[metric_id].name.startswith(prefix):
            continue
        key = (run.job_id, metric_id)
        first.setdefault(key, i)
        picked.setdefault(key, []).append(((run.iteration, run_id), run.build_id, i))
    out: dict[str, Series] = {}
    for key in sorted(picked, key=first.__getitem__):
        m = ds.metrics[key[1]]
        name = m.name[len(prefix) :]
        s = out.setdefault(name, Series(name, bool(m.higher_is_better), defaultdict(list)))
        for _order, build_id, i in sorted(picked[key]):
            s.runs[build_id].append(smp.segment(i))
    return out


class MixedSourcesError(StackbenchError):
    """A suite's runs come from upstream and builtin programs: one table each, not one."""


def refuse_mixed_sources(ds: query.Dataset, suite: str) -> None:
    """Upstream and builtin runs of a suite measure different programs: never one column."""
    sources = {j.suite_source for j in ds.jobs.values() if j.suite == suite}
    if {"upstream", "builtin"} <= sources:
        raise MixedSourcesError(
            f"{suite}: these kernels have runs of upstream and builtin {suite}, which are not "
            "pooled; pick one with --suite-source upstream or --suite-source builtin"
        )


# ---------------------------------------------------------------- layout


def split_name(name: str) -> tuple[str, str]:
    """compare-mmtests.pl's two header rows for a run name (its Perl substr arithmetic)."""
    index = name.find("-")
    if index >= 1 and re.match(r"-rc[0-9]", name[index : index + index + 3]):
        index += 4
    if index == -1:
        return name[:-1], name
    return name[:index], name[index + 1 :]


def header(ds: query.Dataset, lead: int, width: int) -> list[str]:
    parts = [split_name(k.label) for k in ds.kernels]
    return [
        " " * lead + "".join(f"{p[0]:>{width}}" for p in parts),
        " " * lead + "".join(f"{p[1]:>{width}}" for p in parts),
    ]


def _num(x: float | None) -> float:
    return 0.0 if x is None or st.isnan(x) else x


@dataclass
class Cell:
    value: float | None  # None or NaN: not available, printed 0.00 with no gain
    gain: float = 0.0
    star: bool = False

    def text(self, field: int) -> str:
        open_, close = ("*", "*") if self.star else ("(", ")")
        return f"{_num(self.value):{field}.2f} {open_}{self.gain:{GAIN}.2f}%{close}"


def _cells(values: list[float | None], compare: Callable[[float, float], float]) -> list[Cell]:
    """Values of one row for every kernel with each one's gain over the first."""
    base = values[0]
    out = []
    for v in values:
        if v is None or st.isnan(v) or base is None or v == -1 or base == -1:
            out.append(Cell(v if v != -1 else None, 0.0))
        else:
            out.append(Cell(v, compare(v, _num(base))))
    return out


def _rows(label_w: int, op_w: int, rows: list[tuple[str, str, list[Cell]]]) -> list[str]:
    return [
        f"{label:<{label_w}} {op:<{op_w}}" + "".join(c.text(FIELD) for c in cells)
        for label, op, cells in rows
    ]


# ---------------------------------------------------------------- thpscale tables


def _fault_ops(series: dict[str, Series]) -> list[str]:
    ops = [n for n in series if _FAULT.match(n)]
    return sorted(ops, key=lambda n: (_SIZE_ORDER[_FAULT.match(n)[1]], int(_FAULT.match(n)[2])))


def _stat_defs(higher: bool) -> list[tuple[str, Callable[[np.ndarray], float], str]]:
    mean_name = "Hmean" if higher else "Amean"
    mean = st.hmean if higher else st.amean
    better = "pdiff" if higher else "pndiff"
    ascending: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def best(d: np.ndarray, percent: int) -> float:
        if not len(d):
            return st.NAN
        # sort each pooled array once for the three best-mean rows
        got = ascending.get(id(d))
        if got is None or got[0] is not d:
            got = ascending[id(d)] = (d, np.sort(d))
        return st.best_mean(d, percent, higher, ascending=got[1])

    return [
        ("Min", lambda d: float(d.min()) if len(d) else st.NAN, better),
        (mean_name, mean, better),
        ("Stddev", st.stddev, "pndiff"),
        ("CoeffVar", st.coeffvar, "pndiff"),
        ("Max", lambda d: float(d.max()) if len(d) else st.NAN, better),
        (f"B{mean_name}-50", lambda d: best(d, 50), better),
        (f"B{mean_name}-95", lambda d: best(d, 95), better),
        (f"B{mean_name}-99", lambda d: best(d, 99), better),
    ]


_COMPARE = {"pdiff": st.pdiff, "pndiff": st.pndiff}


def render_latency(ds: query.Dataset, suite: str, significance: bool = False) -> str:
    # the pooled arrays are made once and never changed: their sums can be shared
    with st.shared_sums():
        return _render_latency(ds, suite, significance)


def _render_latency(ds: query.Dataset, suite: str, significance: bool) -> str:
    series = collect(ds, suite)
    ops = _fault_ops(series)
    if not ops:
        raise StackbenchError(f"no {suite} fault latencies stored for these kernels")
    kernels = [k.id for k in ds.kernels]
    higher = series[ops[0]].higher_is_better
    defs = _stat_defs(higher)
    rows: list[tuple[str, str, list[Cell]]] = []
    for stat_name, func, compare in defs:
        is_mean = stat_name in ("Amean", "Hmean")
        for op in ops:
            pooled = [series[op].pooled(b) for b in kernels]
            values = [func(p) if len(p) else None for p in pooled]
            cells = _cells(values, _COMPARE[compare])
            if is_mean and len(pooled[0]):
                for i in range(1, len(kernels)):
                    if len(pooled[i]) and st.ttest_significant(pooled[0], pooled[i]):
                        cells[i].star = True
            rows.append((stat_name, op, cells))
    label_w = max(len(d[0]) for d in defs)
    op_w = max(len(op) for op in ops)
    lines = header(ds, label_w + 1 + op_w, FIELD + GAIN + 4) + _rows(label_w, op_w, rows)
    if significance:
        # --print-significance: 1.00 when the mean differs significantly from the base's,
        # with the t-test's p (in percent) where the gain usually is
        sig_rows = []
        for op in ops:
            pooled = [series[op].pooled(b) for b in kernels]
            cells = [Cell(0.0, 0.0)]
            for p in pooled[1:]:
                pvalue = st.ttest_pvalue(pooled[0], p) if len(pooled[0]) and len(p) else 1.0
                cells.append(Cell(1.0 if pvalue < st.TTEST_ALPHA else 0.0, pvalue * 100))
            sig_rows.append(("Significant", op, cells))
        lines += _rows(label_w, op_w, sig_rows)
    return "\n".join(lines) + "\n"


def _single_table(
    ds: query.Dataset,
    label: str,
    ops: list[str],
    series: dict[str, Series],
    higher: bool = True,
) -> str:
    """SummariseSingleops layout: one value per kernel, gains as higher-is-better counts."""
    kernels = [k.id for k in ds.kernels]
    rows = []
    for op in ops:
        values = [series[op].best(b, higher) if op in series else None for b in kernels]
        rows.append((label, op, _cells(values, st.pdiff if higher else st.pndiff)))
    op_w = max(len(op) for op in ops)
    return (
        "\n".join(
            header(ds, len(label) + 1 + op_w, FIELD + GAIN + 4) + _rows(len(label), op_w, rows)
        )
        + "\n"
    )


def render_counts(ds: query.Dataset, suite: str) -> str:
    series = collect(ds, suite)
    ops = sorted((n for n in series if _COUNT.match(n)), key=lambda n: int(_COUNT.match(n)[1]))
    if not ops:
        raise StackbenchError(f"no {suite} 'Percentage huge' values stored for these kernels")
    short = {op.removeprefix("Percentage "): series[op] for op in ops}
    return _single_table(ds, "Percentage", list(short), short)


def render_locality(ds: query.Dataset, suite: str) -> str:
    series = collect(ds, suite)
    ops = [n for n in series if LOCALITY.match(n)]
    if not ops:
        raise StackbenchError(f"no {suite} locality values stored for these kernels")

    def key(n: str) -> tuple[int, int]:
        m = LOCALITY.match(n)
        return int(m[2]), LOCALITY_ORDER.index(m[1])

    return _single_table(ds, "Percentage", sorted(ops, key=key), series)


def render_highalloc(ds: query.Dataset) -> str:
    series = collect(ds, "stress-highalloc")
    ops = sorted((n for n in series if _PASS.match(n)), key=lambda n: int(_PASS.match(n)[1]))
    if not ops:
        raise StackbenchError("no stress-highalloc pass results stored for these kernels")
    short = {_PASS.match(op)[1]: series[op] for op in ops}
    return _single_table(ds, "Ops", list(short), short)


# ---------------------------------------------------------------- monitors


def render_duration(ds: query.Dataset, suite: str, field: int = FIELD) -> str:
    series = collect(ds, suite, prefix="duration.")
    names = [("User", "user"), ("System", "system"), ("Elapsed", "elapsed")]
    if not any(key in series for _, key in names):
        raise StackbenchError(f"no durations stored for the {suite} runs of these kernels")
    label, op_w = "Duration", max(len(n) for n, _ in names)
    lines = header(ds, len(label) + 1 + op_w, field)
    for title, key in names:
        s = series.get(key)
        values = [s.best(k.id, False) if s else None for k in ds.kernels]
        lines.append(f"{label} {title:<{op_w}}" + "".join(f"{_num(v):{field}.2f}" for v in values))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- entry point


def render(ds: query.Dataset, table: str = "latency", monitor: str | None = None) -> str:
    """compare-mmtests.pl's output for the kernels of ``ds`` (the first is the base)."""
    if monitor is not None:
        if monitor not in MONITORS:
            raise StackbenchError(f"unknown mmtests monitor '{monitor}' (want duration or vmstat)")
        suite = _pick_suite(ds, (*THP_SUITES, "stress-highalloc"))
        if monitor == "duration":
            if suite in ("thpchallenge", "thpcompact"):
                # later mmtests print every value 18 wide (Extract.pm's default)
                from stackbench.resultsdb.tables import mmtests_ci

                return render_duration(ds, suite, mmtests_ci.ERAS[suite].field)
            return render_duration(ds, suite)
        from stackbench.resultsdb.tables import mmtests_vmstat

        return mmtests_vmstat.render_vmstat(ds, suite)
    if table not in TABLES:
        raise StackbenchError(f"unknown mmtests table '{table}' (want {', '.join(TABLES)})")
    if table == "highalloc" or (
        table == "latency" and not any(s in _suites(ds) for s in THP_SUITES)
    ):
        _pick_suite(ds, ("stress-highalloc",))
        return render_highalloc(ds)
    suite = _pick_suite(ds, THP_SUITES)
    if suite != "thpscale":
        # a later mmtests: the tables of the commit the suite's jobs pin
        from stackbench.resultsdb.tables import mmtests_ci

        if table == "counts":
            return mmtests_ci.render_counts(ds, suite)
        if table == "locality":
            return mmtests_ci.render_locality(ds, suite)
        return mmtests_ci.render_latency(ds, suite, significance=table == "significance")
    if table == "counts":
        return render_counts(ds, suite)
    if table == "locality":
        return render_locality(ds, suite)
    return render_latency(ds, suite, significance=table == "significance")
