"""The shipped stacks: each parses, and they apply (or not) to the real Linux 6.1 files."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from stackbench import gitcmd
from stackbench.errors import NotFoundError
from stackbench.patches import stacks
from stackbench.patches.apply import apply_series, remove_worktree
from stackbench.patches.parser import parse_mbox

TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
ALL = ["broken-apply", "broken-build", "compaction-demo", "hang-boot", "panic-boot"]


def test_list_stacks():
    assert stacks.list_stacks() == ALL


@pytest.mark.parametrize("name", ALL)
def test_every_stack_parses_and_describes_itself(name):
    info = stacks.stack_info(name)
    assert info["tree"] == "linux-6.1"
    assert info["description"]
    series = parse_mbox(stacks.stack_mbox(name), source=name)
    assert len(series.patches) == len(info["expected"])
    for patch in series.patches:
        assert patch.author_email == "demo@stackbench.invalid"
        assert patch.diff.startswith("diff --git a/mm/")
        assert {f.split(" b/")[0][len("diff --git a/") :] for f in _diff_heads(patch.diff)} <= set(
            info["files"]
        )
    # shipped stacks apply to the tree's default base: no base-commit of a foreign repo
    assert series.base_commit is None


def _diff_heads(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line.startswith("diff --git ")]


def test_compaction_demo_has_a_cover_letter_first():
    mbox = stacks.stack_mbox("compaction-demo")
    assert mbox.split(b"\n", 5)[4].startswith(b"Subject: [PATCH 0/3]")
    series = parse_mbox(mbox)
    assert series.title == "mm: compaction and THP fault demo stack"
    assert "deliberate regression" in series.cover_letter
    assert [p.subject for p in series.patches] == [
        "mm/compaction: factor out the compaction defer limit",
        "mm/huge_memory: wake kcompactd for THP faults outside MADV_HUGEPAGE",
        "mm/huge_memory: zero anonymous THPs before charging them",
    ]


def test_unknown_stack():
    with pytest.raises(NotFoundError, match="no shipped stack 'nope' \\(known: broken-apply"):
        stacks.stack_mbox("nope")


@pytest.fixture(scope="module")
def linux_mm(tmp_path_factory):
    """A git repository holding mm/compaction.c and mm/huge_memory.c of Debian's 6.1."""
    if not TARBALL.exists():
        pytest.skip(f"{TARBALL} is absent (Debian package linux-source-6.1)")
    root = tmp_path_factory.mktemp("linux")
    wanted = {f"linux-source-6.1/{f}" for f in ("mm/compaction.c", "mm/huge_memory.c")}
    with tarfile.open(TARBALL) as tar:
        # stream once through the 130 MB archive, keeping only the two files
        for member in tar:
            if member.name in wanted:
                data = tar.extractfile(member).read()
                dest = root / member.name.split("/", 1)[1]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                wanted.discard(member.name)
                if not wanted:
                    break
    assert not wanted, f"not in {TARBALL}: {wanted}"
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "mm"], ["commit", "-q", "-m", "6.1"]):
        subprocess.run(["git", "-C", str(root), *args], env=env, check=True)
    return root


@pytest.mark.parametrize("name", ["compaction-demo", "broken-build", "panic-boot", "hang-boot"])
def test_stack_applies_to_linux_6_1(linux_mm, tmp_path, name):
    series = parse_mbox(stacks.stack_mbox(name), source=name)
    result = apply_series(linux_mm, "main", series.patches, tmp_path / "wt")
    try:
        assert result.ok, result.error
        assert len(result.commits) == len(series.patches)
        # the worktree only checks out what the patches touch: read the result from git
        text = gitcmd.git(linux_mm, "show", f"{result.commits[-1]}:mm/huge_memory.c").stdout
        compaction = gitcmd.git(linux_mm, "show", f"{result.commits[-1]}:mm/compaction.c").stdout
        if name == "compaction-demo":
            # the regression patch: two clear_huge_page() calls in the anonymous THP fault
            fault = text[text.index("static vm_fault_t __do_huge_pmd_anonymous_page") :]
            fault = fault[: fault.index("\n}\n")]
            assert fault.count("clear_huge_page(page, vmf->address, HPAGE_PMD_NR);") == 2
            assert "__GFP_KSWAPD_RECLAIM);\n\n\treturn GFP_TRANSHUGE_LIGHT;" in text
            assert compaction.count("compaction_defer_limit(zone)") == 2
        elif name == "broken-build":
            assert "\t\treturn false\n\n" in compaction
        elif name == "panic-boot":
            assert 'panic("kcompactd: stackbench panic-boot demo' in compaction
        else:
            assert "schedule_timeout_interruptible(HZ);" in compaction
    finally:
        remove_worktree(linux_mm, tmp_path / "wt")


def test_broken_apply_does_not_apply_to_linux_6_1(linux_mm, tmp_path):
    series = parse_mbox(stacks.stack_mbox("broken-apply"), source="broken-apply")
    result = apply_series(linux_mm, "main", series.patches, tmp_path / "wt")
    remove_worktree(linux_mm, tmp_path / "wt")
    assert not result.ok
    assert result.failed_index == 0 and result.commits == []
    assert "mm/compaction.c: patch does not apply" in result.error
