"""A bare-metal benchmark through Buildbot, as far as this machine allows.

A real master and a real worker of kind ``baremetal`` on loopback, the real web API and
database, and the real helpers of the baremetal_worker role. The bench-baremetal build's
step writes the job into the box's spool and calls ``stackbench-kexec``; ``kexec``,
``systemctl`` and ``systemd-run`` are stubs that only log (a real kexec would reboot this
machine). The test then plays the box: it kills the worker (the machine going down), runs
``stackbench-boot-report`` as the unit would after the reboot, with the command line the
stub was asked to boot, and starts the worker again (the production kernel coming back).
The master's wait step must see the runs through the API and end the build as a success;
a box that comes back without results, or never reports, gets its attempt recorded as lost.
Kernel builds and the benchmark itself are the dry ones of the fan-out test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from helpers.lifecycle import wait_for  # noqa: E402
from test_buildbot_fanout import kill_machine, start_web, worker_token  # noqa: E402

from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "ansible" / "roles" / "baremetal_worker" / "files"
SUCCESS, FAILURE, RETRY = 0, 2, 5
AWAIT = "wait for the box to report"


def stub(path: Path, log: Path) -> str:
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(['{path.name}'] + sys.argv[1:]) + '\\n')\n"
    )
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def box(eng, tmp_path):
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    calls = tmp_path / "calls.log"
    spool = tmp_path / "spool"
    cfg = services.create_master(
        base / "master",
        [{"name": "box1", "kind": "baremetal", "cpus": 2, "memory_mb": 2048}],
        extra={
            "dry_kernel": True,
            "jobs": ["dry-vm"],
            "runs": 2,
            "machine_kinds": ["baremetal"],
            "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}],
            "stackbench_url": web_url,
            "report_poll": 0.5,
            "baremetal_attempts": 1,
            "kexec_delay": 30,
        },
    )
    env = {
        "STACKBENCH_URL": web_url,
        "STACKBENCH_WORKER_TOKEN": worker_token("box1"),
        "STACKBENCH_BAREMETAL_DIR": str(spool),
        "STACKBENCH_KEXEC": str(FILES / "stackbench-kexec"),
        "KEXEC": stub(tmp_path / "bin" / "kexec", calls),
        "SYSTEMCTL": stub(tmp_path / "bin" / "systemctl", calls),
        "SYSTEMD_RUN": stub(tmp_path / "bin" / "systemd-run", calls),
    }
    wb = base / "box1"
    services.create_worker(
        wb,
        f"127.0.0.1:{cfg['pb_port']}",
        "box1",
        services.worker_password(base / "master", "box1"),
    )
    try:
        services.start_master(base / "master")
        services.start_worker(wb, env=env)
        master = client.embedded_master_at(base / "master")
        wait_for("the box to connect", lambda: connected(master), timeout=60)
        yield Box(master, wb, env, spool, calls, tmp_path)
    finally:
        services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()


class Box:
    def __init__(self, master, worker_base, env, spool, calls, tmp):
        self.master, self.worker_base, self.env = master, worker_base, env
        self.spool, self.calls, self.tmp = spool, calls, tmp

    def await_step(self):
        """The running wait step of the bench-baremetal build, once the job is queued."""
        if not (self.spool / "current" / "job.json").exists():
            return None
        for b in self.master.get("builds?complete=false")["builds"]:
            for s in self.master.get(f"builds/{b['buildid']}/steps")["steps"]:
                if s["name"] == AWAIT and s["started_at"] and not s["complete"]:
                    return s
        return None

    def reboot_into_test_kernel(self, booted_cmdline: str | None = None) -> tuple[int, dict]:
        """The box goes down, boots (the kexec'd kernel or, if given, another command line),
        and the boot-and-report unit runs; returns its exit code and status.json."""
        job = json.loads((self.spool / "current" / "job.json").read_text())
        kill_machine(self.worker_base)
        wait_for("the master to see the box go", lambda: not connected(self.master), timeout=60)
        if booted_cmdline is None:
            kexec = [c for c in self.calls.read_text().splitlines() if c.startswith("kexec -l")]
            booted_cmdline = kexec[-1].split("--append=", 1)[1]
        cmdline = self.tmp / "cmdline"
        cmdline.write_text(booted_cmdline + "\n")
        env = dict(os.environ, **self.env, STACKBENCH_PROC_CMDLINE=str(cmdline))
        out = subprocess.run(
            [str(FILES / "stackbench-boot-report")], env=env, capture_output=True, text=True
        )
        status = json.loads((self.spool / "done" / job["id"] / "status.json").read_text())
        return out.returncode, status

    def back_to_production(self) -> None:
        # a rebooted machine has no old worker process; here the killed one may linger as a
        # zombie (nobody reaps it in a container), which would pass for a running worker
        pid_file = self.worker_base / "twistd.pid"
        wait_for("the killed worker to be gone", lambda: gone(int(pid_file.read_text())))
        pid_file.unlink()
        assert services.start_worker(self.worker_base, env=self.env)

    def finished(self, before: set[int], count: int = 3) -> list[dict]:
        """The build requests of one submission (series, kernel build, benchmark), once all
        of them exist and are complete."""

        def done():
            new = self.master.get("buildrequests")["buildrequests"]
            new = [r for r in new if r["buildrequestid"] not in before]
            return new if len(new) == count and all(r["complete"] for r in new) else None

        return sorted(wait_for("the submission's builds", done), key=lambda r: r["buildrequestid"])

    def bench_attempts(self, reqs: list[dict]) -> list[dict]:
        """The bench-baremetal builds of these requests, each with its wait step's summary."""
        ids = {b["builderid"]: b["name"] for b in self.master.get("builders")["builders"]}
        brids = {r["buildrequestid"] for r in reqs}
        out = []
        for b in self.master.get("builds")["builds"]:
            if ids[b["builderid"]] == "bench-baremetal" and b["buildrequestid"] in brids:
                steps = self.master.get(f"builds/{b['buildid']}/steps")["steps"]
                b["await"] = next((s["state_string"] for s in steps if s["name"] == AWAIT), "")
                out.append(b)
        return out


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def connected(master) -> bool:
    return any(w["connected_to"] for w in master.get("workers")["workers"])


def all_requests(master) -> list[int]:
    return [r["buildrequestid"] for r in master.get("buildrequests")["buildrequests"]]


def runs_of(eng, commit: str) -> list[tuple]:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT m.name, m.kind, r.status, r.iteration FROM run r "
                "JOIN machine m ON m.id = r.machine_id JOIN kernel_build k ON k.id = r.build_id "
                "WHERE k.commit = :c ORDER BY r.status, r.iteration"
            ),
            {"c": commit},
        ).all()


