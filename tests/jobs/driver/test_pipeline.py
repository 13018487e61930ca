"""Pipeline pieces that need no kernel: job specs, submission checks, rebuilt mails, ETA."""

from __future__ import annotations

import io
import re

import pytest
from helpers.intake import submit_series
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError
from stackbench.jobs.driver import intake
from stackbench.jobs.driver.apply_stage import _apply, mail_from_patch
from stackbench.jobs.executors.jobspecs import (
    parse_job_spec,
    plan_for,
    resolve_jobs,
    split_job_specs,
)
from stackbench.jobs.executors.progress import Eta, ProgressEvent, StderrProgress
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
from stackbench.jobs.executors.settings import Settings
from stackbench.patches import stacks
from stackbench.patches.parser import parse_mbox
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.models import Series


def test_split_job_specs_keeps_bracketed_commas():
    text = "thpscale[madvise=false,max_threads=2], stress-highalloc ,vm-scalability"
    assert split_job_specs(text) == [
        "thpscale[madvise=false,max_threads=2]",
        "stress-highalloc",
        "vm-scalability",
    ]


def test_parse_job_spec_overrides_and_runs():
    job = parse_job_spec("thpscale[madvise=false,max_threads=2]", runs=2)
    assert job.name == "thpscale"
    assert job.params["madvise"] is False
    assert job.params["max_threads"] == 2
    assert job.runs == 2
    vms = parse_job_spec("vm-scalability[test=anon-w-seq|anon-w-rand]")
    assert vms.params["test"] == ["anon-w-seq", "anon-w-rand"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("thpscale[max_threads=zero]", "max_threads"),
        ("thpscale[nonsense=1]", "unknown parameter"),
        ("thpscale[madvise]", "not key=value"),
        ("thp scale", "expected NAME"),
    ],
)
def test_bad_job_specs(spec, message):
    with pytest.raises(InputError, match=message):
        parse_job_spec(spec)


def test_unknown_job():
    with pytest.raises(NotFoundError, match="no job definition 'nope'"):
        parse_job_spec("nope")


def test_plan_is_resolved_for_the_guest():
    jobs = resolve_jobs(["vm-scalability[test=anon-w-seq]", "stress-highalloc"], 2)
    plan = plan_for(jobs, Settings(cpus=2, mem_mb=1024))
    assert [sj.suite for sj in plan] == ["vm-scalability", "stress-highalloc"]
    assert all(sj.runs == 2 for sj in plan)
    assert plan[0].resolved["NR_TASK"] == 2


def test_runs_must_be_positive():
    with pytest.raises(InputError, match="at least 1"):
        resolve_jobs(None, 0)


def _count(eng, model) -> int:
    with Session(eng) as s:
        return s.scalar(select(func.count()).select_from(model))


def test_submit_stores_once_with_raw_mails(eng):
    mbox = stacks.stack_mbox("compaction-demo")
    sid = submit_series(eng, mbox, jobs=["stress-highalloc"], runs=2)
    assert submit_series(eng, mbox, jobs=["stress-highalloc"], runs=2) == sid
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "new"
        plan = series_runs_store.current(s, sid)
        assert (plan.jobs, plan.runs) == (["stress-highalloc"], 2)
        assert series.mbox == mbox  # the bytes as submitted, outside meta
        assert len(series.patches) == 3
        assert series.tree.default_base == "v6.1-debian"
        assert series.base_ref == "v6.1-debian"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"jobs": ["nope"]}, "no job definition"),
        ({"jobs": ["thpscale[max_threads=0]"]}, "max_threads"),
        ({"runs": 0}, "runs: must be between 1 and 30, not 0"),
        ({"tree": "linux-9.9"}, "unknown tree"),
        ({"cpus": 4, "runner": intake.DISPATCHER}, "cpus: only a series run in this process"),
        ({"max_boots": 0}, "max_boots: must be between 1"),
        ({"colour": "red"}, "colour: no such option"),
    ],
)
def test_submit_rejects_bad_input_before_writing(eng, kwargs, message):
    with pytest.raises(intake.SubmissionErrors, match=message):
        submit_series(eng, stacks.stack_mbox("compaction-demo"), **kwargs)
    assert _count(eng, Series) == 0


