"""Kernel builds: out of tree, with ccache, one object dir per (tree, config) shared by every
commit, and an artifact store keyed by (commit, config hash, compiler).

Workspace of a (tree, config), under ``obj/<tree>/<config>/``:

- ``src/``: ONE git worktree, checked out to each commit in turn. Checking out another commit
  in the same worktree rewrites only the files that differ, so make's timestamps move only for
  them and the next commit of a stack rebuilds incrementally (seconds, not minutes);
- ``build/``: the object dir (``make O=build``);
- ``kconfig/``: a scratch object dir where the configuration is generated (see config.py).

Artifacts: ``artifacts/<commit>-<confighash12>-<compiler>/`` with ``bzImage``, ``config``,
``System.map``, ``Module.symvers``, ``build.log``, ``meta.json`` and ``modules/`` (out-of-tree
modules built against that kernel). A directory there is always complete: it is assembled
under a temporary name and renamed.

Out-of-tree modules: pass ``module_builder`` to :func:`build`; it is called as
``module_builder(kernel_src, kernel_obj, out_dir)`` with ``kernel_src`` = the worktree
(``result.srcdir``) and ``kernel_obj`` = the object dir (``result.objdir``), both at exactly
the built commit, while the workspace lock is held, i.e. the equivalent of
``make -C <kernel_src> O=<kernel_obj> M=<module dir> modules``. Outside that call the two
directories belong to whichever commit is built next; hold :func:`workspace` to use them.
A builder may also carry ``current(art) -> bool``: an artifact whose modules it calls stale
is not reused as it is; its modules are built again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from stackbench import gitcmd, proc
from stackbench.kernels import config as kconfig
from stackbench.kernels import paths, trees

log = logging.getLogger(__name__)

ModuleBuilder = Callable[[Path, Path, Path], Path]

TARGETS = ("bzImage", "modules")
CCACHE_PATH = Path("/usr/lib/ccache")
# fixed build identity: the same source then compiles to the same objects (ccache hits), and
# init/version.c does not differ between two builds of one commit
BUILD_ENV = {
    "KBUILD_BUILD_USER": "stackbench",
    "KBUILD_BUILD_HOST": "stackbench",
    "KBUILD_BUILD_TIMESTAMP": "1970-01-01",
    # an empty (but set) LOCALVERSION keeps setlocalversion from appending "+" to commits
    # that are not tagged, so every commit of a stack has the same kernel release
    "LOCALVERSION": "",
}


@dataclass
class BuildResult:
    status: str  # built | build-failed
    commit: str
    config_hash: str
    compiler: str
    artifact_dir: Path | None
    objdir: Path
    srcdir: Path
    log_tail: str
    duration_s: float
    reused: bool
    config_name: str = "tiny-guest"
    tree: str = "linux-6.1"
    kernel_release: str = ""
    log_path: Path | None = None
    modules: dict[str, Path] = field(default_factory=dict)
    module_error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "built"

    @property
    def bzimage(self) -> Path:
        assert self.artifact_dir is not None
        return self.artifact_dir / "bzImage"

    @property
    def key(self) -> str:
        return artifact_name(self.commit, self.config_hash, self.compiler)


@lru_cache(maxsize=1)
def compiler_id() -> str:
    """``gcc-12.2.0``: part of the artifact key (a different compiler is a different build)."""
    ver = proc.run(["gcc", "-dumpfullversion"]).stdout.strip()
    return f"gcc-{ver}"


def artifact_name(commit: str, config_hash: str, compiler: str) -> str:
    return f"{commit}-{config_hash[:12]}-{compiler}"


def build_env() -> dict[str, str]:
    env = dict(BUILD_ENV)
    env["CCACHE_DIR"] = str(paths.ccache_dir())
    if CCACHE_PATH.is_dir():
        # Debian's ccache masquerade: "gcc" resolves to ccache, so CC stays plain gcc and the
        # config's CC_VERSION_TEXT is the same with or without ccache
        env["PATH"] = f"{CCACHE_PATH}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def workspace_dir(tree: str, config: str) -> Path:
    return paths.obj_dir() / tree / config


@contextmanager
def workspace(tree: str, config: str) -> Iterator[Path]:
    """Hold the (tree, config) workspace: its worktree and object dir stay at the last built
    commit until released. Re-entrant in one thread."""
    with paths.locked(f"ws-{tree}-{config}"):
        yield workspace_dir(tree, config)


def _index_path(tree: str, commit: str, config: str, compiler: str) -> Path:
    ident = json.dumps([tree, commit, config, kconfig.fragment_digest(config), compiler])
    return paths.artifacts_dir() / "index" / hashlib.sha256(ident.encode()).hexdigest()


def find_artifact(tree: str, commit: str, config: str = "tiny-guest") -> Path | None:
    """The artifact dir of a commit built earlier with today's fragment and compiler."""
    idx = _index_path(tree, commit, config, compiler_id())
    try:
        name = idx.read_text().strip()
    except FileNotFoundError:
        return None
    art = paths.artifacts_dir() / name
    return art if (art / "meta.json").is_file() else None


