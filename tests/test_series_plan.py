"""A series' plan and the dispatcher's flags are typed columns of its attempt: stored once
by the intake, read by the journey and the adaptive cap, carried to a later attempt; a run
names its series by key; the reporter's query reads columns, not JSON keys."""

from __future__ import annotations

import random
import re
from pathlib import Path

from sqlalchemy.orm import Session
from test_web_support import add_tree

from stackbench.cli import main
from stackbench.jobs.driver import adaptive, lifecycle
from stackbench.jobs.driver.journey import Journey
from stackbench.jobs.executors import plan as bp
from stackbench.jobs.executors.settings import DEFAULT_RUNS
from stackbench.resultsdb import db, series_runs_store, series_store
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.models import Patch, Run, Series
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

ROOT = Path(__file__).resolve().parents[1]
MBOX = (ROOT / "tests" / "data" / "web" / "series.mbox").read_bytes()
VMS = JobSpec(suite="vm-scalability", params={"test": "anon-w-seq"})


def _submit(eng, tmp_path, capsys, *flags: str) -> int:
    add_tree(eng, "mm")
    f = tmp_path / "s.mbox"
    f.write_bytes(MBOX)
    argv = ["submit", "--mbox", str(f), "--tree", "mm", "--jobs", "thpscale", "--no-wait"]
    assert main([*argv, *flags]) == 0, capsys.readouterr().err
    return int(capsys.readouterr().out.split()[1])


def test_runs_and_max_boots_are_the_attempts_columns_and_the_journey_follows_them(
    eng, tmp_path, capsys
):
    sid = _submit(eng, tmp_path, capsys, "--runs", "5", "--max-boots", "12")
    with db.session(eng) as s:
        plan = series_runs_store.current(s, sid)
        meta = series_store.get(s, sid).meta
        assert (plan.number, plan.executor, plan.report_due) == (1, "", True)
        assert (plan.jobs, plan.runs, plan.max_boots, plan.adaptive) == (["thpscale"], 5, 12, None)
        assert adaptive.cap_of(plan) == 12
    assert not {"jobs", "runs", "max_runs", "adaptive", "submitted"} & set(meta)
    # the dispatcher's journey plans from the attempt: 5 runs of every sub-job per kernel
    journey = Journey(eng, sid, executor=None)
    assert (journey.runs, journey.jobs, journey.adaptive) == (5, ["thpscale"], True)
    assert {sj.runs for sj in journey.subjobs} == {5}
    # a failed series handed over again with another runs keeps the rest of its plan
    lifecycle.set_state(eng, sid, "failed", "a build failed", error="a build failed")
    assert lifecycle.hand_over(eng, sid, source="buildbot submit", fresh=True, runs=2) == (
        "handed-over"
    )
    with db.session(eng) as s:
        first, second = series_runs_store.attempts(s, sid)
        assert (first.outcome, second.number, second.runs, second.max_boots) == (
            "failed", 2, 2, 12)  # fmt: skip
        assert second.jobs == ["thpscale"] and second.report_due and second.report_mail is None


def test_no_runs_asked_is_the_one_default_and_no_adaptive_is_kept(eng, tmp_path, capsys):
    from stackbench.jobs.driver import intake

    sid = _submit(eng, tmp_path, capsys)
    with db.session(eng) as s:
        assert series_runs_store.current(s, sid).runs is None
    journey = Journey(eng, sid, executor=None)
    assert (journey.runs, journey.adaptive) == (DEFAULT_RUNS, True)
    with db.session(eng) as s:
        sub = intake.Submission(source="api", tree="mm", mbox=MBOX.replace(b"Subject:", b"Subject: v2", 1),
                                options={"adaptive": "false"})  # fmt: skip
        other = intake.take(s, sub).series.id
    assert other != sid and Journey(eng, other, executor=None).adaptive is False


def test_the_adaptive_look_stops_at_the_attempts_max_boots(eng):
    """Undecided after 3 boots: the look asks for more up to the attempt's cap, 4 here."""
    with Session(eng) as s:
        row = Series(title="t", base_commit="b" * 40, state="running")
        row.patches = [Patch(idx=1, total=1, subject="p", commit_sha="c" * 40)]
        s.add(row)
        s.flush()
        series_runs_store.begin(s, row.id, source="web", max_boots=4)
        s.commit()
        sid = row.id
    rng = random.Random(7)
    machine = MachineSpec(name="qemu-plan", kind="qemu", cpus=2, memory_mb=1024)
    runs = []
    for commit in ("b" * 40, "c" * 40):
        k = KernelSpec(commit=commit, name=commit[:4], config_name="tiny-guest", status="built")
        plan = bp.make_plan([commit], 3, boots=3, seed=1, tag=f"series-{sid}-attempt-1")
        for boot in plan.boots_in_order():
            value = 1000 * (1 + rng.gauss(0, 0.03))
            data = RunData(job=VMS, kernel=k, machine=machine, iteration=0, source="qemu",
                           samples={"vm-scalability.throughput": [value]},
                           meta={"subjob": "vm-scalability-anon-w-seq"})  # fmt: skip
            runs.append(bp.stamp(data, boot, boot.first, sid))
    ingest(eng, runs)
    more = adaptive.more_rounds(eng, sid)
    assert more is not None and (more.cap, more.have, more.boots) == (4, 3, 1)
    with db.session(eng) as s:
        # every run names its series by key, and the verdict's machine is found by it
        assert {r.series_id for r in s.query(Run)} == {sid}
        assert series_store.latest_machine(s, sid) == "qemu-plan"


