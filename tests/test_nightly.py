"""Nightly logic on a real database: baselines, regression records, bisects, mails.

Kernels are not the point here: a fake lab stands in for building and booting and ingests
synthetic runs (throughput 1000 with 1% noise; commits from ``bad_from`` on lose 30%) through
the real ingest path, and everything after that (stored-run reuse, verdicts, regression rows,
bisect records, the outbox) is the real code. The real-kernel path is tests/test_bisect_e2e.py.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError
from stackbench.jobs.driver.journey import Kernel, Progress
from stackbench.jobs.executors.build_stage import update_build
from stackbench.jobs.executors.series_state import KernelTask
from stackbench.jobs.executors.settings import Settings
from stackbench.jobs.tracking import bisect_runner as br
from stackbench.jobs.tracking import comparison, nightly, tracked_branches
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.buildruns import done_boots
from stackbench.resultsdb.models import (
    Bisect,
    KernelBuild,
    MailOutbox,
    Metric,
    Regression,
    Run,
    Series,
    TrackedBranch,
)

TREE, BRANCH = "linux-6.1", "sbtest"
JOB = "vm-scalability[test=anon-w-seq,runtime=5s]"
METRIC = "vm-scalability.throughput"


def sha(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


class FakeExecutor:
    """The journey's executor over a fake lab: the lab's ``build`` stands for the kernel
    build and its ``run`` for one boot of the plan; everything else (the rounds, the
    adaptive looks, the attempt's rows, the verdicts) is the real driver's."""

    name = series_runs_store.FOREGROUND

    def __init__(self, lab, series_id):
        self.lab, self.sid = lab, series_id
        self.ids: dict[str, int | None] = {}
        self.commits: list[str] = []
        self.tree = TREE
        self.boots_ended = 0

    def hand_over(self, journey):
        with Session(journey.eng) as s:
            series = s.get(Series, self.sid)
            self.commits = [series.base_commit] + [
                p.commit_sha for p in sorted(series.patches, key=lambda p: p.idx)
            ]
            self.tree = series.tree.name if series.tree else TREE
        return {"message": f"building {len(self.commits)} kernels"}

    def runs(self, journey):
        return max(sj.runs for sj in journey.subjobs)

    def build(self, journey):
        for c in self.commits:
            self.ids[c] = self.lab.build(journey.eng, self.tree, c)

    def progress(self, journey):
        return Progress(
            kernels=len(self.commits),
            built=[Kernel(c, c) for c in self.commits if self.ids.get(c)],
            builds_ended=len(self.ids),
            boots_ended=self.boots_ended,
            busy=False,
            failing=any(v is None for v in self.ids.values()),
        )

    def failures(self, journey):
        return [f"{c[:12]}: build failed" for c, v in self.ids.items() if v is None]

    def boot(self, journey, batch, handed):
        subjobs = journey.subjobs if batch.more is None else batch.more.plan(journey.subjobs)
        handed()
        for boot in batch.plan.boots_in_order():
            self.lab.series = self.sid
            for sj in subjobs:
                spec = br.spec_for(sj.suite, sj.params)
                self.lab.run(journey.eng, self.tree, self.ids[boot.kernel], spec, boot.runs, boot)
            self.boots_ended += 1
        return True


class FakeLab:
    """A branch history of ``n`` commits after c0; the branch head moves with ``head``."""

    runs_per_boot = 1  # every run its own boot
    poll_s = 0.0
    settings = Settings(config="fake")
    series = None  # the comparison booted now

    def executor(self, eng, series_id):
        return FakeExecutor(self, series_id)

    def boot_meta(self, boot) -> dict:
        """What the plan stamps on a boot's runs (boot_stage / the worker)."""
        if boot is None:
            return {}
        return {"boot_id": boot.boot_id, "boot_round": boot.round, "series": self.series}

    def __init__(
        self,
        n=6,
        bad_from=None,
        broken=(),
        drop=0.3,
        seed=7,
        noise=10.0,
        fixed_from=None,
        slow_from=None,
    ):
        self.history = [sha(i) for i in range(n + 1)]
        self.head = 0
        self.bad_from = bad_from
        self.broken = set(broken)
        self.drop = drop
        self.noise = noise
        self.fixed_from = fixed_from
        self.slow_from = slow_from  # from here on, runs take twice as long (nothing else)
        self.rng = np.random.default_rng(seed)
        self.attempted: set[str] = set()
        self.boots = 0
        self.subjects = {c: f"mm/rmap: change {i}" for i, c in enumerate(self.history)}
        self.subjects[self.history[0]] = "Linux 6.1"
        self.machine = "fake-qemu"  # the machine its runs are stored under

    @property
    def built(self) -> int:
        return len(self.attempted)

    def resolve(self, tree, ref):
        if ref == BRANCH:
            return self.history[self.head]
        for c in self.history:
            if c.startswith(ref):
                return c
        raise NotFoundError(f"unknown ref {ref}")

    def commits(self, tree, good, bad):
        return self.history[self.history.index(good) + 1 : self.history.index(bad) + 1]

    def subject(self, tree, commit):
        return self.subjects[commit]

    def build(self, eng, tree, commit):
        idx = self.history.index(commit)
        if br.failed_build(eng, commit, "fake") is not None:
            return None
        with Session(eng) as s:
            row = s.scalars(select(KernelBuild).where(KernelBuild.commit == commit)).first()
        if row is None:
            self.attempted.add(commit)
        status = "build-failed" if idx in self.broken else "built"
        # the row as the real driver's build stage writes it
        bid = update_build(
            eng, KernelTask(label="", name=commit[:12], commit=commit), series_id=None,
            tree=tree, config="fake", chash="fake", status=status, compiler="fake",
            meta={"subject": self.subjects[commit]},
        )  # fmt: skip
        return None if status != "built" else bid

    def run(self, eng, tree, build_id, job, runs, boot=None):
        self.boots += 1
        with Session(eng) as s:
            kb = s.get(KernelBuild, build_id)
            commit = kb.commit
            have = s.scalar(select(func.count()).select_from(Run).where(Run.build_id == build_id))
        idx = self.history.index(commit)
        bad = self.bad_from is not None and idx >= self.bad_from
        if self.fixed_from is not None and idx >= self.fixed_from:
            bad = False
        mean = 1000.0 * (1 - self.drop) if bad else 1000.0
        ((name, spec),) = br.job_spec_strings(job)
        data = []
        for i in range(runs):
            it = have + i
            data.append(
                ig.RunData(
                    job=spec,
                    kernel=ig.KernelSpec(
                        commit, config_name="fake", config_hash="fake", compiler="fake", tree=tree
                    ),
                    machine=ig.MachineSpec(self.machine, kind="qemu", cpus=2, memory_mb=1024),
                    iteration=it,
                    samples={
                        METRIC: [float(self.rng.normal(mean, self.noise))],
                        "vm-scalability.workload": [float(self.rng.normal(5000, 500))],
                        **self._duration(idx),
                    },
                    source="fake",
                    meta={**self.boot_meta(boot), "subjob": name},
                    # the key column holds 128 characters: a job spec can be longer
                    idempotency_key=f"fake-{commit}-{zlib.crc32(job.encode()):08x}-{it}",
                )
            )
        ig.ingest(eng, data)

    def _duration(self, idx: int) -> dict[str, list[float]]:
        if self.slow_from is None:
            return {}
        seconds = 10.0 if idx >= self.slow_from else 5.0
        return {"duration.elapsed": [float(self.rng.normal(seconds, 0.05))]}


@pytest.fixture
def mail_env(monkeypatch):
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "linux-mm@kvack.example")
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", "https://stackbench.example")


