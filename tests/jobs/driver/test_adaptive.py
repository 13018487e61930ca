"""More rounds for a series: only while a headline metric is undecided, only for the jobs
and kernels in doubt, up to the cap, and the reason is kept where the page shows it."""

from __future__ import annotations

import random

from sqlalchemy.orm import Session

from stackbench.jobs.driver import adaptive
from stackbench.jobs.executors import plan as bp
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.models import Patch, Series
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

pytest_plugins = ["helpers.web"]

MACHINE = MachineSpec(name="qemu-tcg-2cpu-1024M@test", kind="qemu", cpus=2, memory_mb=1024)
VMS = JobSpec(suite="vm-scalability", test="anon-w-seq", params={"test": "anon-w-seq"})
THP = JobSpec(suite="thpscale", test="thpscale", params={})


def _series(eng, **plan) -> int:
    """A running series whose attempt has ``plan`` (series_runs_store.PLAN columns)."""
    with Session(eng) as s:
        row = Series(title="t", base_commit="b" * 40, state="running")
        row.patches = [Patch(idx=1, total=1, subject="p", commit_sha="c" * 40)]
        s.add(row)
        s.flush()
        series_runs_store.begin(s, row.id, source="web", **plan)
        s.commit()
        return row.id


def _measure(eng, sid, commit, job, boots, values, *, first_round=1, sub="sj"):
    """``boots`` boots of ``commit`` stored as the pipeline stores them, one run each;
    ``values(i)`` gives the samples of the i-th boot."""
    k = KernelSpec(commit=commit, name=commit[:4], config_name="tiny-guest", status="built")
    plan = bp.make_plan([commit], boots, boots=boots, seed=1, tag=f"series-{sid}-attempt-1",
                        first_round=first_round)  # fmt: skip
    runs = []
    for i, boot in enumerate(plan.boots_in_order()):
        data = RunData(job=job, kernel=k, machine=MACHINE, iteration=0, samples=values(i),
                       source="qemu", meta={"subjob": sub})  # fmt: skip
        runs.append(bp.stamp(data, boot, boot.first, sid))
    ingest(eng, runs)


def _noise(seed):
    rng = random.Random(seed)
    return lambda i: {"vm-scalability.throughput": [1000 * (1 + rng.gauss(0, 0.03))]}


def test_an_undecided_headline_asks_for_the_next_look_of_that_job_only(eng):
    sid = _series(eng)
    _measure(eng, sid, "b" * 40, VMS, 3, _noise(1), sub="vm-scalability-anon-w-seq")
    _measure(eng, sid, "c" * 40, VMS, 3, _noise(2), sub="vm-scalability-anon-w-seq")
    # a decided job (a huge effect on a headline) and a side metric never ask for rounds
    flat = {"thpscale.fault-huge-1": [100.0], "thpscale.free_time": [1.0]}
    _measure(eng, sid, "b" * 40, THP, 3, lambda i: flat, sub="thpscale")
    more = adaptive.more_rounds(eng, sid)
    assert more is not None
    assert (more.have, more.boots, more.cap) == (3, 2, adaptive.DEFAULT_CAP)
    assert more.subjobs == ["vm-scalability-anon-w-seq"]
    assert more.kernels == ["b" * 40, "c" * 40]
    assert "vm-scalability.throughput on cccc" in more.reason()
    assert more.reason().startswith("2 more rounds (3 -> 5 boots per kernel, cap 10)")


def test_a_decided_series_and_one_at_the_cap_stop(eng):
    sid = _series(eng)
    _measure(eng, sid, "b" * 40, VMS, 5, lambda i: {"vm-scalability.throughput": [1000.0 + i]})
    _measure(eng, sid, "c" * 40, VMS, 5, lambda i: {"vm-scalability.throughput": [1500.0 + i]})
    assert adaptive.more_rounds(eng, sid) is None  # +50% on 5 boots: decided
    sid2 = _series(eng, max_boots=3)
    with Session(eng) as s:  # another series on other kernels, undecided but at its cap
        s.get(Series, sid2).base_commit = "d" * 40
        s.get(Series, sid2).patches[0].commit_sha = "e" * 40
        s.commit()
    _measure(eng, sid2, "d" * 40, VMS, 3, _noise(3))
    _measure(eng, sid2, "e" * 40, VMS, 3, _noise(4))
    assert adaptive.more_rounds(eng, sid2) is None
    assert adaptive.more_rounds(eng, sid2, cap=10) is not None


def test_rounds_that_add_no_boot_end_the_loop(eng):
    sid = _series(eng)
    _measure(eng, sid, "b" * 40, VMS, 3, _noise(5))
    _measure(eng, sid, "c" * 40, VMS, 3, _noise(6))
    first = adaptive.more_rounds(eng, sid)
    assert first is not None
    # nothing stored since (every boot of the new rounds crashed): no endless loop
    assert adaptive.more_rounds(eng, sid, after=first) is None


