"""Quarantine: a machine whose nightly A/A goes bad gets no new rounds until a later A/A is
healthy, and its rounds go to its healthy peer.

The A/A nights are the nightly's own (dry boots whose numbers are stored real boots, as in
tests/jobs/tracking/test_nightly_aa.py) on two machines, w1 and w2; a drift injected into w2's boots one
night quarantines it. Then real Buildbot with the two as workers (dry kernels, as in
tests/jobs/driver/test_buildbot_lab.py), the real dispatcher and web API run a series in rounds: every
round runs on w1.
"""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from test_nightly import METRIC, night
from test_nightly_history import RealBootLab, RealBoots, real_offsets

from stackbench.resultsdb import db, quarantine
from stackbench.resultsdb.models import Machine


def aa_night(at: str, spread: float, false_alarm: bool = False) -> dict:
    fig = {"metric": "m", "false_alarm": false_alarm, "change_pct": 3.0, "spread_pct": spread}
    return {"at": at, "figures": [fig]}


def test_a_bad_aa_night_quarantines_and_a_healthy_one_releases():
    quiet = [aa_night(f"2026-11-0{i}T02:00:00", s) for i, s in enumerate((0.8, 0.7, 0.9), 1)]
    assert quarantine.reasons(quiet) == []
    (why,) = quarantine.reasons([*quiet, aa_night("2026-11-04T02:00:00", 0.8, True)])
    assert why == "m: the A/A called one kernel changed (+3.0%)"
    (why,) = quarantine.reasons([*quiet, aa_night("2026-11-04T02:00:00", 2.5)])
    assert why == "m: spread 2.50% is over 2x its usual 0.80%"
    # no history yet: a wide spread has nothing to be wide against
    assert quarantine.reasons([aa_night("2026-11-01T02:00:00", 9.0)]) == []
    # a step up that lasts: still quarantined when the spread rule, against the new nights,
    # no longer fires
    nights = [aa_night(f"2026-11-{i:02d}T02:00:00", 0.8) for i in range(1, 11)]
    nights += [aa_night(f"2026-11-{i:02d}T02:00:00", 1.5) for i in range(11, 15)]
    why = quarantine.reasons(nights)
    assert len(why) == 1 and why[0].startswith("m: its A/A spread stepped up +")
    assert why[0].endswith("on 2026-11-11")

    meta = quarantine.judged({"aa": [*quiet, aa_night("2026-11-04T02:00:00", 0.7, True)]})
    assert meta["quarantine"]["since"] == "2026-11-04T02:00:00"
    meta["aa"].append(aa_night("2026-11-05T02:00:00", 3.0))
    meta = quarantine.judged(meta)
    assert meta["quarantine"]["since"] == "2026-11-04T02:00:00"  # since the first bad night
    assert "spread 3.00%" in meta["quarantine"]["why"][0]
    meta["aa"].append(aa_night("2026-11-06T02:00:00", 0.8))
    assert "quarantine" not in quarantine.judged(meta)


class Drift(RealBoots):
    """Real boot offsets on a host that slows down boot after boot (3% a boot)."""

    def __init__(self, offsets: np.ndarray, seed: int):
        super().__init__(offsets, seed)
        self.boots = 0

    def normal(self, mean: float, sd: float) -> float:
        self.boots += 1
        return super().normal(mean, sd) * (1 - 0.03 * self.boots)


def quarantined(eng) -> dict[str, dict]:
    with Session(eng) as s:
        return {
            m.name: m.meta["quarantine"]
            for m in s.scalars(select(Machine))
            if (m.meta or {}).get("quarantine")
        }