def tracked(**kw) -> list[nightly.Tracked]:
    return [nightly.Tracked(tree=TREE, branch=BRANCH, jobs=[JOB], **kw)]


def night(eng, lab, **kw):
    kw.setdefault("tracked", tracked())
    return nightly.run_nightly(eng, lab=lab, **kw)


def branch_row(eng) -> TrackedBranch:
    with Session(eng, expire_on_commit=False) as s:
        return s.scalars(select(TrackedBranch)).one()


def baseline_commit(eng) -> str | None:
    row = branch_row(eng)
    if row.baseline_build_id is None:
        return None
    with Session(eng) as s:
        return s.get(KernelBuild, row.baseline_build_id).commit


def outbox(eng, kind=None) -> list[MailOutbox]:
    with Session(eng, expire_on_commit=False) as s:
        q = select(MailOutbox).order_by(MailOutbox.id)
        if kind:
            q = q.where(MailOutbox.kind == kind)
        return list(s.scalars(q))


def test_first_night_sets_the_baseline_and_a_quiet_night_advances_it(eng, mail_env):
    lab = FakeLab(n=3)
    summary = night(eng, lab)
    (b,) = summary["branches"]
    assert b["state"] == "baseline" and b["head"] == lab.history[0]
    assert baseline_commit(eng) == lab.history[0]
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 3  # the policy's first look
        assert s.scalar(select(func.count()).select_from(Regression)) == 0
    lab.head = 2
    summary = night(eng, lab)
    (b,) = summary["branches"]
    assert b["state"] == "unchanged", b
    assert baseline_commit(eng) == lab.history[2]
    assert b["regressions"] == [] and b["bisects"] == []
    # "~" needs the decision's interval inside +-2%: at 1% noise that takes the cap's 10 boots;
    # tonight's head and baseline share every round (the baseline's 3 boots of the first
    # night are not tonight's): 3 rounds at the first look, then 2 and 5 at the looks of 5
    # and 10
    assert (b["jobs"][0]["runs_base"], b["jobs"][0]["runs_head"]) == (3 + 10, 10)
    assert lab.boots == 3 + 2 * 10
    mails = outbox(eng, "nightly")
    assert len(mails) == 2
    assert "0 new regression(s)" in mails[-1].subject
    assert "ran vm-scalability" in mails[-1].body


