"""A nightly and a bisect step on a lab of three workers: their rounds spread over every
worker, as a series' do, because they are driven by the same journey and executor.

Real PostgreSQL, a real Buildbot master with three pooled workers and the web API the
workers post their runs to; kernel builds and guest runs are the workers' ``--dry-kernel``
ones (tests/test_buildbot_fanout.py). The commits are made up (dry kernels need no tree), so
the lab's tree side is the fake lab's of tests/test_nightly.py; everything between the
nightly or the bisect and the workers is the real path. No dispatcher runs: a comparison is
driven by its caller.
"""

from __future__ import annotations

import contextlib

import pytest
from sqlalchemy import text

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from test_buildbot_fanout import start_web, start_worker  # noqa: E402
from test_nightly import BRANCH, TREE, sha  # noqa: E402

from stackbench.errors import NotFoundError  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402
from stackbench.jobs.tracking import bisect_runner as br  # noqa: E402
from stackbench.jobs.tracking import comparison, nightly  # noqa: E402

JOB = "vm-scalability[test=anon-w-seq,runtime=5s]"
WORKERS = ("w1", "w2", "w3")
BOOTS = 6  # rounds of the first look: two for each worker when the lab shares them out


class DryLab(comparison.BuildbotLab):
    """The master's workers, over a made-up history of commits."""

    def __init__(self, master, n: int = 3) -> None:
        super().__init__(master=master, poll_s=0.5)
        self.history = [sha(i) for i in range(n + 1)]
        self.head = 0

    def resolve(self, tree: str, ref: str) -> str:
        if ref == BRANCH:
            return self.history[self.head]
        for c in self.history:
            if c.startswith(ref):
                return c
        raise NotFoundError(f"unknown ref {ref}")

    def commits(self, tree: str, good: str, bad: str) -> list[str]:
        return self.history[self.history.index(good) + 1 : self.history.index(bad) + 1]

    def subject(self, tree: str, commit: str) -> str:
        return f"mm: change {self.history.index(commit)}"


@contextlib.contextmanager
def three_workers(tmp_path, monkeypatch, tree: str, **extra):
    """A master of the three pooled dry workers (kernels of ``tree``, ``extra`` in its
    configuration) and the web API they post to, running; yields the master."""
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    workers = [
        {"name": n, "kind": "qemu", "cpus": 2, "memory_mb": 1024, "pool": "lab"} for n in WORKERS
    ]
    extra = {"dry_kernel": True, "dry_seconds": 2, "jobs": [JOB],
             "kernel_configs": [{"tree": tree, "config": "tiny-guest"}], **extra}  # fmt: skip
    cfg = services.create_master(base / "master", workers, extra=extra)
    master = client.embedded_master_at(base / "master")
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", web_url)
    started = []
    try:
        services.start_master(base / "master")
        for name in WORKERS:
            started.append(start_worker(base, cfg, name, web_url))
        for name in WORKERS:
            client.wait_for_worker(master, name)
        yield master
    finally:
        for wb in started:
            services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()


@pytest.fixture
def dry_lab(eng, tmp_path, monkeypatch):
    with three_workers(tmp_path, monkeypatch, TREE) as master:
        yield DryLab(master)


def rounds_by_worker(eng, sid: int) -> dict[str, int]:
    """The comparison's rounds that ran, per worker (the attempt's round rows)."""
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.worker, count(*) FROM series_round r "
                "JOIN series_batch b ON b.id = r.batch_id "
                "JOIN series_attempt a ON a.id = b.attempt_id "
                "WHERE a.series_id = :sid AND r.state = 'done' GROUP BY r.worker"
            ),
            {"sid": sid},
        ).all()
    return dict(rows)


def comparisons(eng, source: str) -> list[tuple[int, str]]:
    with eng.connect() as conn:
        return conn.execute(
            text("SELECT id, state FROM series WHERE source = :s ORDER BY id"), {"s": source}
        ).all()


def test_a_nightly_spreads_its_rounds_over_every_worker(eng, dry_lab):
    tracked = [nightly.Tracked(tree=TREE, branch=BRANCH, jobs=[JOB], runs=BOOTS, max_runs=BOOTS)]
    first = nightly.run_nightly(eng, lab=dry_lab, tracked=tracked)["branches"][0]
    assert first["state"] == "baseline", first
    dry_lab.head = 1
    second = nightly.run_nightly(eng, lab=dry_lab, tracked=tracked)["branches"][0]
    assert second["state"] in ("unchanged", "regressed"), second
    (_one, _), (sid, state) = comparisons(eng, "nightly")
    assert state == "done"
    # tonight's head and baseline in the same BOOTS rounds, shared out over the three
    spread = rounds_by_worker(eng, sid)
    assert set(spread) == set(WORKERS), spread
    assert sum(spread.values()) == BOOTS
    with eng.connect() as conn:
        per_round = conn.execute(
            text(
                "SELECT r.boot_round, count(DISTINCT k.commit) FROM run r "
                "JOIN kernel_build k ON k.id = r.build_id "
                "WHERE r.meta->>'series' = :sid GROUP BY r.boot_round"
            ),
            {"sid": str(sid)},
        ).all()
    assert len(per_round) == BOOTS and all(n == 2 for _r, n in per_round), per_round


