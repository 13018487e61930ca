"""Where a job's benchmark programs come from: upstream sources or stackbench's builtin ones.

``suite_source`` is a parameter of vm-scalability and mmtests' THP jobs (thpscale,
thpchallenge, thpcompact):

- ``upstream``: the suite's public git repository at the commit pinned in the job definition
  (``upstream: {url, commit}``), fetched with git at run time, built on the host into static
  binaries for the guest (usemem with vm-scalability's own Makefile, thpscale.c, thpchallenge.c or
  thpcompact.c as mmtests' install steps compile them, with libnuma linked statically) and cached by commit under
  ``$STACKBENCH_HOME/suites``. Nothing from upstream is part of this project.
- ``builtin``: the programs under jobs/benchmarks/workloads (the offline fallback).

Without the parameter a job runs upstream where the source is available (cached, or its URL
answers ``git ls-remote``) and builtin elsewhere. Only upstream jobs carry ``suite_source``
in their identity, so builtin jobs keep the ids they had before upstream sources existed;
the two never share a job and so never pool in a comparison.

``STACKBENCH_SUITE_MIRROR`` names a directory that replaces every suite's URL by
``<dir>/<repo>.bundle`` (or ``<dir>/<repo>`` when that is a directory): machines without
network point it at git bundles of the public mirrors. ``STACKBENCH_SUITE_URL_<REPO>``
(``STACKBENCH_SUITE_URL_VM_SCALABILITY``) overrides one repository.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stackbench import config, gitcmd, proc
from stackbench.errors import InputError, StackbenchError

SOURCES = ("upstream", "builtin")
UPSTREAM_SUITES = ("vm-scalability", "thpscale", "thpchallenge", "thpcompact")
MIRROR_ENV = "STACKBENCH_SUITE_MIRROR"
LS_REMOTE_TIMEOUT_S = 20
# thpscale's own compile line (mmtests' thpscale-install) plus -static for the initramfs
THPSCALE_CFLAGS = ("-Wall", "-static", "-pthread")
# each mmtests THP program's source in its tree (one file; the same compile line)
THP_SOURCES = {
    "thpscale": "shellpack_src/src/thpscale/thpscale.c",
    "thpchallenge": "shellpack_src/src/thpchallenge/thpchallenge.c",
    "thpcompact": "shellpack_src/src/thpcompact/thpcompact.c",
}
# vm-scalability files the guest needs besides usemem: the environment every case reads
VMS_SUPPORT = ("hw_vars",)
# bump when the way upstream sources are built or run changes without their commit changing
UPSTREAM_VERSION = "upstream-1"


@dataclass(frozen=True)
class Upstream:
    """A suite's upstream repository and the commit a job definition pins."""

    url: str
    commit: str

    @property
    def repo(self) -> str:
        """The repository's name: the URL's last component without ``.git``."""
        name = self.url.rstrip("/").rsplit("/", 1)[-1]
        return re.sub(r"\.(git|bundle)$", "", name)

    def fetch_url(self) -> str:
        """The URL git fetches from here: the definition's, unless a mirror overrides it."""
        env = "STACKBENCH_SUITE_URL_" + re.sub(r"[^A-Z0-9]", "_", self.repo.upper())
        if config.get(env):
            return config.get(env)
        mirror = config.get(MIRROR_ENV)
        if mirror:
            base = Path(mirror)
            for cand in (base / f"{self.repo}.bundle", base / self.repo):
                if cand.exists():
                    return str(cand)
            return str(base / f"{self.repo}.bundle")
        return self.url


def cache_root() -> Path:
    return config.home() / "suites"


def checkout_dir(up: Upstream) -> Path:
    return cache_root() / f"{up.repo}-{up.commit}" / "src"


def available(up: Upstream) -> tuple[bool, str]:
    """Whether the upstream source can be had here, and if not, why not (one line)."""
    if (checkout_dir(up) / ".git").is_dir():
        return True, ""
    return _reachable(up.fetch_url())