def test_a_nights_comparison_is_a_series_the_front_page_does_not_list(eng, mail_env):
    from stackbench.web import create_app

    lab = FakeLab(n=2)
    night(eng, lab)
    lab.head = 1
    night(eng, lab)
    with Session(eng) as s:
        rows = s.execute(select(Series.id, Series.source, Series.state, Series.title)).all()
    assert [(src, st) for _id, src, st, _t in rows] == [("nightly", "done")] * 2
    sid, title = rows[-1][0], rows[-1][3]
    assert lab.history[1][:12] in title and lab.history[0][:12] in title
    # its rounds are the attempt's, as a series' are; nobody is mailed a series report
    with Session(eng) as s:
        (attempt,) = series_runs_store.attempts(s, sid)
        assert attempt.executor == series_runs_store.FOREGROUND and attempt.outcome == "done"
        assert attempt.batches and all(len(b.plan["order"][0]) == 2 for b in attempt.batches)
    assert not outbox(eng, "series")
    client = create_app({"ENGINE": eng, "SECRET_KEY": "t", "TESTING": True}).test_client()
    assert f"/series/{sid}" not in client.get("/").get_data(as_text=True)
    assert client.get(f"/series/{sid}").status_code == 200


def test_a_slower_run_alone_is_judged_but_opens_no_regression(eng, mail_env):
    """duration.* follows the job's own metrics (and the host's load): twice the wall-clock
    time with the same throughput is shown as worse, and the head still becomes the baseline."""
    lab = FakeLab(n=2, slow_from=1)
    night(eng, lab)
    lab.head = 2
    (b,) = night(eng, lab)["branches"]
    job = b["jobs"][0]
    assert job["verdicts"].get("worse") == 1, job  # duration.elapsed, judged
    assert job["worse"] == [] and b["state"] == "unchanged" and b["regressions"] == []
    assert baseline_commit(eng) == lab.history[2]