def test_submit_rejects_a_non_mbox(eng):
    with pytest.raises(intake.SubmissionErrors, match="^mbox: "):
        submit_series(eng, b"this is not a patch\n", filename="notes.txt")
    assert _count(eng, Series) == 0


def test_mail_from_patch_round_trips(eng):
    """Series stored by other front ends (no raw mails kept) are rebuilt from their rows."""
    mbox = stacks.stack_mbox("compaction-demo")
    sid = submit_series(eng, mbox)
    with Session(eng) as s:
        series = s.get(Series, sid)
        rebuilt = b"\n".join(
            b"From stackbench Mon Sep 17 00:00:00 2001\n" + mail_from_patch(p)
            for p in sorted(series.patches, key=lambda p: p.idx)
        )
        again = parse_mbox(rebuilt, source="rebuilt")
        for p, q in zip(sorted(series.patches, key=lambda p: p.idx), again.patches, strict=True):
            assert (q.subject, q.author_email, q.diff) == (p.subject, p.author_email, p.diff)


def test_eta_scales_with_observed_speed():
    eta = Eta()
    eta.plan("a", 100)
    eta.plan("b", 100)
    assert eta.remaining() == 200
    eta.finish("a", 200)  # twice as slow as estimated
    assert eta.remaining() == pytest.approx(200)


def test_stderr_progress_line():
    buf = io.StringIO()
    StderrProgress(buf)(ProgressEvent("build", 2, 4, "1/3 mm: x", "built (5s)", 65, 190))
    assert buf.getvalue() == "[ 1m05s] build 2/4  1/3 mm: x  built (5s)  (eta 3m10s)\n"


def test_cli_submit_no_wait_and_bad_file(eng, tmp_path, capsys):
    from stackbench.cli import main

    f = tmp_path / "s.mbox"
    f.write_bytes(stacks.stack_mbox("compaction-demo"))
    assert main(["submit", "--mbox", str(f), "--no-wait", "--jobs", "stress-highalloc"]) == 0
    assert re.search(r"series \d+ stored", capsys.readouterr().out)
    assert main(["submit", "--mbox", str(tmp_path / "missing.mbox")]) == 1
    assert "missing.mbox: cannot read" in capsys.readouterr().err
    assert main(["submit", "--mbox", str(f), "--jobs", "thpscale[bogus=1]"]) == 1
    assert "unknown parameter" in capsys.readouterr().err
    assert _count(eng, Series) == 1


GIT_ENV = {
    "GIT_AUTHOR_NAME": "A U Thor",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_COMMITTER_NAME": "C O Mitter",
    "GIT_COMMITTER_EMAIL": "committer@example.org",
}


def _mm_repo(path, content: str) -> str:
    """A git repository holding mm/compaction.c; returns its base commit."""
    from stackbench import proc

    proc.run(["git", "init", "-q", "-b", "main", path])
    (path / "mm").mkdir()
    (path / "mm" / "compaction.c").write_text(content)
    proc.run(["git", "-C", path, "add", "-A"], env=GIT_ENV)
    proc.run(["git", "-C", path, "commit", "-q", "-m", "base"], env=GIT_ENV)
    return proc.run(["git", "-C", path, "rev-parse", "HEAD"]).stdout.strip()


