"""Apply a series with ``git am`` in a fresh worktree, one commit per patch.

Patches only ever touch a detached worktree of the tree's repository: the repository's
branches, index and checkout are never changed, and a failed ``git am`` is aborted so the
worktree is left at the last patch that applied.

What is built is what is shown: each mail goes to ``git am`` as an mboxrd of its own, so git
cannot split it into two commits, and each commit must be its parent plus the diff the
parser found (the one the pages show), byte for byte in the tree; otherwise the series stops
there with the reason.
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
    "-c",
    "apply.whitespace=nowarn",
)
_MBOXRD_FROM = b"From mboxrd@z Thu Jan  1 00:00:00 1970\n"
_QUOTED_FROM = re.compile(rb"^(>*From )", re.MULTILINE)
_NOISE = re.compile(r"^(hint:|Applying:|When you have resolved|If you prefer to skip|To restore)")


@dataclass
class ApplyResult:
    base_sha: str
    commits: list[str]
    ok: bool
    # 0-based position (in the list given to apply_series) of the patch that did not apply
    failed_index: int | None = None
    error: str = ""
    # the patch applied, but not as the diff shown: the series is refused, not broken
    not_as_shown: bool = False
    log: str = field(default="", repr=False)
    # per applied commit, what git made of the mail: author, author_email, date, subject
    committed: list[dict[str, str]] = field(default_factory=list)


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
    committed: list[dict[str, str]] = []
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="stackbench-am-") as tmp:
        for pos, patch in enumerate(patches):
            mail = Path(tmp) / f"{pos + 1:04d}.mbox"
            mail.write_bytes(as_mboxrd(patch.raw))
            out = gitcmd.git(
                workdir,
                *_AM_ARGS,
                "am",
                "--quiet",
                "--patch-format=mboxrd",
                "--committer-date-is-author-date",
                mail,
                check=False,
                timeout=timeout,
            )
            log.append(out.stdout)
            error = "" if out.returncode == 0 else clean_am_error(out.stdout)
            not_as_shown = False
            if out.returncode != 0:
                gitcmd.git(workdir, "am", "--abort", check=False)
            else:
                parent = commits[-1] if commits else base_sha
                error = _not_as_shown(workdir, parent, patch, Path(tmp) / "check.index")
                not_as_shown = bool(error)
            if error:
                if ref and commits:
                    gitcmd.update_ref(repo, ref, commits[-1])
                return ApplyResult(
                    base_sha=base_sha,
                    commits=commits,
                    ok=False,
                    failed_index=pos,
                    error=error,
                    not_as_shown=not_as_shown,
                    log="".join(log),
                    committed=committed,
                )
            head = gitcmd.rev_parse(workdir, "HEAD")
            if head is None:  # cannot happen after a successful am; keep the error readable
                raise StackbenchError(f"{workdir}: no HEAD after applying patch {pos + 1}")
            commits.append(head)
            committed.append(commit_facts(workdir, head))
    if ref and commits:
        gitcmd.update_ref(repo, ref, commits[-1])
    return ApplyResult(
        base_sha=base_sha, commits=commits, ok=True, log="".join(log), committed=committed
    )


def commit_facts(repo: Path, commit: str) -> dict[str, str]:
    """Author, author_email, date (ISO 8601) and subject of a commit, as git has them."""
    out = gitcmd.git(repo, "log", "-1", "--no-mailmap", "--format=%an%x00%ae%x00%aI%x00%s", commit)
    author, email, date, subject = (out.stdout.rstrip("\n").split("\0") + ["", "", "", ""])[:4]
    return {"author": author, "author_email": email, "date": date, "subject": subject}


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


def as_mboxrd(raw: bytes) -> bytes:
    """One mail as an mboxrd that ``git am --patch-format=mboxrd`` reads back as exactly
    that mail: its own ``From `` line replaced, every ``From `` line of its text quoted."""
    if raw.startswith(b"From "):
        raw = raw.split(b"\n", 1)[1] if b"\n" in raw else b""
    return _MBOXRD_FROM + _QUOTED_FROM.sub(rb">\1", raw)


def _not_as_shown(workdir: Path, parent: str, patch: ParsedPatch, index: Path) -> str:
    """Why the commit ``git am`` just made is not ``parent`` plus the patch's shown diff;
    empty when it is. The shown diff is applied on its own to ``parent``'s tree in a
    scratch index and the two trees compared."""
    made = gitcmd.rev_list(workdir, f"{parent}..HEAD")
    if len(made) != 1:
        return f"git am made {len(made)} commits of one mail; the patch shown is one"
    env = {"GIT_INDEX_FILE": str(index)}
    index.unlink(missing_ok=True)
    gitcmd.git(workdir, "read-tree", parent, env=env)
    out = gitcmd.git(
        workdir,
        "apply",
        "--cached",
        "--whitespace=nowarn",
        "-",
        env=env,
        input=patch.diff_bytes(),
        check=False,
    )
    if out.returncode != 0:
        return f"the diff shown does not apply on its own: {clean_am_error(out.stdout)}"
    shown = gitcmd.git(workdir, "write-tree", env=env).stdout.strip()
    built = gitcmd.git(workdir, "diff", "--name-only", shown, "HEAD", "--").stdout.split()
    if built:
        listed = ", ".join(built[:5]) + (f" and {len(built) - 5} more" if len(built) > 5 else "")
        return f"git am built something other than the diff shown: {listed} differ"
    return ""
