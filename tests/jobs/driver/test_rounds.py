"""The dispatcher's rounds of boots for a series at Buildbot (jobs/driver/buildbot_executor.py): what each
batch holds, in which order, and how later batches continue the iteration numbers."""

from __future__ import annotations

from stackbench.jobs.driver import buildbot_executor as executor
from stackbench.jobs.driver.journey import seed_of
from stackbench.jobs.executors import plan as boot_plan

BASE, P1, P2 = "a" * 40, "b" * 40, "c" * 40


def _built(*commits: str) -> dict[str, executor.Built]:
    return {
        c: executor.Built(c, f"k{i}", i, "linux-6.1", "tiny-guest", f"artifacts/b/{i}/kernel.tar")
        for i, c in enumerate(commits)
    }


def _plan(kernels: list[str], runs: int, key: str, **kw):
    return boot_plan.make_plan(kernels, runs, seed=seed_of(key), tag=key, **kw)


def test_first_rounds_boot_every_kernel_once_per_round_with_every_job_in_a_shuffled_order():
    built = _built(BASE, P1, P2)
    jobs = ["vm", "thpscale[max_threads=2,madvise=false]"]
    plan = _plan([BASE, P1, P2], 3, "sub-rounds-1")
    boots, described = executor.plan_boots(plan, built, jobs, {}), plan.describe()
    assert described["boots_per_kernel"] == 3 and len(boots) == 3 * 3
    for rnd in (1, 2, 3):
        mine = [b for b in boots if b["round"] == rnd]
        # one boot per kernel running both jobs, one run each, numbered by round
        assert sorted(b["commit"] for b in mine) == [BASE, P1, P2]
        assert {b["job"] for b in mine} == {"vm,thpscale[max_threads=2,madvise=false]"}
        assert {(b["runs"], b["first"]) for b in mine} == {(1, rnd - 1)}
    # the boots go to the master in the recorded order
    assert [b["commit"] for b in boots] == [k for r in described["order"] for k in r]
    # the order is shuffled per round (the plan's seed is fixed by the batch key)...
    assert len({tuple(r) for r in described["order"]}) > 1 or len(built) < 3
    # ...and the same key gives the same batch: a batch sent again is the same batch
    again = executor.plan_boots(_plan([BASE, P1, P2], 3, "sub-rounds-1"), built, jobs, {})
    assert again == boots
    assert boots[0]["artifact"] == built[boots[0]["commit"]].artifact


def test_later_batches_continue_the_iteration_numbers_after_the_furthest_job():
    built = _built(BASE, P1, P2)
    boots = executor.plan_boots(_plan([BASE, P1, P2], 3, "k1"), built, ["vm", "thp"], {})
    offsets = executor.next_offsets({}, boots)
    assert offsets == {"vm": 3, "thp": 3}
    assert len(boots) == 3 * 3  # a boot per (kernel, round), both jobs in it
    nxt = executor.plan_boots(_plan([BASE, P2], 2, "k2", first_round=4), built, ["vm"], offsets)
    assert {b["commit"] for b in nxt} == {BASE, P2} and {b["job"] for b in nxt} == {"vm"}
    assert sorted((b["round"], b["first"]) for b in nxt) == [(4, 3), (4, 3), (5, 4), (5, 4)]
    # a later batch of several jobs starts after the furthest one, so no key is repeated
    uneven = executor.plan_boots(
        _plan([BASE, P2], 2, "k3", first_round=6), built, ["vm", "thp"], {"vm": 5, "thp": 3}
    )
    assert {b["job"] for b in uneven} == {"vm,thp"} and {b["first"] for b in uneven} == {5, 6}
    assert {b["round"] for b in uneven} == {6, 7}
    # no job left to measure: no boot
    assert executor.plan_boots(_plan([BASE], 2, "k4"), built, [], offsets) == []


def test_built_kernels_come_from_passed_kernel_builds_with_their_artifacts():
    def build(bid, builder, commit, results=0, complete=True):
        props = {"commit": [commit, "x"], "kernel_name": [f"n-{commit[:3]}", "x"]}
        props["position"] = [1, "x"]
        return {"buildid": bid, "builderid": builder, "number": bid * 10, "complete": complete,
                "results": results, "properties": props}  # fmt: skip

    names = {1: "build-linux-6.1-tiny-guest", 2: "bench-qemu"}
    builds = [
        build(1, 1, BASE),
        build(2, 1, P1, results=2),  # failed
        build(3, 2, P2),  # a benchmark, not a kernel
        build(4, 1, P2, complete=False),
    ]
    got = executor.built_kernels(builds, names.__getitem__)
    assert list(got) == [BASE]
    assert got[BASE].artifact == "artifacts/build-linux-6.1-tiny-guest/10/kernel.tar"
    assert got[BASE].name == "n-aaa" and got[BASE].position == 1