def test_rounds_that_store_boots_but_pair_none_go_on_to_the_cap(eng):
    sid = _series(eng)
    _measure(eng, sid, "b" * 40, VMS, 3, _noise(5))
    _measure(eng, sid, "c" * 40, VMS, 3, _noise(6))
    first = adaptive.more_rounds(eng, sid)
    assert first is not None and first.have == 3
    # two rounds cut by a lost worker: the kernel's boots landed, the base's did not, so the
    # paired look still counts 3 rounds; the loop goes on rather than stopping for good
    _measure(eng, sid, "c" * 40, VMS, 2, _noise(9), first_round=4)
    again = adaptive.more_rounds(eng, sid, after=first)
    assert again is not None and again.have == 3 and again.stored > first.stored
    # the cap counts the boots a kernel really had, paired or not
    assert adaptive.more_rounds(eng, sid, cap=5, after=first) is None


def test_the_reason_is_kept_for_the_series_page(eng):
    sid = _series(eng)
    _measure(eng, sid, "b" * 40, VMS, 3, _noise(7))
    _measure(eng, sid, "c" * 40, VMS, 3, _noise(8))
    more = adaptive.more_rounds(eng, sid)
    adaptive.record(eng, sid, more)
    with Session(eng) as s:
        row = s.get(Series, sid)
        assert row.meta["more_rounds"] == more.reason()
        assert row.meta["more_rounds_detail"] == more.details()


def test_more_rounds_plan_keeps_runs_per_boot():
    from stackbench.jobs.benchmarks.definitions import SubJob

    sj = SubJob("vm-scalability", "anon-w-seq", {}, 10, "v", "builtin", name="a")
    other = SubJob("thpscale", "thpscale", {}, 3, "v", "builtin", name="b")
    more = adaptive.MoreRounds(boots=2, have=3, cap=10, kernels=[], subjobs=["a"])
    (planned,) = more.plan([sj, other])
    assert planned.name == "a" and planned.runs == 2 * 4  # 10 runs were 4+3+3 per boot


def test_the_series_page_says_why_a_series_is_still_running(eng, client):
    from helpers.web import add_tree, make_series

    add_tree(eng)
    sid = make_series(eng, state="running")
    more = adaptive.MoreRounds(
        boots=2, have=3, cap=10, kernels=[], subjobs=["vm-scalability-anon-w-seq"],
        undecided=[adaptive.Undecided("vm-scalability-anon-w-seq", "1/3-abc",
                                      "vm-scalability.throughput", 3, 3.1, (-2.0, 8.2))],
    )  # fmt: skip
    adaptive.record(eng, sid, more)
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    assert 'id="more-rounds"' in html
    assert "vm-scalability.throughput on 1/3-abc +3.1% [-2.0, +8.2]" in html
    with Session(eng) as s:
        s.get(Series, sid).state = "done"
        s.commit()
    assert 'id="more-rounds"' not in client.get(f"/series/{sid}").get_data(as_text=True)


def test_the_reason_is_one_short_line_and_the_page_has_every_metric(eng, client):
    from helpers.web import add_tree, make_series

    add_tree(eng)
    sid = make_series(eng, state="running")
    jobs = [f"vm-scalability-anon-w-{w}" for w in ("seq", "rand")] + ["thpscale-madvise-false"]
    undecided = [
        adaptive.Undecided(jobs[i % 3], f"{k}/3-0123456789ab", f"thpscale.fault-huge-{i}", 5,
                           4.0 + i, (-1.0, 9.0 + i))
        for k in (1, 2, 3) for i in range(8)
    ]  # fmt: skip
    undecided.sort(key=lambda u: -abs(u.change_pct or 0.0))
    more = adaptive.MoreRounds(
        boots=5, have=5, cap=10, kernels=[], subjobs=jobs, undecided=undecided
    )
    line = more.reason()
    # 24 undecided metrics in 3 jobs once made a line of about 600 characters
    assert len(line) <= 160, line
    assert line.startswith("5 more rounds (5 -> 10 boots per kernel, cap 10)")
    assert "thpscale.fault-huge-7 on 1/3-0123456789ab +11.0%" in line and "23 more" in line
    adaptive.record(eng, sid, more)
    html = client.get(f"/series/{sid}").get_data(as_text=True)
    detail = html[html.index('id="more-rounds-detail"') :]
    assert "24 undecided headline metrics in " + ", ".join(jobs) in detail
    assert all(u.describe() in detail for u in undecided)