def test_regression_is_recorded_bisected_to_the_planted_commit_and_mailed_once(eng, mail_env):
    lab = FakeLab(n=6, bad_from=5, broken={3})
    night(eng, lab)
    lab.head = 6
    summary = night(eng, lab)
    (b,) = summary["branches"]
    assert b["state"] == "regressed", b
    assert baseline_commit(eng) == lab.history[0]  # the last good kernel stays the baseline
    with Session(eng) as s:
        regs = list(s.scalars(select(Regression)))
        assert len(regs) == 1
        reg = regs[0]
        assert s.get(Metric, reg.metric_id).name == METRIC
        assert reg.state == "bisected" and reg.culprit == lab.history[5]
        assert reg.change_pct < -20
        bis = s.scalars(select(Bisect)).one()
        assert bis.state == "found" and bis.culprit == lab.history[5]
        assert bis.confidence > 0.99
        verdicts = {st["commit"]: st["verdict"] for st in bis.steps}
        assert verdicts[lab.history[3]] == "skip"  # does not build: skipped, never bad
        assert bis.meta["parent"] == lab.history[4]
    # c0 and c6 came from the nightly; the steps build at most ceil(log2(n)) + 2 more
    assert b["bisects"][0]["kernels_built"] <= math.ceil(math.log2(6)) + 2
    (mail,) = outbox(eng, "regression")
    assert mail.subject.startswith(
        f"[{TREE}:{BRANCH}] [mm/rmap] {lab.history[5][:10]}: {METRIC} -"
    ), mail.subject
    assert mail.subject.endswith("% regression")
    assert "drop (worse: higher is better for this metric)" in mail.body
    assert f"commit: {lab.history[5]}" in mail.body
    assert "stackbench bisect --tree linux-6.1" in mail.body
    assert "--metric 'vm-scalability.throughput'" in mail.body
    assert "https://stackbench.example/regressions/" in mail.body
    assert "fake-qemu" in mail.body
    nightly_mail = outbox(eng, "nightly")[-1]
    assert "1 new regression(s)" in nightly_mail.subject
    assert "bisected: regression" in nightly_mail.body and lab.history[5][:12] in nightly_mail.body

    # the same night again: nothing new is opened, bisected or mailed
    again = night(eng, lab)
    (b2,) = again["branches"]
    assert b2["state"] == "regressed" and b2["regressions"] == [] and b2["known"] == [reg.id]
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Regression)) == 1
        assert s.scalar(select(func.count()).select_from(Bisect)) == 1
    assert len(outbox(eng, "regression")) == 1
    # a scheduler retry without --now leaves a branch judged at this head alone
    retry = night(eng, lab, now=False)
    assert retry["branches"][0]["state"] == "skipped"


def test_skips_that_hide_the_culprit_make_an_inconclusive_bisect_and_mail(eng, mail_env):
    lab = FakeLab(n=5, bad_from=4, broken={3})
    night(eng, lab)
    lab.head = 5
    summary = night(eng, lab)
    (bi,) = summary["branches"][0]["bisects"]
    assert bi["state"] == "inconclusive"
    assert bi["candidates"] == [lab.history[3], lab.history[4]]
    with Session(eng) as s:
        reg = s.scalars(select(Regression)).one()
        assert reg.state == "inconclusive" and reg.culprit is None
    (mail,) = outbox(eng, "regression")
    assert "bisect inconclusive" in mail.body
    assert lab.history[3][:12] in mail.body and lab.history[4][:12] in mail.body


def test_head_that_does_not_build_keeps_the_baseline(eng, mail_env):
    lab = FakeLab(n=2, broken={2})
    night(eng, lab)
    lab.head = 2
    summary = night(eng, lab)
    assert summary["branches"][0]["state"] == "build-failed"
    assert baseline_commit(eng) == lab.history[0]
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Regression)) == 0


def test_no_recipient_still_records_everything(eng, monkeypatch):
    monkeypatch.delenv("STACKBENCH_MAIL_LIST", raising=False)
    lab = FakeLab(n=2, bad_from=2)
    night(eng, lab)
    lab.head = 2
    summary = night(eng, lab)
    assert summary["mail"] is None and summary["branches"][0]["mails"] == []
    with Session(eng) as s:
        assert s.scalars(select(Regression)).one().culprit == lab.history[2]
    assert outbox(eng) == []


def test_bisect_by_hand_records_steps(eng):
    lab = FakeLab(n=4, bad_from=2)
    done = br.run_bisect(
        eng, lab, tree=TREE, good=lab.history[0][:10], bad=lab.history[4], job=JOB, metric=METRIC
    )
    assert done.result.state == "found" and done.result.culprit == lab.history[2]
    with Session(eng) as s:
        row = s.get(Bisect, done.bisect_id)
        assert row.state == "found" and row.finished_at is not None
        assert row.good == lab.history[0] and row.regression_id is None
        assert [st["verdict"] for st in row.steps] == [st.verdict for st in done.result.steps]


