"""Jinja filters shared by the templates."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Flask


def shortsha(sha: str | None, n: int = 12) -> str:
    return (sha or "")[:n] or "-"


def ago(ts: datetime | None) -> str:
    if ts is None:
        return "-"
    secs = int((datetime.now(UTC) - ts).total_seconds())
    if secs < 60:
        return f"{max(secs, 0)}s ago"
    if secs < 3600:
        return f"{secs // 60}m ago"
    if secs < 86400:
        return f"{secs // 3600}h ago"
    return ts.strftime("%Y-%m-%d")


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def num(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v:.4g}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def httpurl(url: object) -> str:
    """Only http(s) links from stored metadata reach an href (no javascript: URLs)."""
    s = str(url or "")
    return s if s.startswith(("http://", "https://")) else ""


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(shortsha=shortsha, ago=ago, pct=pct, num=num, httpurl=httpurl)