def test_every_sub_job_of_a_boot_keeps_its_own_runs(monkeypatch, tmp_path):
    """A job that expands into two sub-jobs runs both at every iteration: each run gets a key
    of its own (keyed by iteration alone, one sub-job's runs were dropped as copies), the
    first sub-job keeps the bare key a queued bare-metal job expects, and the iterations
    continue from the boot's place in the plan."""
    import argparse

    from stackbench.jobs.executors import boot_stage, worker
    from stackbench.jobs.executors.buildbot.results import key_base, run_key
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    kernel, machine = KernelSpec(commit="a" * 40), MachineSpec(name="local", kind="qemu")

    def fake_run_job(**kw):
        return [
            RunData(job=JobSpec(suite="vm-scalability", test=t), kernel=kernel, machine=machine,
                    iteration=i, samples={"x": [1.0]}, meta={"subjob": f"vm-{t}"})
            for i in range(kw["runs"]) for t in ("anon-w-seq", "anon-w-rand")
        ]  # fmt: skip

    monkeypatch.setattr(boot_stage, "run_job", fake_run_job)
    home = tmp_path / "home"
    monkeypatch.setenv("STACKBENCH_HOME", str(home))
    args = argparse.Namespace(kind="qemu", job="vm-scalability[test=anon-w-seq|anon-w-rand]",
                              runs=2, first=3, round=2, buildbot_build="17", series="5",
                              submission="s")  # fmt: skip
    base = key_base("s", kernel.commit, "", "", args.job, "qemu")
    runs, workdir = worker._real_runs(args, kernel, machine, {args.job: base}, tmp_path)
    assert workdir is not None and workdir.parent == home.resolve()
    workdir.rmdir()
    # the whole step: every run reaches its own payload file, the upload's input
    monkeypatch.setattr(worker, "read_kernel", lambda *_a: {})
    monkeypatch.setattr(worker, "run_specs", lambda *_a: (kernel, machine))
    args.kernel, args.out, args.dry_kernel, args.upload = None, tmp_path / "out", False, False
    assert worker.cmd_bench(args) == 0
    assert len(list((tmp_path / "out").glob("run-*"))) == 4
    # the runs are in the step's files: the boot's working directory is gone (issue 38)
    assert list(home.glob("stackbench-job-*")) == []
    keys = [r.idempotency_key for r in runs]
    assert len(set(keys)) == 4
    assert [r.iteration for r in runs] == [3, 3, 4, 4]
    assert run_key(base, 3) in keys and run_key(base, 4) in keys  # the first sub-job's
    assert {r.meta["boot_id"] for r in runs} == {"series-5-bb-17"}
    assert {r.meta["boot_round"] for r in runs} == {2}
    assert {r.meta["job_spec"] for r in runs} == {args.job}


def test_one_boot_runs_every_job_and_keys_each_as_its_own_boot_would(monkeypatch, tmp_path):
    """A round's boot runs all the series' jobs in one guest (one benchmark build, one boot):
    each run is keyed and labelled by the job it came from, as a boot per job keyed them."""
    import argparse

    from stackbench.jobs.executors import boot_stage, worker
    from stackbench.jobs.executors.buildbot.results import key_base, run_key
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    kernel, machine = KernelSpec(commit="a" * 40), MachineSpec(name="local", kind="qemu")
    seen = {}

    def fake_run_job(**kw):
        seen["job"] = kw["job"]
        out = []
        for i in range(kw["runs"]):
            for spec, sj in (("vm", "vm-anon-w-seq"), ("thp", "thpscale-fault"),
                             ("thp", "thpscale-madv")):  # fmt: skip
                out.append(RunData(job=JobSpec(suite=spec, test=sj), kernel=kernel,
                                   machine=machine, iteration=i, samples={"x": [1.0]},
                                   meta={"subjob": sj, "job_spec": spec}))  # fmt: skip
        return out

    monkeypatch.setattr(boot_stage, "run_job", fake_run_job)
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    args = argparse.Namespace(kind="qemu", job=["vm", "thp", "vm"], runs=1, first=2, round=3,
                              buildbot_build="9", series="5", submission="s")  # fmt: skip
    assert worker.job_specs(args) == ["vm", "thp"]
    bases = {j: key_base("s", kernel.commit, "", "", j, "qemu") for j in ("vm", "thp")}
    runs, _workdir = worker._real_runs(args, kernel, machine, bases, tmp_path)
    assert seen["job"] == ["vm", "thp"]
    keys = {r.meta["subjob"]: r.idempotency_key for r in runs}
    assert keys["vm-anon-w-seq"] == run_key(bases["vm"], 2)
    assert keys["thpscale-fault"] == run_key(bases["thp"], 2)  # a job's first sub-job: bare
    assert keys["thpscale-madv"] == run_key(bases["thp"], 2, "thpscale-madv")
    assert [r.meta["job_spec"] for r in runs] == ["vm", "thp", "thp"]
    assert {r.meta["boot_id"] for r in runs} == {"series-5-bb-9"}