def test_bisect_refuses_a_metric_without_direction_and_a_multi_job(eng):
    lab = FakeLab(n=2, bad_from=2)
    with pytest.raises(InputError, match="no better direction"):
        br.run_bisect(
            eng, lab, tree=TREE, good=lab.history[0], bad=lab.history[2], job=JOB,
            metric="vm-scalability.workload",
        )  # fmt: skip
    with pytest.raises(InputError, match="sub-jobs"):
        br.run_bisect(
            eng, lab, tree=TREE, good=lab.history[0], bad=lab.history[2],
            job="vm-scalability[test=anon-w-seq|anon-w-rand]", metric=METRIC,
        )  # fmt: skip
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Bisect)) == 0
        assert s.scalar(select(func.count()).select_from(Metric)) == 0


def test_job_spec_of_a_stored_job_round_trips():
    ((_n, spec),) = br.job_spec_strings(JOB)
    from stackbench.resultsdb.models import Job

    again = br.spec_of(Job(suite=spec.suite, params=spec.params))
    ((_n2, spec2),) = br.job_spec_strings(again)
    assert spec2.params_key == spec.params_key and spec2.suite_version == spec.suite_version


# ---- tracked-branch definitions -------------------------------------------------------------


def write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text)
    return p


GOOD = f"tree: {TREE}\nbranch: {BRANCH}\njobs: ['{JOB}']\nruns: 3\nmax_runs: 6\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tree: linux-6.1\nbranch: x\n", "jobs"),
        (f"tree: {TREE}\nbranch: x\njobs: ['nosuchjob']\n", "nosuchjob"),
        (f"tree: {TREE}\nbranch: x\njobs: ['vm-scalability[bogus=1]']\n", "bogus"),
        (f"tree: {TREE}\nbranch: x\njobs: ['{JOB}']\nruns: 8\nmax_runs: 4\n", "max_runs"),
        (f"tree: {TREE}\nbranch: 'a b'\njobs: ['{JOB}']\n", "branch"),
        ("tree: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_tracked_file_is_named_and_nothing_is_synced(eng, tmp_path, text, message):
    write(tmp_path, "a-good.yaml", GOOD)
    bad = write(tmp_path, "b-bad.yaml", text)
    with pytest.raises(InputError) as exc:
        nightly.run_nightly(eng, lab=FakeLab(), tracked=nightly.load_tracked([tmp_path]))
    assert str(bad) in str(exc.value) and message in str(exc.value)
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(TrackedBranch)) == 0


def test_the_same_branch_twice_is_refused(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD)
    with pytest.raises(InputError, match="already tracked"):
        nightly.load_tracked([tmp_path])


def test_yaml_sync_and_the_shipped_example(eng, tmp_path, monkeypatch):
    write(tmp_path, "a.yaml", GOOD)
    monkeypatch.setenv("STACKBENCH_TRACKED", str(tmp_path))
    (t,) = nightly.load_tracked()
    assert (t.runs, t.max_runs) == (3, 6)
    ids = nightly.sync_tracked(eng, [t])
    assert nightly.sync_tracked(eng, [t]) == ids  # idempotent
    row = branch_row(eng)
    assert row.jobs == [JOB] and (row.runs, row.max_runs, row.bisect) == (3, 6, True)
    assert "runs" not in row.meta
    assert nightly._policy_for(row, None).start_runs == 3
    assert nightly._policy_for(row, None).max_runs == 6
    shipped = nightly.load_tracked([tracked_branches.TRACKED_DIR])
    assert shipped and all(s.jobs for s in shipped)


def test_unknown_branch_is_an_error(eng):
    with pytest.raises(NotFoundError, match="not tracked: linux-6.1:nope"):
        night(eng, FakeLab(), branches=["linux-6.1:nope"])


# ---- the commands ---------------------------------------------------------------------------


