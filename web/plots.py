"""Charts as inline SVG, drawn on the server so pages work without JavaScript.

Every text that reaches the SVG (kernel names, metric names) goes through ``escape``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

W, H = 420, 190
LEFT, RIGHT, TOP, BOTTOM = 64, 10, 22, 40


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6 or (0 < a < 1e-2):
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def _interval(vals: Sequence[float]) -> tuple[float, float, float] | None:
    """Mean and its 95% interval (Student t; no interval for a single run)."""
    n = len(vals)
    if n == 0:
        return None
    mean = sum(vals) / n
    if n < 2:
        return mean, mean, mean
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _frame(
    title: str, lo: float, hi: float, zero_based: bool = False
) -> tuple[list[str], Callable[[float], float]]:
    if hi == lo:
        pad = abs(hi) * 0.05 or 1.0
    else:
        pad = (hi - lo) * 0.08
    # bars start at zero: no padding below a zero baseline
    lo, hi = (lo if zero_based and lo == 0 else lo - pad), hi + pad
    ph = H - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + ph - (v - lo) / (hi - lo) * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {W} {H}" '
        f'width="{W}" height="{H}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="14" class="pt">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" class="ax"/>',
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" class="ax"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        v = lo + (hi - lo) * frac
        parts.append(
            f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" class="tk" text-anchor="end">'
            f"{escape(_fmt(v))}</text>"
        )
    return parts, y


def _xs(n: int) -> list[float]:
    pw = W - LEFT - RIGHT
    return [LEFT + pw * (i + 0.5) / n for i in range(n)]


def _labels(parts: list[str], xs: list[float], labels: Sequence[str]) -> None:
    for x, lab in zip(xs, labels, strict=True):
        short = lab if len(lab) <= 14 else lab[:13] + "\u2026"
        parts.append(
            f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" class="tk" text-anchor="middle">'
            f"<title>{escape(lab)}</title>{escape(short)}</text>"
        )


def runs_plot(
    title: str, labels: Sequence[str], per_kernel: Sequence[Sequence[float]], unit: str = ""
) -> Markup:
    """Every run's value per kernel (points), with the mean (bar) and its 95% interval."""
    flat = [v for vals in per_kernel for v in vals]
    if not flat:
        return Markup("")
    ivs = [_interval(vals) for vals in per_kernel]
    lo = min(flat + [iv[1] for iv in ivs if iv])
    hi = max(flat + [iv[2] for iv in ivs if iv])
    parts, y = _frame(f"{title} ({unit})" if unit else title, lo, hi)
    xs = _xs(len(labels))
    for x, vals, iv in zip(xs, per_kernel, ivs, strict=True):
        n = len(vals)
        for j, v in enumerate(vals):
            dx = (j - (n - 1) / 2) * 4 if n > 1 else 0
            parts.append(f'<circle cx="{x + dx:.1f}" cy="{y(v):.1f}" r="2.5" class="pp"/>')
        if iv:
            m, a, b = iv
            parts.append(
                f'<line x1="{x:.1f}" y1="{y(a):.1f}" x2="{x:.1f}" y2="{y(b):.1f}" class="ci"/>'
            )
            parts.append(
                f'<line x1="{x - 12:.1f}" y1="{y(m):.1f}" x2="{x + 12:.1f}" y2="{y(m):.1f}" '
                f'class="mn"><title>mean {escape(_fmt(m))}</title></line>'
            )
    if len(xs) > 1:
        means = [iv[0] if iv else None for iv in ivs]
        pts = " ".join(
            f"{x:.1f},{y(m):.1f}" for x, m in zip(xs, means, strict=True) if m is not None
        )
        parts.append(f'<polyline points="{pts}" class="tr"/>')
    _labels(parts, xs, labels)
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(title: str, labels: Sequence[str], per_kernel: Sequence[Sequence[float]]) -> Markup:
    """Counters (vmstat deltas): one bar per kernel at the mean, runs as points."""
    flat = [v for vals in per_kernel for v in vals]
    if not flat:
        return Markup("")
    parts, y = _frame(title, min(0.0, *flat), max(0.0, *flat), zero_based=True)
    xs = _xs(len(labels))
    bw = max(6.0, (W - LEFT - RIGHT) / len(labels) * 0.5)
    zero = y(0.0)
    for x, vals in zip(xs, per_kernel, strict=True):
        if not vals:
            continue
        m = sum(vals) / len(vals)
        top, bot = sorted((y(m), zero))
        parts.append(
            f'<rect x="{x - bw / 2:.1f}" y="{top:.1f}" width="{bw:.1f}" '
            f'height="{max(bot - top, 0.5):.1f}" class="bar"><title>mean {escape(_fmt(m))}'
            "</title></rect>"
        )
        for v in vals:
            parts.append(f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="2" class="pp"/>')
    _labels(parts, xs, labels)
    parts.append("</svg>")
    return Markup("".join(parts))


def history_plot(
    title: str,
    labels: Sequence[str],
    per_night: Sequence[Sequence[float]],
    segments: Sequence[tuple[int, int, float]],
    marks: Sequence[tuple[int, str]] = (),
) -> Markup:
    """A branch's nights: each night's boots (points), the segments between change points
    at their means (lines), and the nights regressions were opened at (dashed, titled).
    Only the first night, the last and the marked ones are labelled: sixty labels do not
    fit."""
    flat = [v for vals in per_night for v in vals]
    if not flat:
        return Markup("")
    lo = min(flat + [m for _a, _b, m in segments])
    hi = max(flat + [m for _a, _b, m in segments])
    parts, y = _frame(title, lo, hi)
    xs = _xs(len(labels))
    step = (xs[1] - xs[0]) if len(xs) > 1 else 10.0
    for x, vals in zip(xs, per_night, strict=True):
        for v in vals:
            parts.append(f'<circle cx="{x:.1f}" cy="{y(v):.1f}" r="1.8" class="pp"/>')
    for a, b, m in segments:
        x1, x2 = xs[a] - step / 2, xs[b - 1] + step / 2
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y(m):.1f}" x2="{x2:.1f}" y2="{y(m):.1f}" class="mn">'
            f"<title>nights {a + 1}-{b}: mean {escape(_fmt(m))}</title></line>"
        )
    shown = {0, len(labels) - 1}
    for night, text in marks:
        if 0 <= night < len(xs):
            x = xs[night] - step / 2
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" class="ci" '
                f'stroke-dasharray="3,3"><title>{escape(text)}</title></line>'
            )
            shown.add(night)
    for i in sorted(shown):
        lab = labels[i]
        short = lab if len(lab) <= 10 else lab[:9] + "\u2026"
        parts.append(
            f'<text x="{xs[i]:.1f}" y="{H - BOTTOM + 14}" class="tk" text-anchor="middle">'
            f"<title>{escape(lab)}</title>{escape(short)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
