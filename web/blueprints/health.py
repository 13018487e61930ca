"""Liveness and the services' health: ``/healthz`` (the process answers: what the health
check of ``stackbench up`` GETs), ``/api/health`` (each supervised service: up or down,
since when, restarts) and the strip every page shows while one is down."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Flask

bp = Blueprint("health", __name__)

# every page reads the supervisor's state; a page burst asks it once
_CACHE_S = 2.0
_cache: list[Any] = [0.0, None]


def services_status() -> list[dict[str, Any]] | None:
    from stackbench import services

    now = time.monotonic()
    if now - _cache[0] > _CACHE_S:
        _cache[1] = services.status()
        _cache[0] = now
    return _cache[1]


@bp.get("/healthz")
def healthz():
    # no database: a restart of PostgreSQL must not make the web look dead too
    return "ok\n", 200, {"Content-Type": "text/plain; charset=utf-8"}


@bp.get("/api/health")
def api_health():
    rows = services_status()
    down = [r["name"] for r in rows or [] if not r["up"]]
    body = {"supervisor": rows is not None, "services": rows or [], "down": down}
    return body, 503 if down else 200


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    app.jinja_env.filters["services_time"] = _clock

    @app.context_processor
    def down_services():
        rows = services_status()
        return {"services_down": [r for r in rows or [] if not r["up"]]}
