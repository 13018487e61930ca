"""compare-mmtests.pl's tables for thpchallenge and thpcompact, as the mmtests commits their
jobs pin print them (mmtests since 2024-11: significance from confidence intervals).

Layout as in the thpscale era (mmtests.py: the header rows, ``%-Ss %-Os`` then per kernel
value and gain), with what changed since:

- the statistics of a multi-sample table: Min, Amean, Stddev, CoeffVar, Max and the best-N%
  means, BAmean-50/95/99 at 526d3138 (thpcompact), BAmean.95 alone at 638401e0
  (thpchallenge, whose extraction is a shellpack);
- each pooled sample set is sorted (ascending: every table here prefers lower values) before
  anything is summed, as Summarise.pm sorts it;
- significance: the interval mean +- qnorm(0.975, sd=stddev) of each kernel (R computes the
  quantile and prints it with 7 significant digits, which mmtests reads back), and mmtests'
  ``cidiff`` of base and new; a mean is starred when that ratio exceeds 1 in size, and
  ``--print-significance`` adds ``Significant`` rows with the 0/1 flag and the ratio;
- thpchallenge's rows follow the order its extraction first saw each operation (per thread
  count: the size of the first fault, fault-both, then the other size), its values are
  printed ``%18.2f``, and its counts table (``huge-N``) is a multi-sample table of the
  per-iteration percentages, lower preferred as the shellpack declares nothing else. Its
  locality extraction prints no line breaks upstream, so compare-kernels has no locality
  table for it and neither do we.
- thpcompact keeps thpscale's grouped order; its Perl extraction modules print ``%18.8f``
  (ExtractFactory's 8 decimals for extraction modules) and its counts and locality tables
  are single values, the best iteration's, higher preferred. compare-kernels at 526d3138
  never reaches those two (its ``-a`` switch selects nothing for a Perl module and the
  latency table is printed again); we print what the modules print when run by name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import mmtests
from stackbench.resultsdb.tables import mmtests_stats as st

# qnorm(1 - 0.05/2): the 95% two-sided normal quantile mmtests asks R for
Z975 = 1.959963984540054
GAIN = 7


@dataclass(frozen=True)
class Era:
    """What one pinned mmtests commit prints for one suite."""

    commit: str
    field: int  # width of a value
    precision: int  # its decimals
    bests: tuple[int, ...]  # the BAmean-N rows
    best_name: str  # "BAmean-{}" or "BAmean.{}"
    first_seen_order: bool  # rows in extraction order (shellpack) or grouped by size
    multi_counts: bool  # counts as a multi-sample table (shellpack) or single values
    guard_missing_ci: bool  # a kernel without an interval is never significant
    locality: bool


ERAS = {
    "thpchallenge": Era(
        commit="638401e0",
        field=18,
        precision=2,
        bests=(95,),
        best_name="BAmean.{}",
        first_seen_order=True,
        multi_counts=True,
        guard_missing_ci=True,
        locality=False,
    ),
    "thpcompact": Era(
        commit="526d3138",
        field=18,
        precision=8,
        bests=(50, 95, 99),
        best_name="BAmean-{}",
        first_seen_order=False,
        multi_counts=False,
        guard_missing_ci=False,
        locality=True,
    ),
}
SUITES = tuple(ERAS)

_FAULT = re.compile(r"^fault-(base|huge|both)-(\d+)$")
_COUNT = re.compile(r"^Percentage huge-(\d+)$")


def _perl_f(x: float, width: int, precision: int = 2) -> str:
    """``%W.Pf`` as Perl prints it: NaN and infinities by name."""
    if math.isnan(x):
        return f"{'NaN':>{width}}"
    if math.isinf(x):
        return f"{'Inf' if x > 0 else '-Inf':>{width}}"
    return f"{x:{width}.{precision}f}"


@dataclass
class Summary:
    """One operation of one kernel: its statistics in table order and its interval."""

    values: list[float]
    mean: float
    ci: tuple[float, float] | None


def _r_quantile(sd: float) -> float:
    # Perl hands R the stddev with 15 significant digits and reads back R's 7
    return float(f"{Z975 * float(f'{sd:.15g}'):.7g}")


def summarise(data: np.ndarray, bests: tuple[int, ...]) -> Summary:
    """Summarise.pm's Multiops statistics of one pooled sample set, lower preferred."""
    d = np.sort(data)
    n = len(d)
    if not n:
        nan = st.NAN
        return Summary([nan] * (5 + len(bests)), nan, None)
    mean = st.seqsum(d) / n
    sd = math.sqrt(st.seqsum((d - mean) ** 2) / (n - 1)) if n > 1 else st.NAN
    cv = (0.0 if math.isnan(sd) else sd) * 100 / mean if mean else 0.0
    values = [float(d[0]), mean, sd, cv, float(d[-1])]
    for pct in bests:
        count = max(1, int(n * pct / 100))
        values.append(st.seqsum(d[:count]) / count)
    ci = None
    if not math.isnan(sd):
        q = _r_quantile(sd)
        ci = (mean - q, mean + q)
    return Summary(values, mean, ci)


