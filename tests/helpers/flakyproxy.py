"""A TCP proxy on 127.0.0.1 that breaks HTTP exchanges with a real server behind it, the way
a loaded master or a flaky network does: connections reset before an answer, answers cut
short (``http.client.IncompleteRead``), and 502 answers from a gateway. Requests it lets
through reach the real server unchanged."""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
from collections import Counter

FAULTS = ("reset", "truncate", "bad-gateway")


def _read_request(conn: socket.socket) -> bytes:
    """One whole HTTP request (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _forward(request: bytes, upstream: tuple[str, int]) -> bytes:
    with socket.create_connection(upstream, timeout=30) as up:
        up.sendall(request)
        out = b""
        while True:
            chunk = up.recv(65536)
            if not chunk:
                return out
            out += chunk


class FlakyProxy:
    """Every ``every``-th exchange fails (cycling through FAULTS); the first POST's answer is
    always cut short, after the server has acted on it (a submission whose answer is lost)."""

    def __init__(self, upstream: tuple[str, int], every: int = 3) -> None:
        self.upstream = upstream
        self.every = every
        self.faults: Counter[str] = Counter()
        self.posts = 0
        self._n = itertools.count(1)
        self._kinds = itertools.cycle(FAULTS)
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self) -> FlakyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _fault_for(self, request: bytes) -> str | None:
        with self._lock:
            if request.startswith(b"POST"):
                self.posts += 1
                if self.posts == 1:
                    return "truncate"
            if next(self._n) % self.every == 0:
                return next(self._kinds)
            return None

    def _handle(self, conn: socket.socket) -> None:
        request = _read_request(conn)
        if not request:
            return
        fault = self._fault_for(request)
        if fault:
            with self._lock:
                self.faults[fault] += 1
        if fault == "reset":
            conn.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            return  # closed with RST, no answer
        if fault == "bad-gateway":
            conn.sendall(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 11\r\nConnection: close\r\n\r\nbad gateway"
            )
            return
        answer = _forward(request, self.upstream)
        if fault == "truncate":
            head, sep, body = answer.partition(b"\r\n\r\n")
            answer = head + sep + body[: len(body) // 2]
        conn.sendall(answer)
