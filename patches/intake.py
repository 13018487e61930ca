"""Series from ``git push``: the intake repository's ref namespace and hooks.

A developer pushes a branch to ``refs/for/<tree>/<base>`` of a bare repository (served over
git smart HTTP by the web component, or a plain path). The ``pre-receive`` hook rejects any
other ref and any range that cannot be a series; the ``post-receive`` hook registers the
pushed commits as a series and tells the pusher its ID and URL. The pushed commits are the
patches: nothing is applied, each patch keeps its commit sha.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

from stackbench import gitcmd
from stackbench.errors import InputError
from stackbench.patches.parser import ParsedSeries, parse_mbox

REF_PREFIX = "refs/for/"
# where a registered push is kept, so its commits stay reachable after refs/for/ is cleared
SERIES_REF = "refs/stackbench/series/{id}"
MAX_PUSHED_COMMITS = 100
_TREE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
HOOKS = ("pre-receive", "post-receive")


def parse_push_ref(ref: str) -> tuple[str, str]:
    """``refs/for/<tree>/<base>`` -> (tree, base).

    The tree is one path component; the base is the rest and may contain ``/``
    (``refs/for/mm/mm-stable``, ``refs/for/linux-6.1/v6.1``). Any other ref is refused."""
    usage = (
        f"only pushes to {REF_PREFIX}<tree>/<base> are accepted (the base: a tag, branch or "
        f"commit of the tree), e.g. git push <url> HEAD:{REF_PREFIX}linux-6.1/v6.1-debian"
    )
    if not ref.startswith(REF_PREFIX):
        raise InputError(_show(ref), usage)
    tree, _, base = ref[len(REF_PREFIX) :].partition("/")
    if not tree or not base:
        raise InputError(_show(ref), f"missing {'tree' if not tree else 'base'}: {usage}")
    if not _TREE.fullmatch(tree):
        raise InputError(_show(ref), f"invalid tree name {tree[:80]!r}")
    if (
        _BAD_REF_CHARS.search(base)
        or ".." in base
        or "//" in base
        or "@{" in base
        or base.startswith(("-", "/", "."))
        or base.endswith(("/", ".", ".lock"))
        or len(base) > 200
    ):
        raise InputError(_show(ref), f"invalid base {base[:80]!r}")
    return tree, base


def series_from_push(
    repo: Path, tree: str, base: str, new_sha: str, *, tree_repo: Path | None = None
) -> ParsedSeries:
    """The commits ``base..new_sha`` of ``repo`` as a series, oldest first, each patch
    carrying its commit sha; ``base_commit`` is the resolved base.

    The base is looked up in the push first, then in ``tree_repo`` (the tree's own
    repository): the intake holds no tags or branches of its own, so ``v6.1-debian`` or
    ``HEAD`` name the tree's."""
    repo = Path(repo)
    where = f"push to {REF_PREFIX}{tree}/{base}"
    if not gitcmd.is_sha(new_sha) or new_sha == gitcmd.ZERO_SHA:
        raise InputError(where, "deleting or resetting a refs/for/ ref is not supported")
    head = gitcmd.rev_parse(repo, new_sha)
    if head is None:
        raise InputError(where, f"pushed commit {new_sha[:12]} is not in the repository")
    base_sha = gitcmd.rev_parse(repo, base)
    if base_sha is None and tree_repo is not None:
        base_sha = gitcmd.rev_parse(tree_repo, base, env=_own_repo_env(Path(tree_repo)))
        if base_sha is not None and gitcmd.rev_parse(repo, base_sha) is None:
            raise InputError(
                where,
                f"base {base!r} is {base_sha[:12]} in tree {tree}, which the pushed history "
                "does not contain: rebase onto it",
            )
    if base_sha is None:
        raise InputError(
            where,
            f"base {base!r} is not a branch, tag or commit of tree {tree} or of the push: "
            f"name it by its commit, {REF_PREFIX}{tree}/<sha>",
        )
    if not gitcmd.is_ancestor(repo, base_sha, head):
        raise InputError(where, f"base {base!r} is not an ancestor of {head[:12]}: rebase first")
    commits = gitcmd.rev_list(repo, "--reverse", "--topo-order", f"{base_sha}..{head}")
    if not commits:
        raise InputError(where, f"nothing to test: {head[:12]} adds no commits to {base!r}")
    if len(commits) > MAX_PUSHED_COMMITS:
        raise InputError(where, f"{len(commits)} commits: at most {MAX_PUSHED_COMMITS}")
    if gitcmd.rev_list(repo, "--merges", f"{base_sha}..{head}"):
        raise InputError(where, "merge commits cannot be tested as a patch series")

    with tempfile.TemporaryDirectory(prefix="stackbench-push-") as tmp:
        gitcmd.git(
            repo,
            "format-patch",
            "--quiet",
            "--no-signature",
            "--no-stat",
            "--numbered" if len(commits) > 1 else "--no-numbered",
            f"--base={base_sha}",
            "-o",
            tmp,
            f"{base_sha}..{head}",
        )
        files = sorted(Path(tmp).glob("*.patch"))
        mbox = b"".join(f.read_bytes().rstrip(b"\n") + b"\n\n" for f in files)
    parsed = parse_mbox(mbox, source=where)
    if len(parsed.patches) != len(commits):
        raise InputError(where, f"{len(commits)} commits gave {len(parsed.patches)} patches")
    for patch, sha in zip(parsed.patches, commits, strict=True):
        patch.commit_sha = sha
    parsed.base_commit = base_sha
    return parsed