def test_a_run_of_a_series_that_is_gone_is_stored_as_a_run_of_none(eng):
    k = KernelSpec(commit="d" * 40, name="dddd", config_name="tiny-guest", status="built")
    machine = MachineSpec(name="qemu-plan", kind="qemu", cpus=2, memory_mb=1024)
    data = RunData(job=VMS, kernel=k, machine=machine, iteration=0, source="qemu",
                   samples={"vm-scalability.throughput": [1.0]}, meta={"series": "424242"})  # fmt: skip
    assert len(ingest(eng, [data]).inserted) == 1
    with db.session(eng) as s:
        assert [r.series_id for r in s.query(Run)] == [None]


def test_a_report_is_owed_by_the_latest_attempt_until_its_mail_is_noted(eng):
    with Session(eng) as s:
        owed, foreground = Series(title="a", state="done"), Series(title="b", state="done")
        s.add_all([owed, foreground])
        s.flush()
        series_runs_store.begin(s, owed.id, source="web", report=True)
        series_runs_store.begin(s, foreground.id, source="demo",
                                executor=series_runs_store.FOREGROUND)  # fmt: skip
        s.commit()
        ids = owed.id, foreground.id
    with db.session(eng) as s:
        assert series_store.unreported(s) == [ids[0]]
        series_runs_store.note(s, ids[0], report_mail={"to": [], "why": "no recipient"})
    with db.session(eng) as s:
        assert series_store.unreported(s) == []


def test_a_series_waiting_for_its_client_is_not_the_dispatchers_until_handed_over(
    eng, tmp_path, capsys
):
    """``submit`` through Buildbot stores a series for the client to hand over: the first
    attempt waits for it (the dispatcher leaves it), and the hand-over takes that attempt."""
    from stackbench.jobs.driver import intake

    add_tree(eng, "mm")
    with db.session(eng) as s:
        sub = intake.Submission(source="demo", tree="mm", mbox=MBOX, runner=intake.WATCHER,
                                options={"runs": "4", "max_boots": "8"})  # fmt: skip
        sid = intake.take(s, sub).series.id
    with db.session(eng) as s:
        assert series_runs_store.active(s, lifecycle.PENDING) == []
        assert series_runs_store.current(s, sid).executor == series_runs_store.WAITING
    assert lifecycle.hand_over(eng, sid, source="demo") == "handed-over"
    with db.session(eng) as s:
        (attempt,) = series_runs_store.attempts(s, sid)
        assert (attempt.number, attempt.executor, attempt.runs, attempt.max_boots) == (
            1, "", 4, 8)  # fmt: skip
        assert [a.id for a in series_runs_store.active(s, lifecycle.PENDING)] == [sid]


PLAN_KEYS = (
    "jobs|runs|max_runs|max_boots|adaptive|check_claims|submitted|report_mail|host_fault|fetched"
    # where a pushed series' commits are, its mails, a tracked branch's plan (0012)
    "|push|mbox_b64|bisect"
)
META_READ = re.compile(
    rf"""meta(?:\s*or\s*\{{\}}\)?)?\s*(?:\[|\.get\()\s*["']({PLAN_KEYS})["']"""
    rf"""|["']({PLAN_KEYS})["']\s+(?:not\s+)?in\s+[\w.()]*meta\b"""
)


def test_meta_read_pattern_finds_the_reads_it_is_for():
    """The grep below is only as good as its pattern: the reads 0011 and 0012 removed."""
    for line in (
        'push = (series_store.get(s, series_id).meta or {}).get("push") or {}',
        'base64.b64decode(series.meta["mbox_b64"]) if "mbox_b64" in series.meta else None',
        'if "mbox_b64" in series.meta:',
        "if meta.get('max_runs'):",
        'if meta.get("bisect", True):',
        'runs = int(series.meta["runs"])',
    ):
        assert META_READ.search(line), line
    assert not META_READ.search('for bi in b.get("bisects", []):')
    assert not META_READ.search('last = meta.get("last_run") or {}')


def test_the_dispatcher_reads_no_plan_or_flag_from_meta_and_no_boot_id_pattern():
    """The plan and the flags are the attempt's columns, a pushed series' commits and a
    tracked branch's plan columns of their rows: no module of the driver, the tracking, the
    web or the mail reads them as JSON keys of a meta; runs are found by their key."""
    found = []
    for room in ("jobs/driver", "jobs/tracking", "jobs/executors", "web", "mail"):
        for path in sorted((ROOT / room).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if META_READ.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
    store = (ROOT / "results-db" / "series_store.py").read_text()
    assert "LIKE" not in store and 'Series.meta["' not in store
