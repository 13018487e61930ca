"""Thin, resumable Buildbot clients against a real master and worker (``dry_kernel``: the
kernel builds and guest runs are synthetic, everything else is the real path).

- The master's REST API behind a proxy that resets connections, cuts answers short
  (``IncompleteRead``) and answers 502, and loses the answer to the submission itself: the
  client finishes the series, and the master holds one submission, not two.
- ``stackbench demo`` interrupted (Ctrl-C) while the kernels build, then run again: it
  attaches to the same submission; the master shows one build per kernel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers.flakyproxy import FlakyProxy
from helpers.lifecycle import wait_for
from sqlalchemy import func, select
from sqlalchemy.orm import Session

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from stackbench.jobs.driver import dispatcher_service  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402
from stackbench.resultsdb.models import Run, Series  # noqa: E402

COMMITS = ["a" * 40, "b" * 40, "c" * 40, "d" * 40]  # base + 3 patches


def dry_master(base: Path, dry_seconds: float) -> dict:
    """The embedded layout (master + worker 'local' under ``base``) with synthetic kernels."""
    return services.create_master(
        base / "master",
        [{"name": services.LOCAL_WORKER, "kind": "qemu", "cpus": 2, "memory_mb": 2048}],
        extra={"dry_kernel": True, "dry_seconds": dry_seconds},
    )


def builds_per_builder(master: client.Master) -> dict[str, Counter]:
    """builder name -> Counter of the commit each of its builds was about; a benchmark build
    that runs a round counts once for each kernel the round boots."""
    names = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    out: dict[str, Counter] = {}
    for b in master.get("builds?property=commit&property=round_boots")["builds"]:
        props = b.get("properties") or {}
        raw = props.get("round_boots", [None])[0]
        boots = (json.loads(raw) if isinstance(raw, str) else raw) or []
        commits = [bt.get("commit") for bt in boots] or [props.get("commit", [None])[0]]
        for commit in commits:
            out.setdefault(names[b["builderid"]], Counter())[commit] += 1
    return out


@pytest.fixture
def embedded(eng):
    """Master and local worker of 'stackbench up' (dry kernels), stopped afterwards."""
    root = services.buildbot_dir()
    dry_master(root, dry_seconds=2)
    services.start()
    master = client.embedded_master()
    try:
        client.wait_for_worker(master, services.LOCAL_WORKER)
        yield master
    finally:
        services.stop()


def make_series(eng) -> int:
    from stackbench.resultsdb.models import Patch

    with Session(eng) as s, s.begin():
        series = Series(title="mm: three tweaks", base_commit=COMMITS[0], state="applied")
        for i, sha in enumerate(COMMITS[1:], 1):
            series.patches.append(Patch(idx=i, total=3, subject=f"mm: patch {i}", commit_sha=sha))
        s.add(series)
        s.flush()
        return series.id


def test_a_lost_answer_to_the_submission_is_looked_up_not_posted_again(eng, embedded):
    """The proxy cuts short the answer to the first POST (the submission reached the master):
    the client asks the master for the submission's key instead of sending it again."""
    master = embedded
    host, port = master.url.split("//")[1].rstrip("/").split(":")
    sid = make_series(eng)
    with FlakyProxy((host, int(port)), every=3) as proxy:
        flaky = client.Master(proxy.url, master.user, master.password)
        sub = client.submit(
            flaky, series=sid, commits=COMMITS, jobs=["dry-vm"], runs=1, kinds=["qemu"],
            submission="lost-answer",
        )  # fmt: skip
    assert proxy.faults["truncate"] >= 1 and proxy.posts == 1, proxy.faults
    found = client.find_submission(master, "lost-answer")
    assert found is not None and int(sub["buildset"]) == int(found[0])
    assert sum(builds_per_builder(master).get("series", Counter()).values()) <= 1


def test_the_answer_to_a_submission_lost_for_good_is_one_line(eng, embedded):
    """A master that never answers: the client gives up after its budget with one line that
    says what to do, and the real master never saw the submission."""
    dead = client.Master(f"http://127.0.0.1:{services.free_port()}/", "admin", "x")
    dead.budget_s = 2.0
    with pytest.raises(client.Transient) as err:
        client.submit(dead, series=1, commits=COMMITS, jobs=["dry-vm"], submission="never")
    text = str(err.value)
    assert "\n" not in text and "run the command again to attach" in text
    assert client.find_submission(embedded, "never") is None