def test_nightly_command_refuses_a_branch_without_tree(capsys):
    from stackbench.cli import main

    assert main(["nightly", "--branch", "master"]) == 1
    assert "--branch master: expected TREE:BRANCH" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs-cap", "1"], "--runs-cap: must be at least 2"),
        (["--runs", "30"], "--runs: must be between 2 and the cap (10)"),
        (["--runs", "8", "--runs-cap", "6"], "--runs: must be between 2 and the cap (6)"),
    ],
)
def test_bisect_command_checks_its_run_counts(capsys, argv, message):
    from stackbench.cli import main

    base = ["bisect", "--good", "a", "--bad", "b", "--job", JOB, "--metric", METRIC]
    assert main([*base, *argv]) == 1
    assert message in capsys.readouterr().err


def test_bisect_command_policy():
    from stackbench.cli.bisect import policy_from

    p = policy_from(3, 8)
    assert (p.start_runs, p.max_runs, p.looks) == (3, 8, (3, 5, 8))
    assert policy_from(None, None) == nightly.DEFAULT


def test_a_regression_is_reported_once_while_it_lasts_and_closed_when_fixed(eng, mail_env):
    lab = FakeLab(n=4, bad_from=2, fixed_from=4)
    night(eng, lab)
    lab.head = 2
    first = night(eng, lab)["branches"][0]
    assert len(first["regressions"]) == 1
    (rid,) = first["regressions"]
    lab.head = 3  # a later head, still worse than the baseline: the same regression
    later = night(eng, lab)["branches"][0]
    assert later["state"] == "regressed" and later["regressions"] == []
    assert later["known"] == [rid] and later["bisects"] == []
    assert len(outbox(eng, "regression")) == 1
    lab.head = 4  # fixed: the head becomes the baseline and the regression is closed
    fixed = night(eng, lab)["branches"][0]
    assert fixed["state"] == "unchanged" and "1 regression(s) fixed" in fixed["message"]
    assert baseline_commit(eng) == lab.history[4]
    with Session(eng) as s:
        reg = s.get(Regression, rid)
        assert reg.state == "closed" and reg.meta["closed_as"] == "bisected"
        assert reg.culprit == lab.history[2]


class Drifting:
    """bisect.Measurer whose runs drift with the host's load: the good kernel was measured
    in a quiet hour (1000), later kernels in a busier one (+/-40% and 15% noise); commits
    from ``bad_from`` on lose 85%."""

    def __init__(self, commits, bad_from, shift, seed=3):
        self.commits, self.bad_from, self.shift = list(commits), bad_from, shift
        self.rng = np.random.default_rng(seed)
        self.runs: dict[str, list[float]] = {}

    def measure(self, commit, runs):
        have = self.runs.setdefault(commit, [])
        idx = self.commits.index(commit)
        level = 1000.0 if idx == 0 else 1000.0 * (1 + self.shift)
        mean = level * 0.15 if idx >= self.bad_from else level
        while len(have) < runs:
            have.append(float(self.rng.normal(mean, 0.15 * mean)))
        return list(have)

    def built(self):
        return len(self.runs)


@pytest.mark.parametrize("shift", [0.4, -0.4])
def test_a_drifted_step_is_placed_by_the_bad_kernel_too(shift):
    from dataclasses import replace as dc_replace

    from stackbench.jobs.tracking.bisect import bisect

    wide = dc_replace(
        nightly.DEFAULT,
        start_runs=3,
        looks=(3, 6, 10),
        max_runs=10,
        min_effect={**nightly.DEFAULT.min_effect, "throughput": 0.5},
    )
    commits = [f"c{i}" for i in range(7)]
    m = Drifting(commits, bad_from=5, shift=shift)
    res = bisect(m, commits[1:], "c0", higher_is_better=True, kind="throughput", policy=wide)
    assert res.state == "found" and res.culprit == "c5", [s.as_dict() for s in res.steps]
    assert any("than bad" in s.reason or "equivalent to bad" in s.reason for s in res.steps)


def _looks_walked(policy) -> list[int]:
    n, seen = policy.start_runs, [policy.start_runs]
    while (n := policy.next_look(n)) and n > seen[-1]:
        seen.append(n)
    return seen


