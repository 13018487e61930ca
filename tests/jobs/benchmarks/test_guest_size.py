"""The guest a QEMU benchmark boots is the job's and the machine kind's size, never the host's:
a worker that declares 24 GiB still boots the 1 GiB, 2-CPU tiny guest unless the job asks
for more, and a request larger than the worker is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackbench.cli import main
from stackbench.jobs.benchmarks.guest_size import KIND_DEFAULTS, GuestSize, guest_size


def test_the_kind_decides_the_guest_not_the_capacity():
    assert guest_size("qemu", capacity_cpus=16, capacity_memory_mb=24576) == GuestSize(2, 1024)
    assert KIND_DEFAULTS["qemu"] == GuestSize(2, 1024)
    assert guest_size("qemu", want_memory_mb="4096", capacity_memory_mb=24576) == GuestSize(2, 4096)
    # a bare-metal box is measured as it is: no guest
    assert guest_size("baremetal", capacity_cpus=64, capacity_memory_mb=262144) is None


def _bench(tmp_path: Path, *extra: str) -> dict:
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    out = work / "out"
    assert main(["worker", "build", "--commit", "a" * 40, "--out", str(out), "--dry-kernel"]) == 0
    argv = ["worker", "bench", "--kernel", str(out / "kernel.tar"), "--job", "dry-vm"]
    argv += ["--submission", "s1", "--machine", "big-host", "--runs", "1"]
    argv += ["--out", str(work / "results"), "--dry-kernel", *extra]
    assert main(argv) == 0
    (payload,) = sorted((work / "results").glob("*.json"))
    return json.loads(payload.read_text())["machine"]


def test_a_big_worker_benchmarks_in_the_tiny_guest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # what the local worker of 'stackbench up' declares on a 24 GiB, 16-CPU host
    machine = _bench(tmp_path, "--cpus", "16", "--memory-mb", "24576")
    assert machine == {
        "name": "big-host",
        "kind": "qemu",
        "cpus": 2,
        "memory_mb": 1024,
        "nodes": None,
    }


def test_a_job_that_asks_gets_a_bigger_guest_under_its_own_machine_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    machine = _bench(
        tmp_path, "--cpus", "16", "--memory-mb", "24576", "--guest-cpus", "4",
        "--guest-memory-mb", "4096",
    )  # fmt: skip
    # never pooled with the tiny guest's runs of the same worker
    assert (machine["name"], machine["cpus"], machine["memory_mb"]) == (
        "big-host-4cpu-4096M",
        4,
        4096,
    )


def test_a_guest_larger_than_the_worker_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["worker", "build", "--commit", "b" * 40, "--out", str(out), "--dry-kernel"]) == 0
    argv = ["worker", "bench", "--kernel", str(out / "kernel.tar"), "--job", "dry-vm"]
    argv += ["--submission", "s1", "--cpus", "2", "--memory-mb", "2048"]
    argv += ["--guest-memory-mb", "8192", "--out", str(tmp_path / "results"), "--dry-kernel"]
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "8192 MiB guest" in err[0] and "at most 2 CPUs and 2048 MiB" in err[0]
    assert not (tmp_path / "results").exists()


def test_the_master_hands_the_request_not_the_worker_size_to_the_guest():
    pytest.importorskip("buildbot")
    from buildbot.process.properties import Properties

    from stackbench.jobs.executors.buildbot import steps
    from stackbench.jobs.executors.buildbot.config import BuildbotConfig

    cfg = BuildbotConfig(stackbench=["stackbench"])
    render = steps.worker_command(cfg, "bench")

    def argv(**props):
        p = Properties()
        base = {"job": "dry-vm", "submission": "s", "machine_kind": "qemu", "workername": "w"}
        for k, v in {**base, **props}.items():
            p.setProperty(k, v, "test")
        p.build = _Build()
        return render.getRenderingFor(p).result

    plain = argv(cpus=16, memory_mb=24576)
    assert plain[plain.index("--memory-mb") + 1] == "24576"  # capacity, for matching only
    assert "--guest-memory-mb" not in plain
    asked = argv(cpus=16, memory_mb=24576, min_memory_mb="4096")
    assert asked[asked.index("--guest-memory-mb") + 1] == "4096"


class _Build:
    buildid = 7

    def render(self, value):
        return value
