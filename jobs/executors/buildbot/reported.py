"""Which runs of a benchmark request stackbench already holds, looked up by idempotency key.

A bare-metal box reports its results itself, after a kexec into the kernel under test, so
the Buildbot side learns that a benchmark finished only by finding its runs: through the
public read API (``GET /api/kernels?commit=`` then ``GET /api/runs?kernel=``) when a
stackbench server is known, else in the database. The same lookup lets a retried bare-metal
build see that an earlier attempt's results did arrive and skip a second kexec.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
from collections.abc import Iterable
from typing import Any

from stackbench.errors import StackbenchError
from stackbench.httpclient import Client, HttpError

PAGE = 500  # the API's largest page


def _get(url: str, timeout: float) -> dict[str, Any]:
    try:
        resp = Client(headers={"Accept": "application/json"}).send("GET", url, timeout=timeout)
        return resp.json(empty={})
    except HttpError as exc:
        raise StackbenchError(f"{url}: HTTP {exc.status}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise StackbenchError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


def _paged(url: str, field: str, timeout: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    sep = "&" if "?" in url else "?"
    while True:
        page = _get(f"{url}{sep}limit={PAGE}&offset={len(out)}", timeout).get(field) or []
        out += page
        if len(page) < PAGE:
            return out


def stored_keys_api(url: str, commit: str, keys: Iterable[str], timeout: float = 30) -> set[str]:
    """The subset of ``keys`` whose runs the server at ``url`` holds (runs of ``commit``)."""
    wanted = set(keys)
    base = url.rstrip("/") + "/api"
    found: set[str] = set()
    q = urllib.parse.urlencode({"commit": commit})
    for kernel in _paged(f"{base}/kernels?{q}", "kernels", timeout):
        # the commit filter is a prefix match: keep only this exact kernel's runs
        if kernel.get("commit") != commit:
            continue
        for run in _paged(f"{base}/runs?kernel={int(kernel['id'])}", "runs", timeout):
            if run.get("idempotency_key") in wanted:
                found.add(run["idempotency_key"])
    return found


def stored_keys_db(keys: Iterable[str]) -> set[str]:
    """The subset of ``keys`` stored in the database (one-machine setups, no server)."""
    from stackbench.resultsdb import db, runs_q

    with db.session() as s:
        return runs_q.stored_keys(s, sorted(set(keys)))


def stored_keys(keys: Iterable[str], commit: str, url: str | None) -> set[str]:
    """Through the API when ``url`` is given, else the database."""
    keys = list(keys)
    return stored_keys_api(url, commit, keys) if url else stored_keys_db(keys)
