"""stackbench's one HTTP client against a real local HTTP server: retries only through
transient failures, error statuses with their bodies, one-line errors out of budget, and a
session cookie kept between requests (Buildbot's login)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stackbench import httpclient
from stackbench.httpclient import Client, HttpError, Transient, with_retries


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body, headers) of the server's script."""

    def _answer(self) -> None:
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        srv.seen.append((self.command, self.path, self.headers.get("Cookie"),
                         self.rfile.read(length) if length else b""))  # fmt: skip
        status, body, headers = srv.script.pop(0) if srv.script else (200, b"{}", {})
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:  # keep the test output clean
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    srv.script, srv.seen = [], []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def url(srv) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/"


def test_transient_statuses_are_retried_until_an_answer(server):
    server.script = [(503, b"busy", {}), (502, b"gw", {}), (200, b'{"ok": 1}', {})]
    c = Client(url(server))
    pauses: list[float] = []
    got = with_retries("t", lambda: c.send("GET", "x").json(), sleep=pauses.append)
    assert got == {"ok": 1} and len(server.seen) == 3
    assert pauses == [0.5, 1.0]  # backoff doubles


def test_an_error_status_is_not_retried_and_keeps_its_body(server):
    server.script = [(422, json.dumps({"error": "bad runs", "fields": {"runs": "1..30"}}).encode(),
                      {"Content-Type": "application/json"})]  # fmt: skip
    c = Client(url(server))
    with pytest.raises(HttpError) as err:
        with_retries("t", lambda: c.send("POST", "api", json_body={"runs": 99}), sleep=lambda s: 0)
    assert err.value.status == 422 and err.value.json_error() == ("bad runs", {"runs": "1..30"})
    assert len(server.seen) == 1 and json.loads(server.seen[0][3]) == {"runs": 99}


def test_out_of_budget_is_one_line_that_says_what_to_do():
    dead = Client(f"http://127.0.0.1:{_free_port()}/")
    with pytest.raises(Transient) as err:
        with_retries("the dead", lambda: dead.send("GET", "x"), budget_s=0.2, advice="start it")
    text = str(err.value)
    assert "\n" not in text and text.startswith("cannot reach the dead") and "start it" in text


def test_a_truncated_json_answer_counts_as_transient(server):
    server.script = [(200, b'{"cut', {}), (200, b'{"whole": true}', {})]
    c = Client(url(server))
    got = with_retries("t", lambda: c.send("GET", "x").json(), sleep=lambda s: None)
    assert got == {"whole": True}
    assert httpclient.is_transient(json.JSONDecodeError("x", "", 0))


def test_a_session_cookie_is_kept_and_params_are_encoded(server):
    server.script = [(200, b"", {"Set-Cookie": "session=abc; Path=/"}), (200, b"[]", {})]
    c = Client(url(server), cookies=True, headers={"Accept": "application/json"})
    c.send("GET", "auth/login")
    assert c.send("GET", "api", params={"commit": "a b", "skip": None}).json() == []
    assert server.seen[1][1] == "/api?commit=a+b" and server.seen[1][2] == "session=abc"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