def test_demo_interrupted_while_kernels_build_attaches_when_run_again(eng, tmp_path):
    from helpers.kernelkit import require_kernel_tools, use_kernel_cache

    require_kernel_tools()
    mp = pytest.MonkeyPatch()
    try:
        use_kernel_cache(mp)
        root = services.buildbot_dir()
        # a dry kernel build lasts long enough that the interrupt lands while kernels build
        # even on a loaded machine (with 4 s the whole demo once ended before the first look)
        dry_master(root, dry_seconds=12)
        env = dict(os.environ)
        argv = [sys.executable, "-m", "stackbench", "demo", "--runs", "1", "--no-serve"]
        argv += ["--jobs", "vm-scalability[test=anon-w-seq]"]
        # Ctrl-C must reach the demo even when this suite runs as a background job, whose
        # children inherit an ignored SIGINT (Python then installs no handler of its own)
        first = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        try:

            def kernels_building():
                # the stored state, not the master's API: one cheap query, so the look is
                # not late on a loaded machine
                with Session(eng) as s:
                    return s.scalar(select(func.count()).select_from(Series).where(
                        Series.state == "building")) == 1  # fmt: skip

            wait_for("the series' kernels building", kernels_building, timeout=600, every=0.2)
            first.send_signal(signal.SIGINT)
            out1, _ = first.communicate(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 130, out1
        assert "submitted" in out1 and "Traceback" not in out1
        assert "run the same 'stackbench demo' again to attach" in out1
        with Session(eng) as s:
            (series,) = s.scalars(select(Series)).all()
            assert series.state == "building"

        second = subprocess.run(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=900,
        )  # fmt: skip
        assert second.returncode == 0, second.stdout
        # the dispatcher went on without the client: the second one attaches to the series
        # or, when it already ended, shows it; it never submits again
        assert "attached" in second.stdout or "already done" in second.stdout, second.stdout
        assert "submitted to the dispatcher" not in second.stdout
        assert "Traceback" not in second.stdout
        per = builds_per_builder(client.embedded_master())
        with Session(eng) as s:
            series = s.scalars(select(Series)).one()
            commits = [series.base_commit, *(p.commit_sha for p in series.patches)]
            assert series.state == "done"
        assert sum(per["series"].values()) == 1
        assert per["build-linux-6.1-tiny-guest"] == Counter(dict.fromkeys(commits, 1))
        assert per["bench-qemu"] == Counter(dict.fromkeys(commits, 1))
    finally:
        dispatcher_service.stop()
        services.stop()
        mp.undo()


def test_a_flaky_api_does_not_stop_the_dispatcher_nor_the_watching_demo(eng, embedded):
    """The demo's path: the dispatcher talks to the master (here through the faulty proxy)
    and the demo only watches the database. The series ends done on one buildset, with one
    build per kernel, and the watcher sees it through."""
    import threading

    from stackbench.jobs.driver import lifecycle, watch
    from stackbench.jobs.driver.dispatch import Dispatcher

    master = embedded
    host, port = master.url.split("//")[1].rstrip("/").split(":")
    sid = make_series(eng)
    assert lifecycle.hand_over(eng, sid, source="demo", jobs=["dry-vm"], runs=1) == "handed-over"
    lines: list[str] = []
    with FlakyProxy((host, int(port)), every=3) as proxy:
        flaky = client.Master(proxy.url, master.user, master.password)
        d = Dispatcher(eng, master=lambda: flaky)
        t = threading.Thread(target=d.run, kwargs={"poll": 0.3}, daemon=True)
        t.start()
        try:
            state = watch.follow(eng, sid, say=lines.append, poll=0.3, since_event=0)
        finally:
            d.stop.set()
            t.join(30)
    assert state == "done", lines
    assert proxy.faults, "the proxy broke no exchange: the test proved nothing"
    per = builds_per_builder(master)
    assert sum(per["series"].values()) == 1
    assert per["build-linux-6.1-tiny-guest"] == Counter(dict.fromkeys(COMMITS, 1))
    assert per["bench-qemu"] == Counter(dict.fromkeys(COMMITS, 1))
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Run).where(Run.status == "done")) == 4
    assert any("building" in ln for ln in lines) and "Traceback" not in "\n".join(lines)


def test_submit_waits_by_watching_the_dispatcher_run_it_at_buildbot(eng, tmp_path):
    """``stackbench submit`` without --no-wait is a thin client too: it hands the series to
    the dispatcher, which runs it at the embedded master, and prints what is stored; run
    again, it finds the finished series and submits nothing."""
    from helpers.kernelkit import require_kernel_tools, use_kernel_cache

    from stackbench.patches import stacks

    require_kernel_tools()
    mp = pytest.MonkeyPatch()
    try:
        use_kernel_cache(mp)
        dry_master(services.buildbot_dir(), dry_seconds=1)
        mbox = tmp_path / "series.mbox"
        mbox.write_bytes(stacks.stack_mbox("compaction-demo"))
        argv = [sys.executable, "-m", "stackbench", "submit", "--mbox", str(mbox)]
        argv += ["--runs", "1", "--jobs", "vm-scalability[test=anon-w-seq]"]
        first = subprocess.run(
            argv, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=900,
        )  # fmt: skip
        assert first.returncode == 0, first.stdout
        assert "submitted to the dispatcher" in first.stdout
        assert "4 kernels built, 4 benchmarks measured" in first.stdout
        assert "Traceback" not in first.stdout
        with Session(eng) as s:
            (series,) = s.scalars(select(Series)).all()
            assert series.state == "done"
            assert s.scalar(select(func.count()).select_from(Run)) == 4
        again = subprocess.run(
            argv, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout
        assert "already done" in again.stdout and "submitted" not in again.stdout
        per = builds_per_builder(client.embedded_master())
        assert sum(per["series"].values()) == 1
    finally:
        dispatcher_service.stop()
        services.stop()
        mp.undo()