@pytest.mark.parametrize(
    ("runs", "max_runs"), [(None, 40), (None, 12), (3, 40), (None, None), (7, None)]
)
def test_the_error_budget_is_split_over_every_look_the_branch_takes(eng, runs, max_runs):
    nightly.sync_tracked(eng, tracked(runs=runs, max_runs=max_runs))
    pol = nightly._policy_for(branch_row(eng), None)
    walked = _looks_walked(pol)
    assert walked[-1] == (max_runs or 10)
    # the budget is spent over exactly the looks really taken, and adds up to alpha
    assert len(pol.spending()) == len(walked) == pol.n_looks
    assert sum(pol.spending()) == pytest.approx(nightly.DEFAULT.alpha)


class NoisyDurationLab(FakeLab):
    """Throughput as FakeLab; the job's elapsed time scatters by 30% (a busy host)."""

    def _duration(self, idx):
        return {"duration.elapsed": [float(self.rng.normal(5.0, 1.5))]}


def test_an_undecided_duration_alone_measures_nothing_more(eng, mail_env):
    lab = NoisyDurationLab(n=2, noise=1.0)
    night(eng, lab)
    lab.head = 1
    (job,) = night(eng, lab)["branches"][0]["jobs"]
    assert job["verdicts"].get("unchanged") == 1  # the throughput, decided before the cap
    assert job["verdicts"].get("undecided") == 1  # the duration
    # no round beyond the throughput's decision: the baseline's 3 boots of the first night
    # and the rounds both had tonight
    assert job["runs_base"] == 3 + job["runs_head"] and job["runs_head"] < 10


def test_an_undecided_headline_metric_gets_more_runs(eng, mail_env):
    lab = FakeLab(n=2, noise=40.0)  # throughput CoV 4%: not decided at 5 runs
    night(eng, lab)
    lab.head = 1
    (job,) = night(eng, lab)["branches"][0]["jobs"]
    assert job["runs_head"] > 5 and job["runs_base"] == 3 + job["runs_head"]


class BootLab(FakeLab):
    """Each call is one boot of ``runs_per_boot`` runs sharing that boot's offset (the host's
    load during the boot): CoV 3% between boots, 0.3% between runs of a boot."""

    runs_per_boot = 2

    def __init__(self, *args, slow_boot=None, **kw):
        super().__init__(*args, **kw)
        self.calls: list[tuple[str, int]] = []
        self.plan_boots: list = []  # the plan's Boot of each call
        self.slow_boot = slow_boot  # (commit index, boot number): that boot's host is 20% slow

    def run(self, eng, tree, build_id, job, runs, boot=None):
        with Session(eng) as s:
            commit = s.get(KernelBuild, build_id).commit
        idx = self.history.index(commit)
        n_boot = sum(1 for c, _ in self.calls if c == commit)
        self.calls.append((commit, runs))
        self.plan_boots.append(boot)
        self.boots += 1
        offset = 1 + 0.03 * self.rng.normal()
        if self.slow_boot == (idx, n_boot):
            offset *= 0.8
        ((name, spec),) = br.job_spec_strings(job)
        meta = {"boot_id": f"{commit[:8]}-boot-{n_boot}", **self.boot_meta(boot), "subjob": name}
        data = [
            ig.RunData(
                job=spec,
                kernel=ig.KernelSpec(
                    commit, config_name="fake", config_hash="fake", compiler="fake", tree=tree
                ),
                machine=ig.MachineSpec("fake-qemu", kind="qemu", cpus=2, memory_mb=1024),
                iteration=i,
                samples={METRIC: [float(1000 * offset * (1 + 0.003 * self.rng.normal()))]},
                source="fake",
                meta=meta,
                idempotency_key=f"boot-{commit}-{n_boot}-{i}",
            )
            for i in range(runs)
        ]
        ig.ingest(eng, data)


def test_runs_are_grouped_by_boot_and_boots_are_added_one_call_each(eng, mail_env):
    lab = BootLab(n=2)
    night(eng, lab)
    assert lab.calls == [(lab.history[0], 2)] * 3  # three boots of two runs: the first look
    lab.head = 1
    (job,) = night(eng, lab)["branches"][0]["jobs"]
    assert job["runs_base"] - 3 == job["runs_head"] >= 3  # boots, not runs
    with Session(eng) as s:
        head_runs = s.scalar(
            select(func.count())
            .select_from(Run)
            .join(KernelBuild, KernelBuild.id == Run.build_id)
            .where(KernelBuild.commit == lab.history[1])
        )
    assert head_runs == 2 * job["runs_head"]


