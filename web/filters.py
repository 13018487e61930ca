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


def figure(v: float | None) -> str:
    """A verdict row's base or new figure, printed as the stackbench table prints it."""
    from stackbench.resultsdb.tables.verdict import figure as text

    return text(v)


def httpurl(url: object) -> str:
    """Only http(s) links from stored metadata reach an href (no javascript: URLs)."""
    s = str(url or "")
    return s if s.startswith(("http://", "https://")) else ""


def buildbot_link(meta: dict | None) -> str:
    """The Buildbot UI page of a build or run: a stored URL, or the build id the worker
    recorded (``buildbot_build``) under the configured Buildbot URL."""
    meta = meta or {}
    url = httpurl(meta.get("buildbot_url"))
    if url:
        return url
    build = str(meta.get("buildbot_build") or "")
    base = _buildbot_base()
    if build.isdigit() and base:
        return f"{base.rstrip('/')}/#/builds/{build}"
    return ""


def _buildbot_base() -> str:
    from flask import current_app

    base = current_app.config.get("BUILDBOT_URL")
    if base is None or base == "":
        try:
            from stackbench.jobs.executors.buildbot.client import buildbot_url

            base = buildbot_url() or ""
        except Exception:  # no Buildbot installed or configured: no links
            base = ""
        current_app.config["BUILDBOT_URL"] = base or False
    return httpurl(base) if base else ""


def init_app(app: Flask) -> None:
    app.jinja_env.globals["buildbot_link"] = buildbot_link
    app.jinja_env.filters.update(
        shortsha=shortsha, ago=ago, pct=pct, num=num, figure=figure, httpurl=httpurl
    )
