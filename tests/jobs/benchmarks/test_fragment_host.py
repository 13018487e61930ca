"""The scenario stage's program and runner on the host, with a few MB (FRAGMENT_MAX_MB):
each mode sets its memory up, says so, creates its ready file and holds until SIGTERM;
scenario.sh starts and stops the holders and fails clearly when one cannot start."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stackbench.jobs.benchmarks.definitions import GUEST_DIR
from stackbench.jobs.benchmarks.guest import initramfs

BUSYBOX = shutil.which("busybox") or "/bin/busybox"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="page frame numbers need root")


@pytest.fixture(scope="module")
def fragment(tmp_path_factory) -> Path:
    return initramfs.compile_program("fragment", tmp_path_factory.mktemp("bin"))


def hold(fragment: Path, tmp_path: Path, *args: str) -> tuple[str, int]:
    ready = tmp_path / "ready"
    ready.unlink(missing_ok=True)
    env = {**os.environ, "FRAGMENT_MAX_MB": "8"}
    p = subprocess.Popen(
        [str(fragment), *args, str(ready)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        for _ in range(200):
            if ready.exists() or p.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), f"not ready, rc {p.poll()}"
        rss = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{p.pid}/status").read_text())[1])
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=10)
    finally:
        p.kill()
    return out, rss


@root_only
def test_fill_free_keeps_the_last_quarter_of_every_2mb_block(fragment, tmp_path):
    out, rss = hold(fragment, tmp_path, "fill-free", "128")
    m = re.match(
        r"fragment: fill-free filled 2048 pages, kept (\d+) \(128 of every 512, by physical address\)",
        out,
    )
    assert m, out
    # a quarter of 8 MB stays, within the blocks the fill only partly covered
    assert 256 <= int(m[1]) <= 1024
    assert rss < 6 * 1024


@root_only
def test_spread_keeps_the_percentage(fragment, tmp_path):
    out, _ = hold(fragment, tmp_path, "spread", "25", "movable")
    kept = int(re.match(r"fragment: spread movable filled 2048 pages, kept (\d+)", out)[1])
    assert 400 <= kept <= 620
    out, _ = hold(fragment, tmp_path, "spread", "25", "unmovable")
    assert out.startswith("fragment: spread unmovable filled 2048 pages, kept 512 in pipes (25%)")


def test_hog_holds_its_megabytes(fragment, tmp_path):
    out, rss = hold(fragment, tmp_path, "hog", "4")
    assert out.strip() == "fragment: hog holds 4 MB"
    assert rss >= 4 * 1024


def test_bad_usage_is_one_line(fragment):
    p = subprocess.run([str(fragment), "spread", "25", "sideways", "x"], capture_output=True)
    assert p.returncode == 2
    assert p.stderr.decode().startswith("usage: fragment ")


def scenario(tmp_path: Path, action: str, **env: str) -> tuple[int, str, str]:
    """scenario.sh's rc, stdout and stderr; its output goes to files as in the guest (the
    holders it leaves running keep them open)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "fragment").exists():
        shutil.copy(initramfs.compile_program("fragment", tmp_path / "cache"), bindir / "fragment")
    full = {
        "PATH": os.environ["PATH"],
        "SCENARIO": "none",
        "HOGGER_MB": "0",
        "BGLOAD": "none",
        "SETTLE_S": "0",
        "SB_BIN": str(bindir),
        "SB_WORK": str(tmp_path / "work"),
        "SB_OUT": str(tmp_path),
        "FRAGMENT_MAX_MB": "8",
        **env,
    }
    (tmp_path / "work").mkdir(exist_ok=True)
    out, err = tmp_path / f"{action}.out", tmp_path / f"{action}.err"
    with open(out, "w") as o, open(err, "w") as e:
        rc = subprocess.run(
            [BUSYBOX, "sh", str(GUEST_DIR / "scenario.sh"), action],
            env=full, stdout=o, stderr=e, stdin=subprocess.DEVNULL, timeout=60,
        ).returncode  # fmt: skip
    return rc, out.read_text(), err.read_text()


def test_scenario_runner_starts_and_stops_the_holders(tmp_path):
    rc, out, err = scenario(tmp_path, "start", HOGGER_MB="4", BGLOAD="compile")
    pids = [int(p) for p in Path("/tmp/scenario.pids").read_text().split()]
    try:
        assert rc == 0, err
        assert "fragment: hog holds 4 MB" in out
        assert re.search(r"scenario: set up in [\d.]+s", out)
        assert len(pids) == 2 and all(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        rc, out, _ = scenario(tmp_path, "stop")
    assert rc == 0 and "scenario: stopped" in out
    time.sleep(0.5)
    for p in pids:
        status = Path(f"/proc/{p}/status")
        assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_scenario_runner_fails_clearly(tmp_path):
    rc, _, err = scenario(tmp_path, "start", HOGGER_MB="4", SB_BIN=str(tmp_path / "none"))
    assert rc == 1 and "scenario: hogger exited before it was ready" in err
    rc, _, err = scenario(tmp_path, "start", SCENARIO="everything")
    assert rc == 1 and "scenario: unknown scenario everything" in err
    rc, _, err = scenario(tmp_path, "start", BGLOAD="gcc")
    assert rc == 1 and "scenario: unknown background load gcc" in err
    scenario(tmp_path, "stop")
