"""The functions a patch changes, read from the diff against the trees it goes between
(stackbench.patches.diffparse.changed_functions): the demo stack's commits applied with real
``git am`` to the Linux 6.1 sources of the kernel test cache, and planted patches (a
comment-only edit, a Kconfig-only change, a deleted function)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.kernelkit import cache_dir

from stackbench.patches import diffparse, stacks

FILES = ("mm/compaction.c", "mm/huge_memory.c")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


@pytest.fixture
def mm_repo(tmp_path: Path) -> Path:
    """A git repository holding the two mm files of the cached Linux 6.1 tree."""
    linux = cache_dir() / "trees" / "linux-6.1"
    if not (linux / "mm" / "compaction.c").is_file():
        pytest.skip(f"no Linux 6.1 tree in the kernel test cache ({linux})")
    repo = tmp_path / "linux"
    repo.mkdir()
    _git(repo, "init", "-q")
    for f in FILES:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(_git(linux, "show", f"HEAD:{f}"))
    (repo / "Kconfig").write_text("config X\n\tbool\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


def _reader(repo: Path, rev: str):
    def read(path: str) -> str | None:
        try:
            return _git(repo, "show", f"{rev}:{path}")
        except subprocess.CalledProcessError:
            return None

    return read


def _changed(repo: Path, patch: str) -> list[diffparse.ChangedFunction]:
    return diffparse.changed_functions(patch, _reader(repo, "HEAD~1"), _reader(repo, "HEAD"))


def _commit_edit(repo: Path, path: str, old: str, new: str) -> str:
    f = repo / path
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    _git(repo, "commit", "-qam", "planted")
    return _git(repo, "format-patch", "-1", "--stdout")


def test_the_demo_stack_names_the_functions_each_commit_changes(mm_repo: Path) -> None:
    mbox = stacks.stack_dir("compaction-demo")
    patches = sorted(p for p in mbox.glob("000[1-9]-*.patch"))
    got = []
    for p in patches:
        _git(mm_repo, "am", "-q", str(p))
        got.append({(c.name, c.change, c.kind) for c in _changed(mm_repo, p.read_text())})
    # 1/3's first hunk header names defer_compaction, which it does not change: the new helper
    # (static inline) and its two users are what the bodies say
    assert got[0] == {
        ("compaction_defer_limit", "added", "static inline"),
        ("compaction_deferred", "modified", "static"),
        ("compaction_restarting", "modified", "static"),
    }
    # 2/3's first hunk only edits the comment above the function
    assert got[1] == {("vma_thp_gfp_mask", "modified", "")}
    assert got[2] == {("__do_huge_pmd_anonymous_page", "modified", "static")}


def test_a_comment_only_patch_changes_no_function(mm_repo: Path) -> None:
    patch = _commit_edit(
        mm_repo, "mm/compaction.c",
        "\tunsigned long defer_limit = 1UL << zone->compact_defer_shift;\n",
        "\t/* how many attempts to skip */\n"
        "\tunsigned long defer_limit = 1UL <<   zone->compact_defer_shift; /* shift */\n",
    )  # fmt: skip
    assert _changed(mm_repo, patch) == []


def test_a_non_code_patch_changes_no_function(mm_repo: Path) -> None:
    patch = _commit_edit(mm_repo, "Kconfig", "\tbool\n", '\tbool "X"\n')
    assert _changed(mm_repo, patch) == []


def test_a_removed_function_is_named_removed(mm_repo: Path) -> None:
    text = (mm_repo / "mm/compaction.c").read_text()
    start = text.index("static bool compaction_restarting(")
    end = text.index("\n}\n", start) + 3
    patch = _commit_edit(mm_repo, "mm/compaction.c", text[start:end], "")
    names = {(c.name, c.change) for c in _changed(mm_repo, patch)}
    assert ("compaction_restarting", "removed") in names


def test_without_the_trees_the_hunk_headers_name_the_functions() -> None:
    diff = (
        "diff --git a/mm/x.c b/mm/x.c\n--- a/mm/x.c\n+++ b/mm/x.c\n"
        "@@ -10,3 +10,3 @@ static int foo(struct zone *zone)\n a\n-b\n+c\n d\n-- \n2.39.5\n"
    )
    got = diffparse.changed_functions(diff, lambda p: None, lambda p: None)
    assert [(c.name, c.path) for c in got] == [("foo", "mm/x.c")]


def test_the_callers_of_a_function_the_compiler_may_fold_in(mm_repo: Path) -> None:
    """A static function called once is inlined at -Os (tinyconfig's): its calls are counted
    at its callers, which the file names (comments do not count as calls)."""
    compaction = (mm_repo / "mm/compaction.c").read_text()
    huge = (mm_repo / "mm/huge_memory.c").read_text()
    assert diffparse.callers(compaction, "compaction_restarting") == ["compact_zone"]
    assert diffparse.callers(huge, "__do_huge_pmd_anonymous_page") == ["do_huge_pmd_anonymous_page"]
    names = {s.name for s in diffparse.function_spans(compaction)}
    assert "thresholds" not in names  # a comment line above a function is no declaration
