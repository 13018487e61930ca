"""Helpers and fixtures for the lifecycle tests (tests/jobs/driver/test_lifecycle*.py; no tests here):
a small kernel tree with a two-patch series, and waiting for a series to finish."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Series

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Alice Dev",
    "GIT_AUTHOR_EMAIL": "alice.dev@example.org",
    "GIT_COMMITTER_NAME": "Alice Dev",
    "GIT_COMMITTER_EMAIL": "alice.dev@example.org",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def wait_for(what: str, check, timeout: float = 240.0, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"gave up waiting for {what}")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    p = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert p.returncode == 0, f"git {args}: {p.stdout}{p.stderr}"
    return p.stdout.strip()


def tiny_tree(root: Path) -> tuple[Path, Path, Path]:
    """A small kernel tree ``tiny`` under ROOT (a git repository with a tag ``v0``), a clone
    with two mm patches on top, and the folder of tree definitions naming it.

    testkit/faultkit.tiny_tree makes the same tree for the supervisor test and the chaos
    bench, but its commits are the Fault Kit's: the lifecycle and list tests check that the
    patches' From: is alice.dev's, so this one commits with GIT_ENV above."""
    repo = root / "tiny"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "mm").mkdir()
    (repo / "mm" / "compaction.c").write_text("int compaction;\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "v0")
    work = root / "work"
    git(root, "clone", "-q", str(repo), str(work))
    for i in (1, 2):
        with open(work / "mm" / "compaction.c", "a") as fh:
            fh.write(f"int step{i};\n")
        git(work, "commit", "-q", "-am", f"mm/compaction: step {i}\n\nBecause {i}.")
    defs = root / "trees"
    defs.mkdir()
    (defs / "tiny.yaml").write_text(
        f"name: tiny\ndescription: test tree\nsource:\n  path: {repo}\ndefault_base: v0\n"
    )
    return repo, work, defs


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """The tiny tree, and a clone with two mm patches on top, as STACKBENCH_TREES; (tree
    repo, clone, base sha)."""
    repo, work, defs = tiny_tree(tmp_path)
    monkeypatch.setenv("STACKBENCH_TREES", str(defs))
    return repo, work, git(repo, "rev-parse", "v0")


def report_mail(s: Session, sid: int) -> dict | None:
    """The series' report mail note (its id and recipients, or why none), None before."""
    from stackbench.resultsdb import series_runs_store

    attempt = series_runs_store.current(s, sid)
    return attempt.report_mail if attempt is not None else None


def finished(eng, sid: int) -> Series | None:
    """The series once it ended and its report mail was queued (or said why not)."""
    with Session(eng) as s:
        x = s.get(Series, sid)
        if x is None or x.state not in ("done", "failed") or report_mail(s, sid) is None:
            return None
        list(x.patches)  # loaded for the caller
        s.expunge_all()
        return x
