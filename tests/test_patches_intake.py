"""git-push intake: a bare repository with stackbench's hooks and real `git push`es."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.errors import InputError
from stackbench.patches import intake
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.models import Series, Tree

ENV = {
    "GIT_AUTHOR_NAME": "Pat Pusher",
    "GIT_AUTHOR_EMAIL": "pat@example.org",
    "GIT_COMMITTER_NAME": "Pat Pusher",
    "GIT_COMMITTER_EMAIL": "pat@example.org",
    "GIT_AUTHOR_DATE": "2024-03-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-03-01T12:00:00+00:00",
}


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        check=check,
    )


@pytest.mark.parametrize(
    "ref, expected",
    [
        ("refs/for/linux-6.1/main", ("linux-6.1", "main")),
        ("refs/for/mm/mm-stable", ("mm", "mm-stable")),
        ("refs/for/linux-6.1/origin/v6.1", ("linux-6.1", "origin/v6.1")),
    ],
)
def test_parse_push_ref(ref, expected):
    assert intake.parse_push_ref(ref) == expected


@pytest.mark.parametrize(
    "ref, message",
    [
        ("refs/heads/x", "only pushes to refs/for/<tree>/<base> are accepted"),
        ("refs/tags/v1", "only pushes to refs/for/<tree>/<base> are accepted"),
        ("refs/for/linux-6.1", "missing base"),
        ("refs/for//main", "missing tree"),
        ("refs/for/linux-6.1/a..b", "invalid base"),
        ("refs/for/linux-6.1/-x", "invalid base"),
        ("refs/for/.hidden/main", "invalid tree name"),
    ],
)
def test_parse_push_ref_rejects(ref, message):
    with pytest.raises(InputError, match=message.replace("<", ".").replace(">", ".")):
        intake.parse_push_ref(ref)


@pytest.fixture
def setup(eng, tmp_path, monkeypatch):
    """A developer's repository (main + two commits on topic) and the bare intake
    repository cloned from it (so it has the base), with stackbench's hooks."""
    monkeypatch.setenv("STACKBENCH_URL", "http://stackbench.example")
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    (work / "mm.c").write_text("int compaction = 1;\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "base")
    bare = tmp_path / "intake.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(work, "checkout", "-q", "-b", "topic")
    for n in (2, 3):
        (work / "mm.c").write_text(f"int compaction = {n};\n")
        git(work, "commit", "-q", "-a", "-m", f"mm: compaction {n}", "-m", "Why it helps.")
    hooks = intake.install_hook(
        bare, [sys.executable, "-m", "stackbench", "intake-push"], env={"STACKBENCH_HOOK": "1"}
    )
    assert [h.name for h in hooks] == ["pre-receive", "post-receive"]
    assert "'STACKBENCH_HOOK': '1'" in hooks[0].read_text()
    with Session(eng) as s, s.begin():
        s.add(Tree(name="linux-6.1", default_base="main"))
    return work, bare


def test_push_to_refs_for_creates_a_series(eng, setup):
    work, bare = setup
    push = git(work, "push", str(bare), "topic:refs/for/linux-6.1/main", check=False)
    assert push.returncode == 0, push.stderr
    assert "remote: stackbench: series " in push.stderr
    assert "remote: stackbench: http://stackbench.example/series/" in push.stderr

    topic = git(work, "rev-list", "--reverse", "main..topic").stdout.split()
    main = git(work, "rev-parse", "main").stdout.strip()
    with Session(eng) as s:
        series = s.scalars(select(Series)).one()
        assert series.source == "push"
        assert series.state == "applied"
        assert series.tree.name == "linux-6.1"
        assert series.base_ref == "main" and series.base_commit == main
        assert series.title == "mm: compaction 2"
        assert series.push_head == topic[-1] and series.push_repo == str(bare.resolve())
        assert "push" not in series.meta
        assert [(p.idx, p.total, p.subject) for p in series.patches] == [
            (1, 2, "mm: compaction 2"),
            (2, 2, "mm: compaction 3"),
        ]
        assert [p.commit_sha for p in series.patches] == topic
        assert series.patches[0].author == "Pat Pusher"
        assert series.patches[0].body.startswith("Why it helps.")
        sid = series.id
    assert f"series {sid}: 2 patch(es) on main" in push.stderr
    # the commits are kept under the series; refs/for/ is free for the next push
    refs = git(bare, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    assert f"refs/stackbench/series/{sid} {topic[-1]}" in refs
    assert "refs/for/" not in refs

    # pushing the same commits again finds the same series
    again = git(work, "push", str(bare), "topic:refs/for/linux-6.1/main", check=False)
    assert again.returncode == 0, again.stderr
    assert f"stackbench: series {sid}:" in again.stderr
    with Session(eng) as s:
        assert len(s.scalars(select(Series)).all()) == 1


def test_push_options_set_jobs_and_runs(eng, setup):
    work, bare = setup
    push = git(
        work,
        "push",
        "-o",
        "runs=5",
        "-o",
        "jobs=thpscale,vm-scalability[test=anon-w-seq,runtime=5s]",
        str(bare),
        "topic:refs/for/linux-6.1/main",
        check=False,
    )
    assert push.returncode == 0, push.stderr
    with Session(eng) as s:
        series = s.scalars(select(Series)).one()
        plan = series_runs_store.current(s, series.id)
        assert plan.runs == 5 and "runs" not in series.meta
        assert plan.jobs == ["thpscale", "vm-scalability[test=anon-w-seq,runtime=5s]"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["topic:refs/heads/x"], "only pushes to refs/for/<tree>/<base> are accepted"),
        (["topic:refs/for/no-such-tree/main"], "unknown tree (known: linux-6.1)"),
        (["topic:refs/for/linux-6.1/no-such-base"], "base 'no-such-base' is not a branch"),
        (["main:refs/for/linux-6.1/main"], "adds no commits to 'main'"),
        (["-o", "color=red", "topic:refs/for/linux-6.1/main"], "color: no such option"),
        # the same validation as the web form, the API and the CLI
        (["-o", "runs=31", "topic:refs/for/linux-6.1/main"], "runs: must be between 1 and 30"),
        (["-o", "jobs=no-such-job", "topic:refs/for/linux-6.1/main"], "no job definition"),
        (
            ["-o", "jobs=thpscale[nope=1]", "topic:refs/for/linux-6.1/main"],
            "jobs: job 'thpscale[nope=1]'",
        ),
    ],
)
def test_rejected_pushes_change_nothing(eng, setup, args, message):
    work, bare = setup
    before = git(bare, "for-each-ref").stdout
    push = git(work, "push", *args[:-1], str(bare), args[-1], check=False)
    assert push.returncode != 0
    assert "pre-receive hook declined" in push.stderr
    assert "remote: stackbench: error: " in push.stderr
    assert message in push.stderr
    assert git(bare, "for-each-ref").stdout == before
    with Session(eng) as s:
        assert s.scalars(select(Series)).all() == []