def test_one_slow_boot_of_a_neutral_head_opens_no_regression(eng, mail_env):
    # the head's first boot ran on a slow host: both of its runs are 20% low; judged as ten
    # independent runs that is a 4% drop with a tight interval, judged by boots it is noise
    lab = BootLab(n=2, slow_boot=(1, 0), seed=11)
    night(eng, lab)
    lab.head = 1
    (b,) = night(eng, lab)["branches"]
    assert b["regressions"] == [] and b["state"] == "unchanged", b


def test_kernels_compared_boot_in_shared_shuffled_rounds(eng):
    lab = BootLab(n=2)
    m = comparison.measure(eng, lab, tree=TREE, kernels=lab.history[:2], jobs=[JOB], boots=4)
    assert m.state == "done" and lab.built == 2
    a, b = (m.builds[c] for c in lab.history[:2])
    (jid,) = br.job_ids(eng, JOB)
    assert [done_boots(eng, k, jid) for k in (a, b)] == [4, 4]
    pairs = [tuple(c for c, _ in lab.calls[i : i + 2]) for i in range(0, 8, 2)]
    assert all(sorted(p) == sorted(lab.history[:2]) for p in pairs)  # each round boots both
    assert len(set(pairs)) == 2  # in an order shuffled per round
    assert [bt.round for bt in lab.plan_boots] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert {c for c, runs in lab.calls} == set(lab.history[:2]) and {r for _, r in lab.calls} == {2}
    # measured again: its builds are reused, and the new comparison's rounds are its own
    lab.calls.clear()
    again = comparison.measure(eng, lab, tree=TREE, kernels=lab.history[:2], jobs=[JOB], boots=3)
    assert again.built == 0 and len(lab.calls) == 6 and again.series_id != m.series_id


def test_a_nightly_judgement_interleaves_base_and_head(eng, mail_env, monkeypatch):
    from dataclasses import replace as dc_replace

    lab = BootLab(n=2, seed=7)
    night(eng, lab)  # the baseline: three boots on its own
    before = len(lab.calls)
    lab.head = 1
    judged = []
    real = nightly.judge_job

    def keep(*args, **kw):
        judged.append(out := real(*args, **kw))
        return out

    monkeypatch.setattr(nightly, "judge_job", keep)
    # seven boots each tonight, every one of the seven rounds booting both kernels: the
    # baseline's boots of the first night are not part of tonight's first look
    policy = dc_replace(nightly.DEFAULT, start_runs=7, looks=(7,), max_runs=7)
    (job,) = night(eng, lab, policy=policy)["branches"][0]["jobs"]
    # the first look is blocked as a series is: paired by tonight's seven rounds, the
    # baseline's boots of another night in none of them
    (out,) = judged
    v = out.verdicts[METRIC]
    assert v.test.startswith("paired by round"), v.test
    assert v.n_base == v.n_new == 7
    commits = [c for c, _ in lab.calls[before:]]
    assert len(commits) == 14
    for i in range(0, 14, 2):
        assert sorted(commits[i : i + 2]) == sorted(lab.history[:2]), commits
    assert [bt.round for bt in lab.plan_boots[before:]] == [r for r in range(1, 8) for _ in "ab"]
    assert (job["runs_base"], job["runs_head"]) == (3 + 7, 7)


class DeadLab(FakeLab):
    """Builds, but no run ever finishes: nothing is stored."""

    def run(self, eng, tree, build_id, job, runs, boot=None):
        self.boots += 1


def test_boots_that_store_nothing_end_the_comparison(eng):
    """Rounds that store nothing are not followed by more: the adaptive look finds no boot
    to judge, and the comparison ends after its first rounds."""
    lab = DeadLab(n=1)
    m = comparison.measure(
        eng, lab, tree=TREE, kernels=lab.history[:2], jobs=[JOB], boots=3, cap=10
    )
    assert lab.boots == 2 * 3
    assert all(m.builds[c] is not None for c in lab.history[:2])
    (jid,) = br.job_ids(eng, JOB)
    assert done_boots(eng, m.builds[lab.history[1]], jid) == 0
