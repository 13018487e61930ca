"""Kernel trees: one YAML file per tree in ``kernels/trees/``, and the local git repository each
one is built from.

A tree's ``source`` is one of:

- ``debian-package: linux-source-6.1``: the offline default. /usr/src/<package>.tar.xz is
  unpacked ONCE into a git repository under ``trees/<name>`` and committed as one commit tagged
  ``default_base``;
- ``git: URL``: cloned once, then fetched on demand;
- ``path: /some/repo``: an existing git repository used in place.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackbench import config, gitcmd, proc, schema
from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.kernels import paths
from stackbench.resultsdb import storable

log = logging.getLogger(__name__)

TREES_DIR = Path(__file__).resolve().parent / "trees"
DEBIAN_SRC = Path("/usr/src")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "source", "default_base"],
    "properties": {
        "name": {"type": "string", "pattern": storable.TREE_NAME_PATTERN},
        "description": {"type": "string"},
        "source": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {
                "debian-package": {"type": "string", "pattern": "^[a-z0-9][a-z0-9.+-]*$"},
                "git": {"type": "string", "minLength": 1},
                "path": {"type": "string", "minLength": 1},
            },
        },
        "default_base": {"type": "string", "minLength": 1},
        "configs": {"type": "array", "items": {"type": "string"}},
    },
}

# Fixed identity and dates make the unpacked commit's sha the same on every machine with the
# same package, so results from two hosts refer to the same base commit.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "stackbench",
    "GIT_AUTHOR_EMAIL": "stackbench@localhost",
    "GIT_COMMITTER_NAME": "stackbench",
    "GIT_COMMITTER_EMAIL": "stackbench@localhost",
}


@dataclass(frozen=True)
class TreeDef:
    name: str
    source_kind: str  # debian-package | git | path
    source: str
    default_base: str
    description: str = ""
    configs: tuple[str, ...] = field(default_factory=tuple)
    path: Path | None = None  # the YAML file it came from

    @property
    def url(self) -> str:
        return self.source if self.source_kind != "debian-package" else f"debian:{self.source}"


def clean_tree(data: Any, origin: Path) -> TreeDef:
    """Validate a parsed tree YAML document into a TreeDef (InputError naming the file)."""
    schema.check(data, SCHEMA, origin, "tree definition")
    ((kind, value),) = data["source"].items()
    return TreeDef(
        name=data["name"],
        source_kind=kind,
        source=value,
        default_base=data["default_base"],
        description=data.get("description", ""),
        configs=tuple(data.get("configs", ())),
        path=origin,
    )


def parse_tree_file(path: Path) -> TreeDef:
    tree = clean_tree(schema.read_yaml(path), path)
    if tree.name != path.stem:
        raise InputError(path, f"tree name {tree.name!r} does not match the file name")
    return tree


def _tree_dirs() -> list[Path]:
    dirs = [TREES_DIR]
    extra = config.get("STACKBENCH_TREES")
    if extra:
        dirs[:0] = [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def list_trees() -> list[TreeDef]:
    """Every defined tree (STACKBENCH_TREES folders first, then the shipped ones)."""
    seen: dict[str, TreeDef] = {}
    for d in _tree_dirs():
        for f in sorted(d.glob("*.yaml")):
            seen.setdefault(f.stem, parse_tree_file(f))
    return list(seen.values())


def load_tree(name: str) -> TreeDef:
    """The tree NAME's definition; InputError for a name no tree can have (it is a file
    name below: too long, or a path), NotFoundError for one no file defines."""
    why = storable.tree_name_problem(name)
    if why:
        raise InputError("tree", why)
    for d in _tree_dirs():
        f = d / f"{name}.yaml"
        if f.is_file():
            return parse_tree_file(f)
    known = ", ".join(t.name for t in list_trees()) or "none"
    raise NotFoundError(f"no kernel tree named {name!r} (known: {known})")


def repo_path(tree: TreeDef) -> Path:
    if tree.source_kind == "path":
        return Path(tree.source).expanduser().resolve()
    return paths.trees_dir() / tree.name


def ensure_repo(tree: TreeDef) -> Path:
    """The tree's git repository, created on first use (unpack or clone) under a lock."""
    if tree.source_kind == "path":
        repo = repo_path(tree)
        if not (repo / ".git").exists() and not (repo / "HEAD").exists():
            raise InputError(repo, f"tree {tree.name}: not a git repository")
        return repo
    repo = repo_path(tree)
    if _ready(repo):
        return repo
    with paths.locked(f"tree-{tree.name}"):
        if _ready(repo):
            return repo
        if tree.source_kind == "debian-package":
            _unpack_debian(tree, repo)
        else:
            _clone(tree, repo)
    return repo


