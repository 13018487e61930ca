"""The git operations stackbench needs, through :func:`stackbench.proc.run`: the one git
module of patches (``git am``, the intake), kernels (trees, build worktrees) and jobs (suite
sources, bisect ranges).

One wrapper, :func:`git`, runs ``git -C REPO ...`` with an environment that works on a
fresh machine: a fixed committer (no ``user.email`` needed), no prompts, and the C locale so
git's messages can be quoted to users and matched in tests.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from stackbench import proc

# commits made by `git am` carry the mail's author and this committer; with
# --committer-date-is-author-date that makes applying the same series on the same base give
# the same shas every time, so kernel builds cached by commit are reused
COMMITTER_NAME = "stackbench"
COMMITTER_EMAIL = "stackbench@stackbench.invalid"
ZERO_SHA = "0" * 40
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def git_env() -> dict[str, str]:
    return {
        "GIT_COMMITTER_NAME": COMMITTER_NAME,
        "GIT_COMMITTER_EMAIL": COMMITTER_EMAIL,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "LANGUAGE": "C",
    }


def git(
    repo: Path | str | None,
    *args: str | os.PathLike[str],
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    check: bool = True,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    """Run ``git -C repo ARGS`` (``repo`` None: no ``-C``, for clone, init, ls-remote);
    output (stdout and stderr together) is in ``.stdout``."""
    full_env = git_env()
    if env:
        full_env.update(env)
    where = [] if repo is None else ["-C", os.fspath(repo)]
    return proc.run(
        ["git", *where, *args],
        env=full_env,
        input=input,
        check=check,
        timeout=timeout,
    )


def rev_parse(repo: Path | str, rev: str, *, env: dict[str, str] | None = None) -> str | None:
    """The commit sha ``rev`` names in ``repo``, or None."""
    if not rev or rev.startswith("-"):
        return None
    out = git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{rev}^{{commit}}",
        env=env,
        check=False,
    )
    sha = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return sha if out.returncode == 0 and _SHA.match(sha) else None


def is_ancestor(repo: Path | str, ancestor: str, commit: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", ancestor, commit, check=False).returncode == 0


def rev_list(repo: Path | str, *args: str) -> list[str]:
    out = git(repo, "rev-list", *args)
    return [line for line in out.stdout.split() if _SHA.match(line)]


def update_ref(repo: Path | str, ref: str, sha: str) -> None:
    git(repo, "update-ref", ref, sha)


def delete_ref(repo: Path | str, ref: str) -> None:
    git(repo, "update-ref", "-d", ref, check=False)


def is_sha(text: str) -> bool:
    return bool(_SHA.match(text))


def fetch_commit(repo: Path | str, source_repo: Path | str, sha: str, ref: str) -> None:
    """Copy commit ``sha`` (and what it needs) from ``source_repo`` into ``repo`` under
    ``ref``: how a build tree gets the commits pushed to the intake repository."""
    git(repo, "fetch", "--no-tags", "--quiet", os.fspath(source_repo), f"+{sha}:{ref}")


def read_blobs(repo: Path | str, specs: list[str], timeout: float = 600) -> list[bytes | None]:
    """The contents of ``specs`` (``<commit>:<path>``) as bytes, in order, through one
    ``git cat-file --batch``; None for a spec that names no blob (a public-inbox commit that
    deletes a message has no ``m``)."""
    if not specs:
        return []
    if any("\n" in spec for spec in specs):
        raise ValueError("a blob spec holds a newline")
    out = subprocess.run(
        ["git", "-C", os.fspath(repo), "cat-file", "--batch"],
        input="".join(f"{spec}\n" for spec in specs).encode(),
        capture_output=True,
        env={**os.environ, **git_env()},
        timeout=timeout,
        check=True,
    ).stdout
    blobs: list[bytes | None] = []
    pos = 0
    for _ in specs:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) != 3 or header[1] != b"blob":
            blobs.append(None)  # "<spec> missing", or not a blob
            continue
        size = int(header[2])
        blobs.append(out[pos : pos + size])
        pos += size + 1  # the newline after each object
    return blobs
