"""The one HTTP client of stackbench: the CLI's client of the JSON API, the workers' run
uploads and look-ups, and the Buildbot master's REST and control calls all send through
:class:`Client`.

It is urllib underneath: a CLI command that talks no HTTP never pays for importing more,
and every server it talks to is on a near network. A request is retried only where the
caller says it may be (:func:`with_retries`): GETs are idempotent, a POST is not unless the
caller can look for its effect first (see ``jobs.executors.buildbot.client.Master.control``).
"""

from __future__ import annotations

import http.client
import http.cookiejar
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stackbench.errors import StackbenchError

log = logging.getLogger(__name__)

# statuses a restarting or overloaded server (or a proxy before it) answers for a while
TRANSIENT_STATUS = (500, 502, 503, 504)
# how long one request keeps trying through transient errors, and the longest pause
RETRY_BUDGET_S = 120.0
MAX_BACKOFF_S = 10.0


class Transient(StackbenchError):
    """A failure that another attempt may not meet (connection reset, a truncated answer,
    a 5xx); raised only once the retry budget is spent."""


class HttpError(StackbenchError):
    """The server answered with an error status; ``body`` is what it said."""

    def __init__(self, url: str, status: int, reason: str, body: bytes) -> None:
        self.url, self.status, self.reason, self.body = url, status, reason, body
        super().__init__(f"{url}: HTTP {status} {reason}".rstrip())

    def text(self, limit: int = 300) -> str:
        return self.body.decode(errors="replace")[:limit]

    def json_error(self) -> tuple[str, dict[str, Any] | None]:
        """(message, fields) of a stackbench API error body, else (its text, None)."""
        try:
            err = json.loads(self.body)
            return str(err.get("error", "")), err.get("fields")
        except (ValueError, AttributeError):
            return self.text(), None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, HttpError):
        return exc.status in TRANSIENT_STATUS
    if isinstance(exc, urllib.error.URLError):
        return True  # refused while the server restarts, reset, timed out
    return isinstance(
        exc, (http.client.HTTPException, ConnectionError, TimeoutError, json.JSONDecodeError)
    )


def describe(exc: BaseException) -> str:
    """A transport failure in a few words (for one-line errors)."""
    if isinstance(exc, HttpError):
        return f"HTTP {exc.status}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def with_retries(
    what: str,
    attempt: Callable[[], Any],
    *,
    budget_s: float | None = None,
    advice: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """``attempt()`` until it succeeds, retrying transient errors with exponential backoff
    (0.5 s doubling, at most MAX_BACKOFF_S) for ``budget_s`` (None: RETRY_BUDGET_S); other
    errors pass through. Out of budget: :class:`Transient`, one line ending in ``advice``."""
    budget = RETRY_BUDGET_S if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delay = 0.5
    while True:
        try:
            return attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if time.monotonic() + delay > deadline:
                tail = f"; {advice}" if advice else ""
                raise Transient(
                    f"cannot reach {what}: {describe(exc)} (tried for {budget:.0f} s){tail}"
                ) from None
            log.info("%s: %s; retrying in %.1f s", what, describe(exc), delay)
            sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)


@dataclass
class Response:
    status: int
    body: bytes

    def json(self, empty: Any = None) -> Any:
        """The body as JSON (``empty`` when there is none); a truncated body raises
        JSONDecodeError, which :func:`is_transient` counts as transient."""
        return json.loads(self.body) if self.body else empty


class Client:
    """Requests to one server (``base_url``; a path that is a whole URL goes there instead),
    with fixed headers and, with ``cookies``, a session cookie jar (Buildbot's login)."""

    def __init__(
        self,
        base_url: str = "",
        *,
        headers: dict[str, str] | None = None,
        cookies: bool = False,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url
        self.headers = dict(headers or {})
        self.timeout = timeout
        handlers = [urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())]
        self._opener = urllib.request.build_opener(*(handlers if cookies else []))

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        url = path if "://" in path else self.base_url + path
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        if clean:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(clean, doseq=True)
        return url

    def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """One request, no retry. An error status raises :class:`HttpError`; transport
        failures raise as urllib and http.client do (see :func:`is_transient`)."""
        url = self.url(path, params)
        hdrs = {**self.headers, **(headers or {})}
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with self._opener.open(req, timeout=timeout or self.timeout) as resp:
                return Response(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            raise HttpError(url, exc.code, str(exc.reason or ""), exc.read()) from None