def drifted_into_quarantine(eng) -> None:
    """Nightly A/As on w1 and w2 until w2's drifts: w2 is quarantined, w1 is not."""
    offsets = real_offsets()
    w1, w2 = RealBootLab(offsets, seed=3, n=2), RealBootLab(offsets, seed=4, n=2)
    w1.machine, w2.machine = "w1", "w2"
    night(eng, w1)  # the baseline
    for _ in range(3):
        night(eng, w1, aa_boots=6)
        night(eng, w2, aa_boots=6)
    assert quarantined(eng) == {}
    w2.rng = Drift(offsets, seed=5)
    night(eng, w2, aa_boots=6)
    q = quarantined(eng)
    assert list(q) == ["w2"]
    assert any("spread" in why and "its usual" in why for why in q["w2"]["why"]), q
    with db.session(eng) as s:
        assert quarantine.avoided(s) == ["w2"]


def machines_page(eng) -> str:
    from stackbench.web import create_app

    app = create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})
    return app.test_client().get("/machines").get_data(as_text=True)


def test_a_drifting_aa_quarantines_its_machine_until_a_healthy_one(eng):
    drifted_into_quarantine(eng)
    since = quarantined(eng)["w2"]["since"]
    page = machines_page(eng)
    row = page[page.index("<td>w2</td>") :].split("</tr>")[0]
    assert "quarantined</span> since " + since[:16] in row and "its usual" in row
    assert "quarantined" not in page[page.index("<td>w1</td>") :].split("</tr>")[0]
    assert METRIC in page[page.index('id="aa-table"') :]
    from stackbench.mail import reports

    mail = reports.nightly_summary(eng, {"date": "2026-11-25", "branches": []})
    assert f"quarantined: w2 since {since[:16]}: " in mail.body and "its usual" in mail.body

    # a healthy A/A on w2 releases it
    lab = RealBootLab(real_offsets(), seed=6, n=2)
    lab.machine = "w2"
    night(eng, lab, aa_boots=6)
    assert quarantined(eng) == {}
    assert "quarantined</span>" not in machines_page(eng)


@pytest.fixture
def pair(eng, tmp_path, monkeypatch):
    """The web API, a master with two dry qemu workers (w1, w2), and the dispatcher."""
    pytest.importorskip("buildbot")
    pytest.importorskip("buildbot_worker")
    from test_buildbot_fanout import start_web, start_worker

    from stackbench.jobs.driver import dispatcher_service
    from stackbench.jobs.executors import services
    from stackbench.jobs.executors.buildbot import client

    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    workers = [{"name": n, "kind": "qemu", "cpus": 2, "memory_mb": 1024} for n in ("w1", "w2")]
    extra = {"dry_kernel": True, "dry_seconds": 1, "jobs": ["dry-vm"],
             "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}]}  # fmt: skip
    cfg = services.create_master(base / "master", workers, extra=extra)
    master = client.embedded_master_at(base / "master")
    for key, value in (("URL", master.url), ("USER", master.user), ("PASSWORD", master.password)):
        monkeypatch.setenv(f"STACKBENCH_BUILDBOT_{key}", value)
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", web_url)
    started = []
    try:
        services.start_master(base / "master")
        for w in workers:
            started.append(start_worker(base, cfg, w["name"], web_url))
        for w in workers:
            client.wait_for_worker(master, w["name"])
        print(dispatcher_service.start())
        yield master
    finally:
        print(dispatcher_service.stop())
        for wb in started:
            services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()


def test_a_quarantined_machine_gets_no_rounds_and_its_peer_takes_them(eng, pair):
    from helpers.lifecycle import finished, wait_for
    from test_buildbot_lab import make_series

    from stackbench.jobs.driver import lifecycle

    drifted_into_quarantine(eng)
    master = pair
    sid = make_series(eng)
    lifecycle.hand_over(eng, sid, source="test", fresh=True)
    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=400, every=1)
    assert x.state == "done", (x.state, x.error)

    workers = {w["workerid"]: w["name"] for w in master.get("workers")["workers"]}
    builders = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    builds = master.get("builds?property=round&property=quarantined")["builds"]
    rounds = [b for b in builds if builders[b["builderid"]] == "bench-qemu"]
    assert len(rounds) >= 2
    assert {workers[b["workerid"]] for b in rounds} == {"w1"}
    assert {b["properties"]["quarantined"][0] for b in rounds} == {"w2"}
