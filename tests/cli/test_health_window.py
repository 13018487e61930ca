"""The health check's restart rule against a real HTTP port: a program that fails three of
its last five probes is restarted, even when it answers now and then between the failures
(a Buildbot master drowning in clients that hung up does); one failing less often is not.

supervisord is stood in for by a small object that keeps the program's state, since what is
tested is which ticks lead to a restart, not supervisord's restarting (test_supervisor.py)."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from stackbench import services


class Sup:
    """supervisord's XML-RPC calls the check makes, for one program that is always up."""

    def __init__(self, name: str) -> None:
        self.info = {"name": name, "statename": "RUNNING", "pid": 0, "start": 1000.0, "stop": 0}
        self.restarts = 0

    def getAllProcessInfo(self) -> list[dict]:  # noqa: N802 (supervisord's name)
        return [dict(self.info)]

    def getProcessInfo(self, name: str) -> dict:  # noqa: N802
        return dict(self.info)

    def stopProcess(self, name: str, wait: bool) -> None:  # noqa: N802
        self.info["statename"] = "STOPPED"

    def startProcess(self, name: str, wait: bool) -> None:  # noqa: N802
        self.restarts += 1
        self.info.update(statename="RUNNING", start=self.info["start"] + 1)


@pytest.fixture
def urls(tmp_path, monkeypatch):
    """A port that answers and one that refuses."""
    monkeypatch.setattr(services, "health_file", lambda: tmp_path / "health.json")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nobody listens once this socket closes
    yield {"ok": f"http://127.0.0.1:{server.server_port}/", "bad": f"http://127.0.0.1:{closed}/"}
    server.shutdown()


def ticks(urls: dict[str, str], pattern: str) -> tuple[Sup, services.HealthCheck]:
    """Probe once per letter of ``pattern`` (o: answers, x: refuses), 5 s apart."""
    sup = Sup("buildbot-master")
    check = services.HealthCheck({"buildbot-master": urls["ok"]}, sup)
    now = 2000.0  # long past the grace and the start-up limit of a program started at 1000
    check.entry("buildbot-master")["answered"] = sup.info["start"]
    for c in pattern:
        check.probes["buildbot-master"] = urls["ok" if c == "o" else "bad"]
        check.on_tick(now)
        now += 5
    return sup, check


def test_failures_between_lucky_answers_restart_the_program(urls):
    sup, check = ticks(urls, "oxoxox")
    assert sup.restarts == 1
    assert "not answering" in check.entry("buildbot-master")["reason"]


def test_three_failures_in_a_row_restart_it_and_the_count_starts_again(urls):
    sup, _ = ticks(urls, "xxx" + "xx")  # two more failures after the restart: not yet three
    assert sup.restarts == 1


def test_a_failure_now_and_then_restarts_nothing(urls):
    sup, check = ticks(urls, "ooxooxooxoo")
    assert sup.restarts == 0
    e = check.entry("buildbot-master")
    assert e["recent"] == [False, False, True, False, False] and e["down_since"] is None