def test_series_from_push_without_hooks(setup):
    work, _bare = setup
    head = git(work, "rev-parse", "topic").stdout.strip()
    s = intake.series_from_push(work, "linux-6.1", "main", head)
    assert [p.subject for p in s.patches] == ["mm: compaction 2", "mm: compaction 3"]
    assert s.patches[1].commit_sha == head
    assert s.base_commit == git(work, "rev-parse", "main").stdout.strip()
    with pytest.raises(InputError, match="not an ancestor"):
        intake.series_from_push(
            work, "linux-6.1", "topic", git(work, "rev-parse", "main").stdout.strip()
        )


def test_build_tree_fetches_the_pushed_commits(eng, setup, tmp_path):
    from stackbench import gitcmd

    work, bare = setup
    push = git(work, "push", str(bare), "topic:refs/for/linux-6.1/main", check=False)
    assert push.returncode == 0, push.stderr
    with Session(eng) as s:
        series = s.scalars(select(Series)).one()
        head, sid = series.push_head, series.id
    # the kernel tree is another repository: it copies the series' commits from the intake
    tree = tmp_path / "tree.git"
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(bare), str(tree))
    assert git(tree, "cat-file", "-e", head, check=False).returncode != 0
    gitcmd.fetch_commit(tree, bare, head, f"refs/stackbench/series/{sid}")
    assert git(tree, "rev-parse", f"refs/stackbench/series/{sid}").stdout.strip() == head


def test_the_refusal_suggests_a_push_that_is_accepted(eng, setup, tmp_path, monkeypatch):
    """The intake the server makes is empty: no tags, no HEAD. The refusal's own example
    (HEAD:refs/for/linux-6.1/v6.1-debian) and a push to refs/for/linux-6.1/HEAD name the
    base by the tree's tag and the tree's HEAD, which are looked up in the tree's
    repository."""
    import re

    work, _cloned = setup
    tree_repo = tmp_path / "linux-6.1"
    git(tmp_path, "clone", "-q", "--branch", "main", str(work), str(tree_repo))
    git(tree_repo, "tag", "v6.1-debian")
    defs = tmp_path / "trees"
    defs.mkdir()
    (defs / "linux-6.1.yaml").write_text(
        f"name: linux-6.1\nsource:\n  path: {tree_repo}\ndefault_base: v6.1-debian\n"
    )
    monkeypatch.setenv("STACKBENCH_TREES", str(defs))
    bare = tmp_path / "empty-intake.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    intake.install_hook(bare, [sys.executable, "-m", "stackbench", "intake-push"])
    git(work, "checkout", "-q", "topic")

    refused = git(work, "push", str(bare), "HEAD:refs/heads/topic", check=False)
    assert refused.returncode != 0
    suggested = re.search(r"e\.g\. git push <url> (\S+)", refused.stderr).group(1)
    assert suggested == "HEAD:refs/for/linux-6.1/v6.1-debian"
    main = git(work, "rev-parse", "main").stdout.strip()
    for refspec, base_ref in [(suggested, "v6.1-debian"), ("HEAD:refs/for/linux-6.1/HEAD", main)]:
        push = git(work, "push", str(bare), refspec, check=False)
        assert push.returncode == 0, push.stderr
        assert "patch(es) on " in push.stderr
        with Session(eng) as s:
            series = s.scalars(select(Series).order_by(Series.id.desc())).first()
            assert (series.base_ref, series.base_commit) == (base_ref, main)
            assert len(series.patches) == 2

    # a base the tree names but the push does not contain: say so
    git(tree_repo, "commit", "-q", "--allow-empty", "-m", "later")
    git(tree_repo, "tag", "v6.2")
    push = git(work, "push", str(bare), "HEAD:refs/for/linux-6.1/v6.2", check=False)
    assert push.returncode != 0
    assert "base 'v6.2' is " in push.stderr
    assert "in tree linux-6.1, which the pushed history does not contain: rebase onto it" in (
        push.stderr
    )
    push = git(work, "push", str(bare), "HEAD:refs/for/linux-6.1/nope", check=False)
    assert "base 'nope' is not a branch, tag or commit of tree linux-6.1 or of the push: " in (
        push.stderr
    )