def test_a_bench_step_passes_every_job_of_the_boot_to_the_worker():
    from buildbot.process.properties import Properties

    from stackbench.jobs.executors.buildbot.config import BuildbotConfig
    from stackbench.jobs.executors.buildbot.steps import worker_command

    class FakeBuild:
        buildid = 4

    props = Properties()
    for k, v in {"job": "vm,thpscale[max_threads=2, madvise=false]", "submission": "s",
                 "machine_kind": "qemu", "workername": "w", "runs": 1, "round": 2,
                 "first": 1}.items():  # fmt: skip
        props.setProperty(k, v, "test")
    props.build = FakeBuild()
    props.getBuild = lambda: props.build
    argv = worker_command(BuildbotConfig(), "bench").getRenderingFor(props)
    argv = argv.result if hasattr(argv, "result") else argv
    jobs = [argv[i + 1] for i, a in enumerate(argv) if a == "--job"]
    assert jobs == ["vm", "thpscale[max_threads=2, madvise=false]"]


def test_a_round_run_again_after_its_worker_was_lost_is_its_next_try_not_a_second_run(eng):
    """The rounds' bookkeeping in its tables: the dispatcher's hand-over, a batch of two
    rounds, each build of a round as the master reports it (seen again at every look)."""
    from stackbench.jobs.driver import lifecycle
    from stackbench.resultsdb import db, series_runs_store
    from stackbench.resultsdb.models import Series

    with db.session(eng) as s:
        row = Series(title="t", base_commit=BASE, state="applied")
        s.add(row)
        s.flush()
        sid = row.id
        series_runs_store.begin(s, sid, source="web")
    lifecycle.set_state(eng, sid, "building", "handed to Buildbot", progress="0/3",
                        record=lambda s: series_runs_store.take(
                            s, sid, "buildbot", submission="sub-1", buildset=7, kernels=3,
                            benchmarks=6))  # fmt: skip
    with db.session(eng) as s:
        assert series_runs_store.active(s, lifecycle.PENDING) == [
            (sid, "building", "buildbot", "mbox", None, None)
        ]
        assert series_runs_store.progress(s, [sid]) == {sid: "0/3"}
        attempt = series_runs_store.current(s, sid)
        series_runs_store.add_batch(s, attempt, "sub-1-rounds-1", {"boots": 2}, [1, 2, 2, 1],
                                    buildset=8, boots=6, have=None, offsets={"vm": 2})  # fmt: skip
    looks = [
        [(1, 10, "w1", "running"), (2, 11, "w2", "running")],
        [(1, 10, "w1", "lost"), (2, 11, "w2", "running"), (1, 12, "w2", "running")],
        [(1, 10, "w1", "lost"), (2, 11, "w2", "done"), (1, 12, "w2", "done")],
        [(1, 10, "w1", "lost"), (2, 11, "w2", "done"), (1, 12, "w2", "done")],
    ]
    for look in looks:
        with db.session(eng) as s:
            attempt = series_runs_store.current(s, sid)
            for rnd, buildid, worker, state in look:
                series_runs_store.record_round(s, attempt, rnd, buildid, worker, state)
    with db.session(eng) as s:
        tries = [(r.round, r.try_, r.worker, r.state, r.buildid)
                 for r in series_runs_store.rounds(s, sid)]  # fmt: skip
        d = series_runs_store.dispatch(s, sid)
    assert tries == [(1, 1, "w1", "lost", 10), (1, 2, "w2", "done", 12), (2, 1, "w2", "done", 11)]
    assert (d.executor, d.submission, d.buildset, d.batches, d.benchmarks) == (
        "buildbot", "sub-1", 7, 1, 6
    )  # fmt: skip
    assert d.offsets == {"vm": 2} and d.open
    # the series page shows the lost try beside the one that measured the round
    from stackbench.web import create_app

    client = create_app({"ENGINE": eng, "SECRET_KEY": "t", "TESTING": True}).test_client()
    page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert "round 1 on w1: lost" in page and "round 1 (try 2) on w2: done" in page
    assert "#1 via web (buildbot)" in page and "0/3" in page

    lifecycle.set_state(eng, sid, "done", "measured")
    assert lifecycle.hand_over(eng, sid, source="web", fresh=True) == "handed-over"
    with db.session(eng) as s:
        got = [(a.number, a.executor, a.outcome, a.ended is not None)
               for a in series_runs_store.attempts(s, sid)]  # fmt: skip
        assert series_runs_store.dispatch(s, sid).batches == 0  # the new attempt's own
    assert got == [(1, "buildbot", "done", True), (2, "", "", False)]
