"""stackbench status: which embedded service is up, which is down and since when."""

from __future__ import annotations

import argparse

NAME = "status"
HELP = "show each service of 'stackbench up': state, since when, restarts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def since(ts: float | None) -> str:
    import time

    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def run(args: argparse.Namespace) -> int:
    """Exit status 0 when every service is up, 1 when one is down or none runs."""
    import json

    from stackbench import services

    rows = services.status()
    left = services.orphans() if rows is None else {}
    if args.json:
        print(json.dumps({"supervisor": rows is not None, "services": rows or [],
                          "unsupervised": left}, indent=1))  # fmt: skip
        return 0 if rows and all(r["up"] for r in rows) else 1
    if rows is None and left:
        print(
            "supervisor: DOWN (supervisord is gone): nothing restarts what exits; still "
            "running unsupervised: " + ", ".join(f"{n} (pid {p})" for n, p in left.items())
        )
        print("'stackbench up' stops them and starts everything under a new supervisor")
        return 1
    if rows is None:
        print("no services running here ('stackbench up' starts them)")
        return 1
    width = max(len(r["name"]) for r in rows) if rows else 0
    for r in rows:
        pid = f"pid {r['pid']}" if r["pid"] else "-"
        line = (f"{r['name']:<{width}}  {'up' if r['up'] else 'DOWN':<4}  {r['state']:<13}  "
                f"since {since(r['since'])}  {pid:<10}  restarts {r['restarts']}")  # fmt: skip
        if r["reason"] and (r["restarts"] or not r["up"]):
            line += f" (last: {r['reason']})"
        print(line)
    return 0 if all(r["up"] for r in rows) else 1
