"""The plan as rounds of boots: every kernel once per round in a seeded, recorded shuffle;
runs spread over at least three boots; every run stored with its boot and round."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers.intake import submit_series
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.jobs.executors import plan as bp
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.models import Run
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

KERNELS = ["base", "p1", "p2", "p3"]


def test_every_round_boots_every_kernel_once_in_a_seeded_shuffle():
    plan = bp.make_plan(KERNELS, 6, seed=7, tag="t")
    assert plan.boots == 3 and len(plan.rounds) == 3
    for i, rnd in enumerate(plan.rounds, 1):
        assert sorted(b.kernel for b in rnd) == sorted(KERNELS)
        assert {b.round for b in rnd} == {i}
        assert [b.position for b in rnd] == [1, 2, 3, 4]
    # the same seed gives the same order; the order is what describe() records
    again = bp.make_plan(KERNELS, 6, seed=7, tag="t")
    assert again.describe() == plan.describe()
    assert plan.describe()["order"] == [[b.kernel for b in rnd] for rnd in plan.rounds]
    # over many seeds, the base does not always go first (the order really is shuffled)
    firsts = Counter(bp.make_plan(KERNELS, 3, seed=s).rounds[0][0].kernel for s in range(200))
    assert set(firsts) == set(KERNELS) and max(firsts.values()) < 100
    # a plan without a seed draws one and records it
    drawn = bp.make_plan(KERNELS, 3)
    assert isinstance(drawn.seed, int) and drawn.describe()["seed"] == drawn.seed


def test_every_block_of_rounds_puts_each_kernel_once_in_each_place():
    """Each len(kernels) rounds form a Latin square, so no kernel keeps one place (a drift
    within rounds would be its effect)."""
    kernels = [f"k{i}" for i in range(5)]
    for seed in range(50):
        plan = bp.make_plan(kernels, 12, boots=12, seed=seed)
        orders = plan.describe()["order"]
        assert len(orders) == 12
        for start in (0, 5):
            block = orders[start : start + 5]
            for place in range(5):
                assert sorted(o[place] for o in block) == kernels, (seed, start)
        # the last two rounds (a block cut short) still repeat no kernel's place
        assert all(orders[10][p] != orders[11][p] for p in range(5))


@pytest.mark.parametrize(
    ("runs", "boots", "shares"),
    [(1, 1, [1]), (2, 2, [1, 1]), (3, 3, [1, 1, 1]), (5, 3, [2, 2, 1]), (12, 3, [4, 4, 4]),
     (20, 5, [4, 4, 4, 4, 4])],
)  # fmt: skip
def test_runs_are_spread_over_at_least_three_boots(runs, boots, shares):
    plan = bp.make_plan(KERNELS[:2], runs, seed=1)
    assert plan.boots == boots
    per_kernel = [[b for b in plan.boots_in_order() if b.kernel == k] for k in KERNELS[:2]]
    for kboots in per_kernel:
        assert [b.runs for b in kboots] == shares
        numbers = [i for b in kboots for i in b.iterations()]
        assert numbers == list(range(runs))  # each iteration once, none repeated
    ids = [b.boot_id for b in plan.boots_in_order()]
    assert len(set(ids)) == len(ids)


def test_a_sub_job_with_fewer_runs_than_boots_runs_in_the_first_boots():
    plan = bp.make_plan(["k"], 6, seed=1)
    shares = [b.share(2) for b in plan.boots_in_order()]
    assert shares == [(0, 1), (1, 1), (2, 0)]
    assert [b.share(6) for b in plan.boots_in_order()] == [(0, 2), (2, 2), (4, 2)]


def test_bad_plans_are_refused():
    with pytest.raises(ValueError):
        bp.make_plan([], 3)
    with pytest.raises(ValueError):
        bp.make_plan(["a", "a"], 3)
    with pytest.raises(ValueError):
        bp.make_plan(["a"], 0)


def _run(kernel: str, iteration: int) -> RunData:
    return RunData(
        job=JobSpec(suite="s", test="t", params={"x": 1}, runner="r"),
        kernel=KernelSpec(commit=kernel, config_hash="h", compiler="gcc"),
        machine=MachineSpec(name="qemu-test", kind="qemu", cpus=2, memory_mb=1024),
        iteration=iteration,
        samples={"s.m": [1.0 + iteration]},
        source="qemu",
        meta={"subjob": "s-t"},
    )


def test_runs_are_stored_with_their_boot_and_round(eng):
    plan = bp.make_plan(["k1", "k2"], 3, seed=3, tag="series-1-attempt-1")
    runs = []
    for boot in plan.boots_in_order():
        # what the guest sends: iterations numbered from 0 within the boot
        runs += [bp.stamp(_run(boot.kernel, i), boot, boot.first) for i in range(boot.runs)]
    res = ingest(eng, runs)
    assert len(res.inserted) == 6
    # the same boots stored again (a resumed execution) add nothing
    assert ingest(eng, runs).skipped == 6
    with Session(eng) as s:
        rows = s.scalars(select(Run).order_by(Run.id)).all()
        got = {(r.boot_id, r.boot_round, r.iteration) for r in rows}
    want = {(b.boot_id, b.round, b.first) for b in plan.boots_in_order()}
    assert got == want
    assert all(bid.startswith("series-1-attempt-1-r") for bid, _r, _i in got)


@pytest.mark.slow
def test_the_in_process_executor_boots_each_kernel_once_per_round(eng, monkeypatch):
    """Real kernels (base and one commit), 3 runs: 3 rounds, each booting both kernels in the
    recorded order; every kernel's runs come from 3 boots, one run each."""
    from helpers.kernelkit import require_kernel_tools, use_kernel_cache
    from test_pipeline_e2e import QUICK_JOBS, first_patch

    from stackbench.jobs.driver import pipeline
    from stackbench.jobs.executors.progress import ProgressEvent
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.models import Event, KernelBuild, Series

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    sid = submit_series(eng, first_patch("compaction-demo"), jobs=QUICK_JOBS, runs=3)
    seen: list[ProgressEvent] = []
    settings = Settings(cpus=2, mem_mb=1024, init_timeout_s=60, adaptive=False)
    assert pipeline.run_series(eng, sid, progress=seen.append, settings=settings, seed=11) == (
        "done"
    )
    with Session(eng) as s:
        series = s.get(Series, sid)
        (recorded,) = series_runs_store.plans(s, sid)
        commits = [series.base_commit, series.patches[0].commit_sha]
        rows = s.execute(
            select(KernelBuild.commit, Run.boot_id, Run.boot_round, Run.iteration)
            .join(KernelBuild, KernelBuild.id == Run.build_id)
            .where(Run.status == "done")
        ).all()
        boots_seen = [
            e.message
            for e in s.scalars(select(Event).where(Event.series_id == sid).order_by(Event.id))
            if e.state == "boot-ok"
        ]
        tries = series_runs_store.rounds(s, sid)
        (attempt,) = series_runs_store.attempts(s, sid)
    # one attempt (the foreground run), its three rounds each run once, whole, here
    assert (attempt.executor, attempt.outcome) == ("foreground", "done")
    assert [(r.round, r.try_, r.state) for r in tries] == [(n, 1, "done") for n in (1, 2, 3)]
    assert all(r.worker for r in tries)
    assert recorded["seed"] == 11 and recorded["boots_per_kernel"] == 3
    assert recorded["order"] == bp.make_plan(commits, 3, seed=11).describe()["order"]
    for c in commits:
        mine = sorted((r, i, b) for k, b, r, i in rows if k == c)
        assert [(r, i) for r, i, _b in mine] == [(1, 0), (2, 1), (3, 2)]
        assert len({b for *_x, b in mine}) == 3  # three boots, one run each
    # the boots happened in the recorded order, round by round
    names = {series.base_commit: "v6.1-debian"}
    with Session(eng) as s:
        names[commits[1]] = s.scalars(
            select(KernelBuild.name).where(KernelBuild.commit == commits[1])
        ).one()
    expected = [names[k] for rnd in recorded["order"] for k in rnd]
    assert [m.split(":")[0] for m in boots_seen] == expected
    assert sum(ev.stage == "boot" for ev in seen) == 6