def cidiff(
    new: float, new_ci: tuple[float, float], base: float, base_ci: tuple[float, float]
) -> float:
    """mmtests' cidiff: the difference of two means over the sum of their interval halves
    on the sides that face each other (the difference itself when both are zero)."""
    diff = new - base
    if new < base:
        cisum = new_ci[1] - new + base - base_ci[0]
    else:
        cisum = new - new_ci[0] + base_ci[1] - base
    return diff if cisum == 0 else diff / cisum


def _significance(
    era: Era, summaries: list[Summary | None], any_ci: list[bool]
) -> list[tuple[bool, float]]:
    """Per kernel (the base first, never significant): starred, and the ratio. A kernel
    with no interval on any operation has no interval table at all: never significant.
    An interval (or a mean) that does not exist counts as 0, as Perl's undef does."""
    base = summaries[0]
    base_mean = base.mean if base and any_ci[0] else 0.0
    base_ci = base.ci if base and base.ci and any_ci[0] else (0.0, 0.0)
    out = [(False, 0.0)]
    for s, has_ci in zip(summaries[1:], any_ci[1:], strict=True):
        if not has_ci or ((s is None or s.ci is None) and era.guard_missing_ci):
            out.append((False, 0.0))
            continue
        mean, ci = (s.mean, s.ci or (0.0, 0.0)) if s else (0.0, (0.0, 0.0))
        ratio = cidiff(base_mean, base_ci, mean, ci)
        out.append((abs(ratio) > 1, ratio))
    return out


def _cell(
    value: float | None, base: float | None, star: bool, era: Era, higher: bool = False
) -> str:
    if value is None or math.isnan(value) or value == -1 or base is None or base == -1:
        value, gain = 0.0, 0.0
    else:
        gain = st.pdiff(value, base) if higher else st.pndiff(value, base)
    open_, close = ("*", "*") if star else ("(", ")")
    return f"{_perl_f(value, era.field, era.precision)} {open_}{_perl_f(gain, GAIN)}%{close}"


def _table(
    ds: query.Dataset,
    era: Era,
    ops: list[tuple[str, mmtests.Series]],
    significance: bool,
) -> str:
    kernels = [k.id for k in ds.kernels]
    names = ["Min", "Amean", "Stddev", "CoeffVar", "Max"]
    names += [era.best_name.format(p) for p in era.bests]
    sums = {
        op: [summarise(s.pooled(b), era.bests) if s.runs.get(b) else None for b in kernels]
        for op, s in ops
    }
    any_ci = [any(sums[op][k] and sums[op][k].ci for op, _ in ops) for k in range(len(kernels))]
    sig = {op: _significance(era, sums[op], any_ci) for op, _ in ops}
    label_w = max(len(n) for n in names)
    op_w = max(len(op) for op, _ in ops)
    lines = mmtests.header(ds, label_w + 1 + op_w, era.field + GAIN + 4)
    for i, name in enumerate(names):
        for op, _ in ops:
            row = sums[op]
            base = row[0].values[i] if row[0] else st.NAN
            cells = []
            for k, s in enumerate(row):
                value = s.values[i] if s else st.NAN
                cells.append(_cell(value, base, i == 1 and sig[op][k][0], era))
            lines.append(f"{name:<{label_w}} {op:<{op_w}}" + "".join(cells))
    if significance:
        for op, _ in ops:
            cells = [
                f"{_perl_f(float(flag), era.field, era.precision)} ({_perl_f(ratio, GAIN)}%)"
                for flag, ratio in sig[op]
            ]
            # the row has one empty cell more than kernels, printed as spaces
            lines.append(
                f"{'Significant':<{label_w}} {op:<{op_w}}" + "".join(cells) + " " * era.field
            )
    return "\n".join(lines) + "\n"