def _own_repo_env(repo: Path) -> dict[str, str]:
    """What makes git look at ``repo`` from inside the intake's hook, where GIT_DIR and
    the quarantined object directory of the push would otherwise still apply."""
    git_dir = repo / ".git" if (repo / ".git").is_dir() else repo
    return {
        "GIT_DIR": str(git_dir),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
    }


def install_hook(
    bare_repo: Path, command: list[str], *, env: dict[str, str] | None = None
) -> list[Path]:
    """Write the ``pre-receive`` and ``post-receive`` hooks of ``bare_repo``.

    Both run ``command`` (e.g. ``["/venv/bin/stackbench", "intake-push"]``) with
    ``--hook NAME`` and git's hook input on stdin; ``pre-receive`` only checks, so a push
    to a foreign ref or of an unusable range is rejected as a whole. ``env`` entries (such
    as ``STACKBENCH_DATABASE_URL``) are set for the command, for git servers that start hooks
    with a bare environment. Push options (``git push -o runs=5``) are enabled."""
    bare_repo = Path(bare_repo)
    if not command:
        raise InputError(bare_repo, "install_hook needs a command to run")
    hooks = bare_repo / "hooks"
    if not (bare_repo / "objects").is_dir():
        raise InputError(bare_repo, "not a bare git repository")
    hooks.mkdir(exist_ok=True)
    gitcmd.git(bare_repo, "config", "receive.advertisePushOptions", "true")
    written = []
    for name in HOOKS:
        path = hooks / name
        # a Python script with the argv as literals: no shell quoting to get wrong
        script = (
            f"#!{sys.executable}\n"
            "# Written by stackbench (stackbench.patches.intake.install_hook); re-run it\n"
            "# instead of editing this file.\n"
            "import os\n"
            "import sys\n"
            f"os.environ.update({dict(env or {})!r})\n"
            f"argv = {[str(c) for c in command]!r} + ['--hook', {name!r}]\n"
            "os.execvp(argv[0], argv)\n"
        )
        # the env may hold the database password: only the account running git reads it
        _write_private(path, script, 0o700)
        written.append(path)
    return written


def _write_private(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` atomically, created with ``mode`` (never world-readable,
    not even for a moment)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)  # the umask may have taken bits away, never added any
    os.replace(tmp, path)


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600), such as one naming the database password."""
    _write_private(Path(path), text, 0o600)


def read_hook_input(text: str) -> list[tuple[str, str, str]]:
    """git's hook stdin (``<old> <new> <ref>`` per line) as tuples."""
    updates = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3:
            raise InputError("hook input", f"expected '<old> <new> <ref>', got {line[:120]!r}")
        updates.append((parts[0], parts[1], parts[2]))
    return updates


def read_push_options(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """``git push -o key=value`` options, as git passes them to hooks (a bare ``-o key`` is
    ``key=true``)."""
    try:
        count = int(environ.get("GIT_PUSH_OPTION_COUNT", "0"))
    except ValueError:
        count = 0
    options: dict[str, str] = {}
    for i in range(min(count, 50)):
        raw = environ.get(f"GIT_PUSH_OPTION_{i}", "")
        key, eq, value = raw.partition("=")
        # ``-o check-claims`` is ``check_claims=true``: the options' field names, dashed or not
        options[key.strip().replace("-", "_")] = value.strip() if eq else "true"
    return options


def _show(ref: str) -> str:
    return _BAD_REF_CHARS.sub("?", ref[:200]) if ref else "<empty ref>"