def test_a_bisect_step_spreads_its_rounds_over_every_worker(eng, dry_lab):
    (jid,) = br.job_ids(eng, JOB)
    good, step = dry_lab.history[0], dry_lab.history[2]
    m = br.StoredMeasurer(eng, dry_lab, tree=TREE, job=JOB, job_id=jid, metric_id=0)
    m.together([step, good], BOOTS)
    ((sid, state),) = comparisons(eng, "bisect")
    assert state == "done"
    spread = rounds_by_worker(eng, sid)
    assert set(spread) == set(WORKERS), spread
    assert m.build_id(good) is not None and m.build_id(step) is not None
    assert m.boots == 2 * BOOTS


# ---- the same comparisons scheduled inside Buildbot -----------------------------------------
# The nightly and the bisect builders run ``stackbench nightly`` / ``stackbench bisect`` on a
# worker, as the master's schedulers do; the command measures through this master (its URL
# and an admin's password given as a secret), so its rounds spread as the lab's above.

SCHEDULED_TREE = "tiny"


def _tree_with_commits(tmp_path, monkeypatch, n: int) -> list[str]:
    """A tree ``tiny`` of ``n + 1`` commits on ``main`` (STACKBENCH_TREES); its shas."""
    from test_lifecycle_support import git

    repo = tmp_path / "tiny.git"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(n + 1):
        (repo / "mm.c").write_text(f"int step{i};\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"mm: step {i}")
    defs = tmp_path / "trees"
    defs.mkdir()
    (defs / f"{SCHEDULED_TREE}.yaml").write_text(
        f"name: {SCHEDULED_TREE}\ndescription: test tree\nsource:\n  path: {repo}\n"
        "default_base: main\n"
    )
    monkeypatch.setenv("STACKBENCH_TREES", str(defs))
    return git(repo, "rev-list", "--reverse", "main").split()


@pytest.fixture
def scheduled_lab(eng, tmp_path, monkeypatch):
    """A master of three pooled dry workers whose nightly tracks ``tiny:main``; the
    workers' commands see the tree and the tracked branch (their environment is this
    process's); yields (master, the tree's commits)."""
    commits = _tree_with_commits(tmp_path, monkeypatch, 2)
    tracked = tmp_path / "tracked"
    tracked.mkdir()
    (tracked / "tiny.yaml").write_text(
        f"tree: {SCHEDULED_TREE}\nbranch: main\njobs: ['{JOB}']\nruns: {BOOTS}\nmax_runs: {BOOTS}\n"
    )
    monkeypatch.setenv("STACKBENCH_TRACKED", str(tracked))
    with three_workers(tmp_path, monkeypatch, SCHEDULED_TREE, nightly_aa=0) as master:
        yield master, commits


def force_and_wait(master, scheduler: str, builder: str, timeout_s: float = 600, **props):
    """Force ``builder`` through ``scheduler`` with these properties and wait for its build
    to end; (its result, the worker it ran on)."""
    import time

    _bsid, requests = master.control(
        f"forceschedulers/{scheduler}", "force",
        {"builderid": master.builder_id(builder), "reason": "test", **props},
    )  # fmt: skip
    (brid,) = requests.values()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        builds = master.get(f"builds?buildrequestid={brid}&property=workername")["builds"]
        if builds and builds[-1]["complete"]:
            b = builds[-1]
            return b["results"], b["properties"]["workername"][0]
        time.sleep(1.0)
    raise AssertionError(f"the {builder} build did not end in {timeout_s:.0f} s")


def test_the_scheduled_nightly_spreads_its_rounds_over_every_worker(eng, scheduled_lab):
    master, commits = scheduled_lab
    result, ran_on = force_and_wait(master, "force", "nightly", branches="tiny:main")
    assert result == 0 and ran_on in WORKERS
    # the head measured on its first night (the baseline) in BOOTS rounds over the three,
    # the nightly's own worker among them
    ((sid, state),) = comparisons(eng, "nightly")
    assert state == "done"
    spread = rounds_by_worker(eng, sid)
    assert set(spread) == set(WORKERS), spread
    assert sum(spread.values()) == BOOTS
    with eng.connect() as conn:
        baseline = conn.execute(
            text(
                "SELECT k.commit FROM tracked_branch t "
                "JOIN kernel_build k ON k.id = t.baseline_build_id"
            )
        ).scalar_one()
    assert baseline == commits[-1]


def test_a_scheduled_bisect_step_spreads_its_rounds_over_every_worker(eng, scheduled_lab):
    master, commits = scheduled_lab
    # dry boots regress nothing: the bisect ends unfound (its build fails) after its steps
    force_and_wait(master, "bisect", "bisect", good=commits[0], bad=commits[-1], job=JOB,
                   metric="vm-scalability.throughput", tree=SCHEDULED_TREE)  # fmt: skip
    measured = comparisons(eng, "bisect")
    assert measured and all(state == "done" for _sid, state in measured), measured
    for sid, _state in measured:
        spread = rounds_by_worker(eng, sid)
        assert set(spread) == set(WORKERS), (sid, spread)
