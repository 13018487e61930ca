"""Seed 002's view: one metric over consecutive runs, one column per kernel, and whether
each kernel reaches a steady state.

::

    mmtests-vmstat.compact_stall per run: stress-highalloc bgload=compile ...
     run    v6.1-debian   1/1-0a1b2c3d
       1         1504.0          227.0
     ...
      50          219.0            0.0
    steady       no            from run 22

A run's value is its first sample (the mean when a run has several). Steady from run K
means: every value from run K on lies within a band around the median of the last
``TAIL`` runs (three times their median absolute deviation, at least 1% of the median and
at least 1), at least ``TAIL`` runs are in it, and they do not drift through the band (the
least-squares slope over them moves less than the band's half-width). The plot is an inline SVG of the same
series.
"""

from __future__ import annotations

import statistics
from html import escape

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables import runvalues as rv

TAIL = 10
COL_WIDTH = 15
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def series(ds: query.Dataset, job: query.JobRow, kernel: query.Kernel, metric: str) -> list[float]:
    return [sum(r.values) / len(r.values) for r in rv.per_run(ds, job.id, kernel.id, metric)]


def steady_from(values: list[float], tail: int = TAIL) -> int | None:
    """The 1-based run from which the series stays in its final band, None if it never does
    for at least ``tail`` runs."""
    if len(values) < tail:
        return None
    last = values[-tail:]
    med = statistics.median(last)
    mad = statistics.median(abs(v - med) for v in last)
    band = max(3 * mad, abs(med) * 0.01, 1.0)
    k = len(values)
    while k > 0 and abs(values[k - 1] - med) <= band:
        k -= 1
    start = k + 1
    seg = values[k:]
    if len(seg) < tail:
        return None
    # a drift through the band is a trend, not a steady state
    xs = range(len(seg))
    mx, my = (len(seg) - 1) / 2, sum(seg) / len(seg)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, seg, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return None if abs(slope) * len(seg) > band else start


def _fmt(v: float) -> str:
    return f"{v:.1f}" if abs(v) < 1e7 else f"{v:.4g}"


def render(ds: query.Dataset, metric: str) -> str:
    jobs = rv.jobs_with(ds, metric)
    if not jobs:
        known = [n for n in rv.metric_names(ds) if not n.startswith("mmtests-vmstat.")][:8]
        raise StackbenchError(
            f"no metric {metric!r} stored for these kernels (for example: {', '.join(known)})"
        )
    out = []
    for job in jobs:
        cols = [(k, series(ds, job, k, metric)) for k in ds.kernels]
        cols = [(k, s) for k, s in cols if s]
        out.append(f"{metric} per run: {job.suite} {rv.label(job)}\n")
        heads = "".join(f"{k.label[: COL_WIDTH - 1]:>{COL_WIDTH}}" for k, _ in cols)
        out.append(f"{'run':>6}" + heads)
        out.append("\n")
        for i in range(max(len(s) for _, s in cols)):
            cells = [f"{_fmt(s[i]) if i < len(s) else '':>{COL_WIDTH}}" for _, s in cols]
            out.append(f"{i + 1:>6}" + "".join(cells) + "\n")
        steady = []
        for _, s in cols:
            k = steady_from(s)
            steady.append("no" if k is None else f"from run {k}")
        out.append(f"{'steady':>6}" + "".join(f"{t:>{COL_WIDTH}}" for t in steady) + "\n\n")
    return "".join(out).rstrip("\n") + "\n"


def svg(ds: query.Dataset, metric: str, width: int = 640, height: int = 300) -> str:
    """The series of the first job with ``metric`` as a line per kernel over the run index."""
    jobs = rv.jobs_with(ds, metric)
    if not jobs:
        raise StackbenchError(f"no metric {metric!r} stored for these kernels")
    job = jobs[0]
    cols = [(k, series(ds, job, k, metric)) for k in ds.kernels]
    cols = [(k, s) for k, s in cols if s]
    left, right, top, bottom = 70, 150, 30, 40
    n = max(len(s) for _, s in cols)
    lo = min(min(s) for _, s in cols)
    hi = max(max(s) for _, s in cols)
    lo = min(lo, 0.0)
    hi = hi if hi > lo else lo + 1

    def x(i: int) -> float:
        return left + (width - left - right) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="18">{escape(metric)} per run</text>',
        f'<line x1="{left}" y1="{y(lo):.1f}" x2="{width - right}" y2="{y(lo):.1f}" stroke="#888"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#888"/>',
        f'<text x="{left - 6}" y="{y(hi) + 4:.1f}" text-anchor="end">{_fmt(hi)}</text>',
        f'<text x="{left - 6}" y="{y(lo) + 4:.1f}" text-anchor="end">{_fmt(lo)}</text>',
        f'<text x="{left}" y="{height - bottom + 16}" text-anchor="middle">1</text>',
        f'<text x="{x(n - 1):.1f}" y="{height - bottom + 16}" text-anchor="middle">{n}</text>',
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" '
        'text-anchor="middle">run</text>',
    ]
    for i, (k, s) in enumerate(cols):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{x(j):.1f},{y(v):.1f}" for j, v in enumerate(s))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}">')
        parts.append(f"<title>{escape(k.label)}</title></polyline>")
        parts.append(
            f'<text x="{width - right + 8}" y="{top + 14 * (i + 1)}" fill="{color}">'
            f"{escape(k.label)}</text>"
        )
    parts.append("</svg>\n")
    return "\n".join(parts)