def test_baremetal_benchmark_kexecs_reports_and_gives_up_on_a_silent_box(box, eng):
    # 1. the box boots the test kernel, runs the job, uploads, comes back: one clean build
    good = "1" * 40
    client.submit(box.master, commits=[good], title="bare metal")
    wait_for("the job queued and the master waiting", box.await_step)
    calls = box.calls.read_text().splitlines()
    current = box.spool / "current"
    assert calls[0].startswith(f"kexec -l {current}/kernel/bzImage --append=")
    assert "stackbench.job=" in calls[0]
    assert calls[1].startswith("systemd-run --on-active=30 --unit=stackbench-kexec-")
    assert calls[1].endswith("systemctl kexec")
    rc, status = box.reboot_into_test_kernel()
    assert (rc, status["result"]) == (0, "reported")
    assert box.calls.read_text().splitlines()[-1] == "systemctl reboot"
    box.back_to_production()
    reqs = box.finished(set())
    assert [r["results"] for r in reqs] == [SUCCESS] * 3
    # the reboot did not make it a retry
    assert [(b["results"], b["await"]) for b in box.bench_attempts(reqs)] == [
        (SUCCESS, "2 run(s) reported")
    ]
    assert runs_of(eng, good) == [
        ("box1", "baremetal", "done", 0),
        ("box1", "baremetal", "done", 1),
    ]

    # 2. the test kernel does not come up; the box falls back to its production kernel,
    # refuses to run the job there and comes back without results: the attempt is lost
    bad = "2" * 40
    before = set(all_requests(box.master))
    client.submit(box.master, commits=[bad], title="kernel that does not boot")
    step = wait_for("the second job queued", box.await_step)
    rc, status = box.reboot_into_test_kernel("BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1")
    assert (rc, status["result"]) == (1, "wrong-kernel")
    wait_for(
        "the master to notice the box is away",
        lambda: (
            "box away"
            in box.master.get(f"builds/{step['buildid']}/steps/{step['number']}")["steps"][0][
                "state_string"
            ]
        ),
    )
    box.back_to_production()
    reqs = box.finished(before)
    assert sorted(r["results"] for r in reqs) == [SUCCESS, SUCCESS, FAILURE]
    attempts = box.bench_attempts(reqs)
    assert [b["results"] for b in attempts] == [RETRY, FAILURE]
    assert attempts[0]["await"].startswith("worker came back with 0 of 2 run(s)")
    assert runs_of(eng, bad) == [("box1", "baremetal", "lost", 0)]

    # 3. a box that never reports (the worker stays, nothing arrives): timeout, then lost
    silent = "3" * 40
    before = set(all_requests(box.master))
    client.submit(box.master, commits=[silent], title="silent box", report_timeout=2)
    reqs = box.finished(before)
    assert sorted(r["results"] for r in reqs) == [SUCCESS, SUCCESS, FAILURE]
    attempts = box.bench_attempts(reqs)
    assert [b["results"] for b in attempts] == [RETRY, FAILURE]
    assert attempts[0]["await"].startswith("no report within 2s (0 of 2 run(s))")
    assert runs_of(eng, silent) == [("box1", "baremetal", "lost", 0)]
