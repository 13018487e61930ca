"""apply_series with real git am on a small repository made in tmp_path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.patchrepo import ENV, LIB, sh

from stackbench.patches.apply import apply_series, clean_am_error, remove_worktree
from stackbench.patches.parser import parse_mbox


@pytest.fixture
def repo(tmp_path):
    """A repository whose main branch is the base, and the mbox of three patches on it."""
    r = tmp_path / "repo"
    sh(tmp_path, "init", "-q", "-b", "main", str(r))
    (r / "lib.c").write_text(LIB)
    (r / "README").write_text("first\n")
    sh(r, "add", ".")
    sh(r, "commit", "-q", "-m", "base")
    sh(r, "checkout", "-q", "-b", "topic")
    for old, new, msg in [("a = 1", "a = 10", "raise a"), ("b = 2", "b = 20", "raise b")]:
        path = r / "lib.c"
        path.write_text(path.read_text().replace(old, new))
        sh(r, "commit", "-q", "-a", "-m", f"lib: {msg}")
    (r / "README").write_text("first\nsecond\n")
    sh(r, "commit", "-q", "-a", "-m", "README: add a line")
    mbox = subprocess.run(
        ["git", "-C", str(r), "format-patch", "--stdout", "--thread", "main..topic"],
        env=ENV,
        capture_output=True,
        check=True,
    ).stdout
    sh(r, "checkout", "-q", "main")
    sh(r, "branch", "-q", "-D", "topic")
    return r, mbox


def test_clean_apply_records_one_commit_per_patch(repo, tmp_path):
    r, mbox = repo
    series = parse_mbox(mbox, source="topic")
    before = sh(r, "for-each-ref")
    wt = tmp_path / "wt"
    result = apply_series(r, "main", series.patches, wt)
    assert result.ok, result.error
    assert result.base_sha == sh(r, "rev-parse", "main")
    assert len(result.commits) == 3
    # the commits form a chain on the base, with the mail's author and our committer
    assert sh(r, "rev-parse", f"{result.commits[2]}~3") == result.base_sha
    assert sh(r, "log", "-1", "--format=%s|%an|%cn", result.commits[0]) == (
        "lib: raise a|Ann Author|stackbench"
    )
    assert (wt / "lib.c").read_text() == LIB.replace("a = 1;", "a = 10;").replace("b = 2", "b = 20")
    # the repository itself is untouched: same refs, clean checkout of main
    assert sh(r, "for-each-ref") == before
    assert sh(r, "status", "--porcelain") == ""
    remove_worktree(r, wt)
    assert not wt.exists()
    assert str(wt) not in sh(r, "worktree", "list")


def test_apply_is_reproducible(repo, tmp_path):
    r, mbox = repo
    patches = parse_mbox(mbox).patches
    first = apply_series(r, "main", patches, tmp_path / "a")
    second = apply_series(r, "main", patches, tmp_path / "b")
    assert first.commits == second.commits


def test_conflicting_patch_reports_it_and_aborts(repo, tmp_path):
    r, mbox = repo
    patches = parse_mbox(mbox).patches
    # the base moves under patch 2: its context "int b = 2;" is gone
    (r / "lib.c").write_text(LIB.replace("b = 2", "b = 7"))
    sh(r, "commit", "-q", "-a", "-m", "conflicting change")
    base = sh(r, "rev-parse", "HEAD")
    before = sh(r, "for-each-ref")
    wt = tmp_path / "wt"
    result = apply_series(r, "main", patches, wt, ref="refs/stackbench/test")
    assert not result.ok
    assert result.failed_index == 1
    assert result.base_sha == base
    assert len(result.commits) == 1
    assert "patch does not apply" in result.error
    assert "lib.c" in result.error
    assert "\n" not in result.error and "hint:" not in result.error
    # the am was aborted: the worktree is clean at the last good commit
    assert sh(wt, "rev-parse", "HEAD") == result.commits[0]
    assert sh(wt, "status", "--porcelain") == ""
    assert not (Path(sh(wt, "rev-parse", "--git-dir")) / "rebase-apply").exists()
    # nothing else changed except the requested ref, which keeps the applied commit
    after = sh(r, "for-each-ref").splitlines()
    assert after == [*before.splitlines(), f"{result.commits[0]} commit\trefs/stackbench/test"]
    assert sh(r, "rev-parse", "refs/stackbench/test") == result.commits[0]
    remove_worktree(r, wt)
    assert not wt.exists()


def test_unknown_base_is_a_failed_result(repo, tmp_path):
    r, mbox = repo
    result = apply_series(r, "no-such-branch", parse_mbox(mbox).patches, tmp_path / "wt")
    assert not result.ok and result.failed_index is None
    assert "no-such-branch" in result.error
    assert not (tmp_path / "wt").exists()


def test_stale_worktree_is_replaced_but_foreign_dirs_are_refused(repo, tmp_path):
    r, mbox = repo
    patches = parse_mbox(mbox).patches
    wt = tmp_path / "wt"
    apply_series(r, "main", patches[:1], wt)
    # an interrupted run left wt behind: the next apply replaces it
    result = apply_series(r, "main", patches, wt)
    assert result.ok and len(result.commits) == 3
    other = tmp_path / "precious"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(Exception, match="not empty"):
        apply_series(r, "main", patches, other)
    assert (other / "keep.txt").read_text() == "mine"
    remove_worktree(r, wt)


def test_clean_am_error():
    out = (
        "Applying: lib: raise b\n"
        "error: patch failed: lib.c:1\n"
        "error: lib.c: patch does not apply\n"
        "Patch failed at 0001 lib: raise b\n"
        "hint: Use 'git am --show-current-patch=diff' to see the failed patch\n"
        'When you have resolved this problem, run "git am --continue".\n'
    )
    assert clean_am_error(out) == "patch failed: lib.c:1; lib.c: patch does not apply"