@cache
def _reachable(url: str) -> tuple[bool, str]:
    if "://" not in url and not Path(url).exists():
        return False, f"{url} does not exist"
    try:
        gitcmd.git(None, "ls-remote", "--exit-code", url, timeout=LS_REMOTE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"cannot reach {url}: no answer in {LS_REMOTE_TIMEOUT_S} s"
    except StackbenchError as exc:
        last = str(exc).strip().splitlines()[-1:] or ["git ls-remote failed"]
        return False, f"cannot reach {url}: {last[0]}"
    return True, ""


def choose(suite: str, requested: str | None, up: Upstream | None, where: str) -> str:
    """The source a job runs with: the requested one, or upstream where available."""
    if requested not in (None, *SOURCES):
        raise InputError(where, f"params.suite_source: {requested!r} is not one of {SOURCES}")
    if requested == "builtin":
        return "builtin"
    if suite not in UPSTREAM_SUITES or up is None:
        if requested == "upstream":
            raise InputError(where, f"params.suite_source: {suite} has no upstream source")
        return "builtin"
    if requested is None:
        return "upstream" if available(up)[0] else "builtin"
    ok, why = available(up)
    if not ok:
        raise InputError(where, f"suite_source=upstream: {why} (suite_source=builtin runs offline)")
    return "upstream"


def version(up: Upstream, runner_hash: str) -> str:
    """The suite version of an upstream job: its commit and the hash of our runner."""
    return f"{UPSTREAM_VERSION}+{up.commit}+{runner_hash}"


# ---- fetch and build ------------------------------------------------------------------------


def fetch(up: Upstream) -> Path:
    """The source tree at the pinned commit, fetched once and then taken from the cache."""
    dest = checkout_dir(up)
    if (dest / ".git").is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    url = up.fetch_url()
    tmp = Path(tempfile.mkdtemp(prefix=".src.", dir=dest.parent))
    try:
        gitcmd.git(None, "init", "-q", tmp)
        try:
            gitcmd.git(tmp, "fetch", "-q", url, "+refs/*:refs/remotes/up/*", timeout=None)
        except StackbenchError as exc:
            raise StackbenchError(f"{up.repo}: cannot fetch {url}: {_last_line(exc)}") from None
        try:
            gitcmd.git(tmp, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach",
                       f"{up.commit}^{{commit}}")  # fmt: skip
        except StackbenchError:
            raise StackbenchError(f"{up.repo}: {url} has no commit {up.commit}") from None
        if dest.exists():  # another process won the race; keep its checkout
            return dest
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not dest.exists():  # a failed fetch leaves no directory behind
            with contextlib.suppress(OSError):
                dest.parent.rmdir()
    return dest


def _last_line(exc: Exception) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def _compiler_id() -> str:
    return proc.run(["gcc", "--version"]).stdout.splitlines()[0]


def build(suite: str, up: Upstream) -> dict[str, Path]:
    """Guest files of an upstream suite (path under /stackbench/upstream -> host file),
    built once per commit and compiler."""
    src = fetch(up)
    tag = hashlib.sha256(f"{_compiler_id()}\0{UPSTREAM_VERSION}".encode()).hexdigest()[:12]
    out = cache_root() / f"{up.repo}-{up.commit}" / f"build-{suite}-{tag}"
    if not out.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".build.", dir=out.parent))
        try:
            BUILDERS[suite](src, tmp)
            if not out.exists():
                os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {p.relative_to(out).as_posix(): p for p in sorted(out.rglob("*")) if p.is_file()}


def _build_vm_scalability(src: Path, out: Path) -> None:
    # its own Makefile; STATIC=1 is the Makefile's switch for static binaries
    work = out / ".work"
    shutil.copytree(src, work, ignore=shutil.ignore_patterns(".git"))
    try:
        proc.run(["make", "-s", "-C", work, "STATIC=1", "usemem"])
    except StackbenchError as exc:
        raise StackbenchError(
            f"vm-scalability: building usemem failed: {_last_line(exc)}"
        ) from None
    dest = out / "vm-scalability"
    dest.mkdir()
    shutil.copy2(work / "usemem", dest / "usemem")
    for f in [*VMS_SUPPORT, *sorted(p.name for p in work.glob("case-*"))]:
        shutil.copy2(work / f, dest / f)
    shutil.rmtree(work)


def _build_thp(suite: str, src: Path, out: Path) -> None:
    if not Path("/usr/include/numaif.h").is_file():
        raise StackbenchError(f"{suite}: numaif.h not found (install libnuma-dev)")
    dest = out / suite
    dest.mkdir()
    source = src / THP_SOURCES[suite]
    if not source.is_file():
        raise StackbenchError(f"{suite}: {THP_SOURCES[suite]} is not in this mmtests commit")
    try:
        proc.run(["gcc", *THPSCALE_CFLAGS, "-o", dest / suite, source, "-lnuma"])
    except StackbenchError as exc:
        raise StackbenchError(
            f"{suite}: building {source.name} failed: {_last_line(exc)}"
        ) from None


BUILDERS = {
    "vm-scalability": _build_vm_scalability,
    **{suite: functools.partial(_build_thp, suite) for suite in THP_SOURCES},
}