def test_rebuilt_mails_apply_with_git_am(eng, tmp_path):
    """A series stored without its raw mails still applies: rows -> mails -> git am."""
    from stackbench import proc

    env = GIT_ENV
    repo = tmp_path / "repo"
    base = _mm_repo(repo, "int a;\nint b;\n")
    for i, line in enumerate(("int c;\n", "int d;\n"), 1):
        with open(repo / "mm" / "compaction.c", "a") as fh:
            fh.write(line)
        msg = f"mm/compaction: add variable {i}\n\nBecause.\n\nSigned-off-by: A U Thor <author@example.org>"
        proc.run(["git", "-C", repo, "commit", "-q", "-am", msg], env=env)
    want = proc.run(["git", "-C", repo, "rev-parse", "HEAD^{tree}"]).stdout.strip()
    mbox = proc.run(["git", "-C", repo, "format-patch", "--stdout", f"{base}..HEAD"]).stdout
    sid = submit_series(eng, mbox.encode())
    proc.run(["git", "-C", repo, "checkout", "-q", "--detach", base])
    with Session(eng) as s:
        series = s.get(Series, sid)
        for p in sorted(series.patches, key=lambda p: p.idx):
            proc.run(["git", "-C", repo, "am", "-q"], input=mail_from_patch(p), env=env)
    got = proc.run(["git", "-C", repo, "rev-parse", "HEAD^{tree}"]).stdout.strip()
    assert got == want
    subjects = proc.run(["git", "-C", repo, "log", "--format=%s|%an", "-2"]).stdout.split("\n")
    assert subjects[:2] == [
        "mm/compaction: add variable 2|A U Thor",
        "mm/compaction: add variable 1|A U Thor",
    ]


def test_pushed_series_builds_the_commits_as_pushed(eng, tmp_path):
    """A series that came by git push is not re-applied: its commits are fetched from the
    intake repository into the tree, with the pushed shas."""
    from stackbench import proc
    from stackbench.resultsdb import db

    env = GIT_ENV
    tree = tmp_path / "tree"
    base = _mm_repo(tree, "int a;\n")
    pushed = tmp_path / "intake"
    proc.run(["git", "clone", "-q", tree, pushed])
    for i in (1, 2):
        with open(pushed / "mm" / "compaction.c", "a") as fh:
            fh.write(f"int p{i};\n")
        proc.run(["git", "-C", pushed, "commit", "-q", "-am", f"mm/compaction: p{i}"], env=env)
    head = proc.run(["git", "-C", pushed, "rev-parse", "HEAD"]).stdout.strip()
    push = intake.Pushed(repo=pushed, ref=f"refs/for/linux-6.1/{base}", new=head)
    with db.session(eng) as s:
        taken = intake.take(s, intake.Submission(source="push", pushed=push, runner=intake.HERE))
        sid = taken.series.id
        shas = [p.commit_sha for p in taken.parsed.patches]
    assert proc.run(["git", "-C", tree, "cat-file", "-e", head], check=False).returncode != 0
    tasks = _apply(eng, SeriesRun(sid, Settings(), None), tree, base, None)
    assert [t.commit for t in tasks] == [base, *shas]
    assert proc.run(["git", "-C", tree, "cat-file", "-e", head], check=False).returncode == 0
    with Session(eng) as s:
        assert s.get(Series, sid).state != "applying"  # nothing was re-applied


def test_a_kernel_of_no_series_is_recorded_by_the_build_stage(eng, tmp_path):
    """A nightly or bisect kernel goes through the series' build stage: a commit that cannot
    be built gets its build-failed row (no series, the caller's meta) and no series event;
    asking again finds the same row."""
    from stackbench.jobs.executors.build_stage import build_kernel
    from stackbench.kernels import trees
    from stackbench.resultsdb.models import Event, KernelBuild

    repo = tmp_path / "repo"
    repo.mkdir()
    tree = trees.load_tree("linux-6.1")
    missing = "0123456789abcdef" * 2 + "01234567"
    ids = []
    for _ in range(2):
        t = KernelTask(label="", name=missing[:12], commit=missing)
        build_kernel(eng, repo, tree, t, config="tiny-guest", make_jobs=1, meta={"subject": "x"})
        assert t.outcome == "build-failed" and t.error, t
        ids.append(t.build_id)
    assert ids[0] is not None and ids[0] == ids[1]
    with Session(eng) as s:
        row = s.get(KernelBuild, ids[0])
        assert (row.commit, row.status, row.series_id) == (missing, "build-failed", None)
        assert row.config_name == "tiny-guest" and row.meta["subject"] == "x"
        assert row.log
        assert s.scalar(select(func.count()).select_from(Event)) == 0
