"""Apply a series with ``git am`` in a fresh worktree, one commit per patch.

Patches only ever touch a detached worktree of the tree's repository: the repository's
branches, index and checkout are never changed, and a failed ``git am`` is aborted so the
worktree is left at the last patch that applied.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from stackbench import gitcmd
from stackbench.errors import StackbenchError
from stackbench.patches.parser import ParsedPatch

# options that a user's git config could otherwise change (am.threeWay, am.keepcr...)
_AM_ARGS = (
    "-c",
    "am.threeWay=false",
    "-c",
    "am.keepcr=false",
    "-c",
    "am.messageid=false",
    "-c",
    "commit.gpgSign=false",
)
_NOISE = re.compile(r"^(hint:|Applying:|When you have resolved|If you prefer to skip|To restore)")


@dataclass
class ApplyResult:
    base_sha: str
    commits: list[str]
    ok: bool
    # 0-based position (in the list given to apply_series) of the patch that did not apply
    failed_index: int | None = None
    error: str = ""
    log: str = field(default="", repr=False)


def apply_series(
    repo: Path,
    base: str,
    patches: list[ParsedPatch],
    workdir: Path,
    *,
    ref: str | None = None,
    timeout: float = 600,
) -> ApplyResult:
    """``git am`` each patch's raw mail onto ``base`` in a new detached worktree at
    ``workdir`` (a sparse one: only the files the patches touch are checked out).

    Returns the commit of every applied patch. When a patch does not apply, ``git am`` is
    aborted and the result names it with git's message; an unknown ``base`` is reported the
    same way (``failed_index`` None). With ``ref``, that ref is pointed at the last applied
    commit so the commits outlive the worktree (and ``git gc``).
    """
    repo = Path(repo)
    workdir = Path(workdir)
    base_sha = gitcmd.rev_parse(repo, base)
    if base_sha is None:
        return ApplyResult(
            base_sha="",
            commits=[],
            ok=False,
            error=f"base {base!r} is not a commit in {repo}",
        )
    _prepare_workdir(repo, workdir)
    _sparse_worktree(repo, workdir, base_sha, patches)

    commits: list[str] = []
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="stackbench-am-") as tmp:
        for pos, patch in enumerate(patches):
            mail = Path(tmp) / f"{pos + 1:04d}.mbox"
            mail.write_bytes(_as_mbox(patch.raw))
            out = gitcmd.git(
                workdir,
                *_AM_ARGS,
                "am",
                "--quiet",
                "--patch-format=mbox",
                "--committer-date-is-author-date",
                mail,
                check=False,
                timeout=timeout,
            )
            log.append(out.stdout)
            if out.returncode != 0:
                gitcmd.git(workdir, "am", "--abort", check=False)
                if ref and commits:
                    gitcmd.update_ref(repo, ref, commits[-1])
                return ApplyResult(
                    base_sha=base_sha,
                    commits=commits,
                    ok=False,
                    failed_index=pos,
                    error=clean_am_error(out.stdout),
                    log="".join(log),
                )
            head = gitcmd.rev_parse(workdir, "HEAD")
            if head is None:  # cannot happen after a successful am; keep the error readable
                raise StackbenchError(f"{workdir}: no HEAD after applying patch {pos + 1}")
            commits.append(head)
    if ref and commits:
        gitcmd.update_ref(repo, ref, commits[-1])
    return ApplyResult(base_sha=base_sha, commits=commits, ok=True, log="".join(log))


_DIFF_PATHS = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|(?:---|\+\+\+) [ab]/(\S+))$", re.M)


def touched_paths(patches: list[ParsedPatch]) -> list[str]:
    """Every path the patches' diffs name (old and new names of renames included)."""
    paths: set[str] = set()
    for patch in patches:
        text = patch.raw.decode(errors="replace") if patch.raw else patch.diff
        for m in _DIFF_PATHS.finditer(text):
            paths.update(p for p in m.groups() if p)
    return sorted(paths)


def _sparse_worktree(repo: Path, workdir: Path, base_sha: str, patches: list[ParsedPatch]) -> None:
    """A worktree at ``base_sha`` with only the files the patches touch checked out: a kernel
    tree has ~80,000 files and a full checkout dominated the time to apply a series."""
    paths = touched_paths(patches)
    if not paths:
        gitcmd.git(repo, "worktree", "add", "--detach", "--quiet", workdir, base_sha)
        return
    gitcmd.git(repo, "worktree", "add", "--detach", "--no-checkout", "--quiet", workdir, base_sha)
    # non-cone patterns anchored at the root: exactly these files, new ones included
    patterns = "".join(f"/{p}\n" for p in paths)
    gitcmd.git(workdir, "sparse-checkout", "set", "--no-cone", "--stdin", input=patterns)
    gitcmd.git(workdir, "read-tree", "-mu", "HEAD")


def clean_am_error(output: str) -> str:
    """git am's reason on one line: its error/fatal lines without hints and progress."""
    reasons = []
    for line in output.splitlines():
        line = line.strip()
        if not line or _NOISE.match(line):
            continue
        for prefix in ("error: ", "fatal: "):
            if line.startswith(prefix):
                line = line[len(prefix) :]
        if line.startswith("Patch failed at "):
            continue
        if line.startswith("Use 'git am --show-current-patch"):
            continue
        reasons.append(line)
    text = "; ".join(dict.fromkeys(reasons)) or "git am failed"
    return text if len(text) <= 500 else text[:497] + "..."


def remove_worktree(repo: Path, workdir: Path) -> None:
    """Remove a worktree made by :func:`apply_series` (also one half-removed earlier)."""
    repo = Path(repo)
    workdir = Path(workdir)
    if workdir.exists():
        gitcmd.git(repo, "worktree", "remove", "--force", "--force", workdir, check=False)
    if workdir.exists() and _is_worktree_of(repo, workdir):
        shutil.rmtree(workdir)
    gitcmd.git(repo, "worktree", "prune", check=False)


def _prepare_workdir(repo: Path, workdir: Path) -> None:
    if not workdir.exists():
        workdir.parent.mkdir(parents=True, exist_ok=True)
        return
    if _is_worktree_of(repo, workdir):
        # left behind by an interrupted run
        remove_worktree(repo, workdir)
        return
    if any(workdir.iterdir()):
        raise StackbenchError(f"{workdir}: exists and is not empty; cannot apply a series there")
    workdir.rmdir()


def _is_worktree_of(repo: Path, workdir: Path) -> bool:
    out = gitcmd.git(repo, "worktree", "list", "--porcelain", check=False)
    target = workdir.resolve()
    for line in out.stdout.splitlines():
        if line.startswith("worktree ") and Path(line[len("worktree ") :]).resolve() == target:
            return True
    return False


def _as_mbox(raw: bytes) -> bytes:
    # git am recognises an mbox by its "From " line; a mail saved without one gets one
    if raw.startswith(b"From "):
        return raw
    return b"From stackbench Mon Sep 17 00:00:00 2001\n" + raw