def _reused(art: Path, tree: str, config: str, ws: Path) -> BuildResult:
    meta = json.loads((art / "meta.json").read_text())
    return BuildResult(
        status="built",
        commit=meta["commit"],
        config_hash=meta["config_hash"],
        compiler=meta["compiler"],
        artifact_dir=art,
        objdir=ws / "build",
        srcdir=ws / "src",
        log_tail="",
        duration_s=0.0,
        reused=True,
        config_name=config,
        tree=tree,
        kernel_release=meta.get("kernel_release", ""),
        log_path=art / "build.log",
        modules=_modules(art),
    )


def _modules_ok(art: Path, builder: ModuleBuilder) -> bool:
    """The artifact holds its modules, and they were built from today's sources: a builder
    may carry ``current(art) -> bool`` (jobs/benchmarks/highalloc.py does), so a module whose source
    changed since the kernel was built is rebuilt, not reused."""
    if not _modules(art):
        return False
    current = getattr(builder, "current", None)
    return current is None or bool(current(art))


def _modules(art: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted((art / "modules").glob("*.ko"))}


def build(
    repo: Path,
    commit: str,
    *,
    config: str = "tiny-guest",
    tree: str = "linux-6.1",
    jobs: int | None = None,
    log_path: Path | None = None,
    module_builder: ModuleBuilder | None = None,
    on_configured: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build ``commit`` of ``repo`` (or reuse its artifact). Never raises for a compile error:
    that is ``status="build-failed"`` with the log tail; environment problems do raise.

    ``module_builder`` builds out-of-tree guest modules into the artifact (the jobs component
    passes its highalloc module builder; kernels never imports jobs); None builds none. ``on_configured(config_hash)``
    is called once the configuration is known and a real build is about to start."""
    commit = trees.resolve(repo, commit)
    compiler = compiler_id()
    ws = workspace_dir(tree, config)
    art = find_artifact(tree, commit, config)
    if art is not None and (module_builder is None or _modules_ok(art, module_builder)):
        return _reused(art, tree, config, ws)
    with workspace(tree, config):
        return _build_locked(
            repo,
            commit,
            config,
            tree,
            compiler,
            ws,
            jobs,
            log_path,
            module_builder,
            on_configured,
        )


def _build_locked(
    repo: Path,
    commit: str,
    config: str,
    tree: str,
    compiler: str,
    ws: Path,
    jobs: int | None,
    log_path: Path | None,
    module_builder: ModuleBuilder | None,
    on_configured: Callable[[str], None] | None = None,
) -> BuildResult:
    started = time.monotonic()
    env = build_env()
    src, obj = ws / "src", ws / "build"
    log_path = log_path or ws / "build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(f"stackbench: building {commit} ({tree}, config {config}, {compiler})\n")
    checkout(repo, src, commit)
    generated = kconfig.generate(src, ws / "kconfig", config, env=env, log_path=log_path)
    chash = kconfig.config_hash(generated)
    name = artifact_name(commit, chash, compiler)
    art = paths.artifacts_dir() / name
    idx = _index_path(tree, commit, config, compiler)

    def result(status: str, tail: str, reused: bool = False) -> BuildResult:
        return BuildResult(
            status=status,
            commit=commit,
            config_hash=chash,
            compiler=compiler,
            artifact_dir=art if status == "built" else None,
            objdir=obj,
            srcdir=src,
            log_tail=tail,
            duration_s=time.monotonic() - started,
            reused=reused,
            config_name=config,
            tree=tree,
            kernel_release=_release(art) if status == "built" else "",
            log_path=(art / "build.log") if status == "built" else log_path,
            modules=_modules(art) if status == "built" else {},
        )

    built_now = False
    if not (art / "meta.json").is_file():
        if on_configured is not None:
            on_configured(chash)
        if kconfig.install(generated, obj):
            proc.run(kconfig.make_argv(src, obj, "olddefconfig"), env=env, log_path=None)
        # what olddefconfig dropped of a fragment fails here, naming it, not as a silent
        # kernel without the option
        kconfig.check(config, obj / ".config", src)
        res = _make(src, obj, jobs, env, log_path)
        if res.returncode != 0:
            return result("build-failed", failure_tail(log_path))
        _store(
            art, obj, commit, chash, compiler, config, tree, log_path, time.monotonic() - started
        )
        built_now = True
    idx.parent.mkdir(parents=True, exist_ok=True)
    idx.write_text(name + "\n")
    out = result("built", "", reused=not built_now)
    if module_builder is not None and not _modules_ok(art, module_builder):
        if not built_now:
            # the object dir may hold another commit: bring it to this one (incremental)
            if kconfig.install(generated, obj):
                proc.run(kconfig.make_argv(src, obj, "olddefconfig"), env=env)
            if _make(src, obj, jobs, env, log_path).returncode != 0:
                out.module_error = "rebuilding the object dir for the module failed"
                return out
        out.module_error = _build_modules(module_builder, src, obj, art)
        out.modules = _modules(art)
    out.duration_s = time.monotonic() - started
    return out


def _make(src: Path, obj: Path, jobs: int | None, env: dict[str, str], log_path: Path):
    jobs = jobs or os.cpu_count() or 1
    argv = kconfig.make_argv(src, obj, *TARGETS, jobs=jobs)
    with open(log_path, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n")
    tmp_log = log_path.with_name(log_path.name + ".make")
    res = proc.run(argv, env=env, log_path=tmp_log, check=False)
    with open(log_path, "ab") as out, open(tmp_log, "rb") as inp:
        shutil.copyfileobj(inp, out)
    tmp_log.unlink(missing_ok=True)
    return res


def _build_modules(builder: ModuleBuilder, src: Path, obj: Path, art: Path) -> str:
    tmp = Path(tempfile.mkdtemp(prefix=".modules-", dir=art))
    tmp.chmod(0o755)
    try:
        builder(src, obj, tmp)
        if not list(tmp.glob("*.ko")):
            return "the module build produced no .ko"
        final = art / "modules"
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return ""
    except Exception as exc:  # a module that fails to build is reported, not fatal
        log.warning("module build against %s failed: %s", art.name, exc)
        return f"module build failed: {exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def checkout(repo: Path, src: Path, commit: str) -> None:
    """Bring the workspace's worktree to ``commit`` (created on first use)."""
    if not (src / ".git").exists():
        if src.exists():
            shutil.rmtree(src)
        src.parent.mkdir(parents=True, exist_ok=True)
        gitcmd.git(repo, "worktree", "prune")
        gitcmd.git(repo, "worktree", "add", "-q", "--detach", "-f", src, commit, timeout=None)
        return
    if gitcmd.rev_parse(src, "HEAD") != commit:
        gitcmd.git(src, "checkout", "-q", "--detach", "-f", commit, timeout=None)


def _store(
    art: Path,
    obj: Path,
    commit: str,
    chash: str,
    compiler: str,
    config: str,
    tree: str,
    log_path: Path,
    duration: float,
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{art.name}.", dir=art.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide artifacts from a web server's account
    try:
        shutil.copy2(obj / "arch" / "x86" / "boot" / "bzImage", tmp / "bzImage")
        shutil.copy2(obj / ".config", tmp / "config")
        shutil.copy2(obj / "System.map", tmp / "System.map")
        if (obj / "Module.symvers").exists():
            shutil.copy2(obj / "Module.symvers", tmp / "Module.symvers")
        shutil.copy2(log_path, tmp / "build.log")
        release = (obj / "include" / "config" / "kernel.release").read_text().strip()
        meta = {
            "commit": commit,
            "config_name": config,
            "config_hash": chash,
            "compiler": compiler,
            "tree": tree,
            "kernel_release": release,
            "build_seconds": round(duration, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        if art.exists():
            shutil.rmtree(art)
        tmp.rename(art)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _release(art: Path) -> str:
    try:
        return json.loads((art / "meta.json").read_text()).get("kernel_release", "")
    except (FileNotFoundError, ValueError):
        return ""


def failure_tail(log_path: Path, lines: int = 40) -> str:
    """What a developer needs from a failed build: the compiler's error lines first (make -j
    interleaves them with other output), then the end of the log."""
    text = proc.tail_text(log_path, 2000).splitlines()
    errors = [ln for ln in text if "error:" in ln or ln.startswith("make") and "Error" in ln]
    tail = text[-lines:]
    picked = [ln for ln in errors[:15] if ln not in tail]
    return "\n".join([*picked, *(["..."] if picked else []), *tail])