def local_repo(name: str) -> Path | None:
    """The named tree's repository when it is already on this machine (never cloned or
    unpacked here): where a push names its base by a tag or branch of the tree."""
    try:
        tree = load_tree(name)
    except StackbenchError:
        return None
    repo = repo_path(tree)
    if tree.source_kind == "path":
        return repo if (repo / ".git").exists() or (repo / "HEAD").exists() else None
    return repo if _ready(repo) else None


def _ready(repo: Path) -> bool:
    # the marker is written last, so a repository interrupted mid-unpack is never used
    return (repo / ".git" / "stackbench-ready").exists()


def _unpack_debian(tree: TreeDef, repo: Path) -> None:
    tarball = DEBIAN_SRC / f"{tree.source}.tar.xz"
    if not tarball.is_file():
        raise StackbenchError(
            f"tree {tree.name}: {tarball} is missing (install the Debian package {tree.source})"
        )
    log.warning("unpacking %s into %s (once; about a minute)", tarball, repo)
    parent = repo.parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{tree.name}.unpack-", dir=parent))
    try:
        proc.run(["tar", "-xJf", tarball, "-C", tmp, "--strip-components=1"])
        cut_debian_gitignore(tmp / ".gitignore")
        version = _makefile_version(tmp / "Makefile")
        stamp = f"@{int(tarball.stat().st_mtime)} +0000"
        env = {**_GIT_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        gitcmd.git(tmp, "-c", "gc.auto=0", "init", "-q", "-b", "master")
        gitcmd.git(tmp, "config", "gc.auto", "0")
        gitcmd.git(tmp, "-c", "gc.auto=0", "add", "-A", timeout=None)
        msg = f"Linux {version} from Debian {tree.source}\n\nUnpacked from {tarball.name}."
        gitcmd.git(tmp, "-c", "gc.auto=0", "commit", "-q", "--no-verify", "-m", msg, env=env,
                   timeout=None)  # fmt: skip
        gitcmd.git(tmp, "tag", "-a", tree.default_base, "-m", f"Linux {version}", env=env)
        (tmp / ".git" / "stackbench-ready").write_text(f"{tarball}\n")
        if repo.exists():
            shutil.rmtree(repo)  # an earlier interrupted attempt
        tmp.rename(repo)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _clone(tree: TreeDef, repo: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{tree.name}.clone-", dir=repo.parent))
    try:
        gitcmd.git(None, "clone", "-q", "--no-checkout", tree.source, tmp / "r", timeout=None)
        (tmp / "r" / ".git" / "stackbench-ready").write_text(f"{tree.source}\n")
        if repo.exists():
            shutil.rmtree(repo)
        (tmp / "r").rename(repo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cut_debian_gitignore(path: Path) -> bool:
    """Drop Debian's packaging block (a comment block then ``/*`` and ``!/debian/``) from a
    kernel .gitignore; with it, ``git add -A`` adds nothing at the top level."""
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return False
    try:
        star = next(i for i, ln in enumerate(lines) if ln.strip() == "/*")
    except StopIteration:
        return False
    start = star
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    path.write_text("".join(lines[:start]).rstrip("\n") + "\n")
    return True


def _makefile_version(makefile: Path) -> str:
    fields: dict[str, str] = {}
    for line in makefile.read_text(errors="replace").splitlines()[:10]:
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    parts = [fields.get(k, "") for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL")]
    return ".".join(p for p in parts if p) + fields.get("EXTRAVERSION", "")


def resolve(repo: Path, ref: str) -> str:
    """The full sha of ``ref`` in ``repo`` (NotFoundError when unknown)."""
    sha = gitcmd.rev_parse(repo, ref)
    if sha is None:
        raise NotFoundError(f"{repo.name}: unknown base ref {ref!r}")
    return sha


def has_commit(repo: Path, sha: str) -> bool:
    return gitcmd.git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0
