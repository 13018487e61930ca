"""The CLI's client of a stackbench server's JSON API, used when ``STACKBENCH_URL`` is set.

Small on purpose (stackbench's one HTTP client, :mod:`stackbench.httpclient`): commands call :func:`client` and, when it returns a client,
talk to the server instead of the database. The token comes from ``STACKBENCH_TOKEN`` or the
file ``$STACKBENCH_HOME/token``.
"""

from __future__ import annotations

import base64
import json
import urllib.error
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stackbench import config
from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.httpclient import Client, HttpError, with_retries


class ApiError(StackbenchError):
    def __init__(self, url: str, status: int, message: str, fields: dict | None = None) -> None:
        self.url = url
        self.status = status
        self.fields = fields or {}
        super().__init__(f"{url}: HTTP {status}: {message}")


class ApiClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._http = Client(self.base_url, timeout=timeout)

    # -- transport ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        accept: str = "application/json",
        retry: bool = False,
    ) -> Any:
        """One request; with ``retry`` (a request safe to send again) transient failures
        are retried for httpclient's budget."""
        headers = {"Accept": accept, "User-Agent": "stackbench-cli"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"

        def attempt() -> Any:
            return self._http.send(method, path, json_body=body, params=params, headers=headers)

        try:
            resp = with_retries(f"stackbench at {self.base_url}", attempt) if retry else attempt()
        except HttpError as exc:
            msg, fields = exc.json_error()
            if exc.status == 404:
                raise NotFoundError(msg or f"{exc.url}: not found") from None
            raise ApiError(exc.url, exc.status, msg or exc.reason, fields) from None
        except urllib.error.URLError as exc:
            raise StackbenchError(f"cannot reach {self.base_url}: {exc.reason}") from None
        if accept == "application/json":
            return resp.json(empty=None)
        return resp.body.decode()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    # -- what the CLI needs ------------------------------------------------------------------

    def submit(
        self,
        mbox: bytes | str | Path,
        *,
        tree: str,
        base: str = "",
        jobs: list[str],
        runs: int | None = None,
    ) -> dict[str, Any]:
        """Submit a series (``runs``: None, the service's default); returns its JSON
        (``id``, ``url``, ``state``...)."""
        if isinstance(mbox, Path):
            try:
                mbox = mbox.read_bytes()
            except OSError as exc:
                raise InputError(mbox, exc.strerror or "cannot read") from None
        body: dict[str, Any] = {"tree": tree, "base": base, "jobs": jobs}
        if runs is not None:
            body["runs"] = runs
        if isinstance(mbox, bytes):
            # the bytes as read: mails in latin-1 or any other charset must reach git am as is
            body["mbox_base64"] = base64.b64encode(mbox).decode()
        else:
            body["mbox"] = mbox
        return self.post("/api/series", body)

    def series(self, series_id: int) -> dict[str, Any]:
        return self.get(f"/api/series/{series_id}")

    def comparison(
        self, kernels: list[str], *, all_rows: bool = False, suite: str | None = None
    ) -> dict[str, Any]:
        """Create (or find) the comparison; returns its key and URLs."""
        return self.post(
            "/api/comparisons", {"kernels": kernels, "all_rows": all_rows, "suite": suite}
        )

    def compare(
        self,
        kernels: list[str],
        *,
        style: str = "lkp",
        all_rows: bool = False,
        suite: str | None = None,
    ) -> str:
        """The comparison table as text, exactly what the page shows."""
        comp = self.comparison(kernels, all_rows=all_rows, suite=suite)
        return self.request(
            "GET",
            f"/api/comparisons/{comp['key']}/tables/{style}",
            params={"format": "text"},
            accept="text/plain",
        )

    def upload_runs(self, runs: Iterable[Any]) -> list[dict[str, Any]]:
        """Upload runs (RunData objects or payload dicts); each answer has ``id`` and
        ``created`` (False when the idempotency key was already stored)."""
        from stackbench.resultsdb.wire import run_to_json

        items = [r if isinstance(r, dict) else run_to_json(r) for r in runs]
        answers: list[dict[str, Any]] = []
        for batch in _batches(items, UPLOAD_BATCH_BYTES):
            # each run's idempotency key makes the upload safe to send again: a web being
            # restarted (nginx answering 502, a connection reset) is waited for, and the
            # boot that measured the runs does not fail for it
            answers += self.request("POST", "/api/runs", body={"runs": batch}, retry=True)["runs"]
        return answers


# half the server's request limit (the web app's MAX_CONTENT_LENGTH, 8 MiB): runs with long
# logs go in several requests; one run larger than this goes alone (the server judges it)
UPLOAD_BATCH_BYTES = 4 * 1024 * 1024


def _batches(items: list[dict[str, Any]], limit: int) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    for item in items:
        n = len(json.dumps(item))
        if batch and size + n > limit:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch:
        yield batch


def token() -> str | None:
    tok = config.get("STACKBENCH_TOKEN").strip()
    if tok:
        return tok
    path = config.home() / "token"
    if path.exists():
        return path.read_text().strip() or None
    return None


def client() -> ApiClient | None:
    """A client for $STACKBENCH_URL, or None when the CLI should use the database."""
    url = config.server_url()
    if not url:
        return None
    return ApiClient(url, token())