def _first_size(series: dict[str, mmtests.Series], n: int, base_id: int) -> str:
    """The size of the first fault of thread count n in the base kernel's first run: the
    one whose first sample is fault-both's first sample (huge on a tie). A size that never
    occurred has mmtests' single 0 sample, so it cannot be first."""
    both = series.get(f"fault-both-{n}")
    first = float(both.runs[base_id][0][0]) if both and both.runs.get(base_id) else None
    for size in ("huge", "base"):
        s = series.get(f"fault-{size}-{n}")
        run = s.runs[base_id][0] if s and s.runs.get(base_id) else np.zeros(0)
        never = len(run) == 0 or (len(run) == 1 and run[0] == 0)
        if not never and float(run[0]) == first:
            return size
    return "huge"


def fault_ops(series: dict[str, mmtests.Series], era: Era, base_id: int) -> list[str]:
    counts = sorted({int(m[2]) for n in series if (m := _FAULT.match(n))})
    ops = []
    if era.first_seen_order:
        for n in counts:
            first = _first_size(series, n, base_id)
            other = "base" if first == "huge" else "huge"
            ops += [f"fault-{first}-{n}", f"fault-both-{n}", f"fault-{other}-{n}"]
    else:
        for size in ("base", "huge", "both"):
            ops += [f"fault-{size}-{n}" for n in counts]
    # the base kernel's operations only, as compare-mmtests.pl lists the first column's
    return [op for op in ops if op in series and series[op].runs.get(base_id)]


def render_latency(ds: query.Dataset, suite: str, significance: bool = False) -> str:
    era = ERAS[suite]
    series = mmtests.collect(ds, suite)
    ops = fault_ops(series, era, ds.kernels[0].id)
    if not ops:
        raise StackbenchError(f"no {suite} fault latencies stored for the base kernel")
    return _table(ds, era, [(op, series[op]) for op in ops], significance)


def _single(ds: query.Dataset, era: Era, ops: list[tuple[str, mmtests.Series]]) -> str:
    """SummariseSingleops: per kernel its best iteration's value (higher preferred), the
    label ``Percentage``."""
    kernels = [k.id for k in ds.kernels]
    op_w = max(len(op) for op, _ in ops)
    lines = mmtests.header(ds, len("Percentage") + 1 + op_w, era.field + GAIN + 4)
    for op, s in ops:
        values = [s.best(b, True) for b in kernels]
        cells = "".join(_cell(v, values[0], False, era, higher=True) for v in values)
        lines.append(f"Percentage {op:<{op_w}}" + cells)
    return "\n".join(lines) + "\n"


def render_counts(ds: query.Dataset, suite: str) -> str:
    era = ERAS[suite]
    series = mmtests.collect(ds, suite)
    base_id = ds.kernels[0].id
    ops = sorted(
        (n for n in series if _COUNT.match(n) and series[n].runs.get(base_id)),
        key=lambda n: int(_COUNT.match(n)[1]),
    )
    if not ops:
        raise StackbenchError(f"no {suite} 'Percentage huge' values stored for the base kernel")
    named = [(op.removeprefix("Percentage "), series[op]) for op in ops]
    return _table(ds, era, named, False) if era.multi_counts else _single(ds, era, named)


def render_locality(ds: query.Dataset, suite: str) -> str:
    era = ERAS[suite]
    if not era.locality:
        raise StackbenchError(
            f"{suite}: mmtests {ERAS[suite].commit} prints no locality table (its locality "
            "extraction writes no line breaks); the locality metrics are stored all the same"
        )
    series = mmtests.collect(ds, suite)
    base_id = ds.kernels[0].id
    ops = [n for n in series if mmtests.LOCALITY.match(n) and series[n].runs.get(base_id)]
    if not ops:
        raise StackbenchError(f"no {suite} locality values stored for the base kernel")

    def key(n: str) -> tuple[int, int]:
        m = mmtests.LOCALITY.match(n)
        return int(m[2]), mmtests.LOCALITY_ORDER.index(m[1])

    return _single(ds, era, [(op, series[op]) for op in sorted(ops, key=key)])
