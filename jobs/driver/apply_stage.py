"""The apply stage: the series' mails ``git am``-ed onto its base (or the pushed commits
fetched as they are), giving the kernels to build: the base and every commit."""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import InputError, NotFoundError, StackbenchError
from stackbench.jobs.driver.lifecycle import record_apply, set_state
from stackbench.jobs.executors.faults import HostFault, disk_fault_in
from stackbench.jobs.executors.progress import ProgressFn
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
from stackbench.jobs.executors.settings import Settings
from stackbench.kernels import paths as kpaths
from stackbench.kernels import trees
from stackbench.patches.parser import ParsedPatch
from stackbench.resultsdb import db, kernels_store, series_store

# the worktrees of applies, under the kernel cache: apply-<series>-<random>
APPLY_PREFIX = "apply-"


def apply_only(
    eng: Engine, series_id: int, *, progress: ProgressFn | None = None
) -> list[tuple[str, str]] | None:
    """Apply a stored series (``git am``) without building anything: (commit, kernel name)
    of the base and each patch, for a runner elsewhere (Buildbot); None when it does not
    apply."""
    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        tree_name = series.tree.name if series.tree else "linux-6.1"
        base_ref = series.base_ref
    tree = trees.load_tree(tree_name)
    sr = SeriesRun(series_id, Settings(), progress)
    tasks = apply_stage(eng, sr, trees.ensure_repo(tree), tree, base_ref)
    return None if tasks is None else [(t.commit, t.name) for t in tasks]


def apply_stage(
    eng: Engine, sr: SeriesRun, repo: Path, tree: trees.TreeDef, base_ref: str
) -> list[KernelTask] | None:
    """The apply stage with its progress events; None (and a 'failed' event) when the
    series does not apply."""
    base = base_ref or tree.default_base
    sr.emit("apply", 1, 1, f"series {sr.series_id}", f"on {base}")
    t0 = time.monotonic()
    tasks = _apply(eng, sr, repo, base, tree)
    sr.timings["apply_s"] = time.monotonic() - t0
    if tasks is None:  # record_apply moved the series, and its attempt ended with it
        sr.emit("failed", 0, 0, f"series {sr.series_id}", "apply failed: nothing built")
    return tasks


def _series_mails(s: Session, series: series_store.Series) -> list[ParsedPatch]:
    """The patches to ``git am``: the submitted mails when kept, else mails rebuilt from the
    stored patch rows (series created by other front ends, or stored before the parser
    refused what they hold, or when a parser of another version shows other diffs): each
    patch's diff is the one its row holds and the pages show, which the apply step checks
    every commit against."""
    from stackbench.patches.parser import parse_mbox

    rows = sorted(series.patches, key=lambda p: p.idx)
    raw = series.mbox
    if raw:
        try:
            parsed = parse_mbox(raw, source=f"series {series.id}").patches
        except InputError:
            parsed = []
        if len(parsed) == len(rows) and all(
            p.diff == row.diff for p, row in zip(parsed, rows, strict=True)
        ):
            return parsed
    return [
        ParsedPatch(
            idx=p.idx,
            total=p.total,
            subject=p.subject,
            author=p.author,
            author_email=p.author_email,
            date=p.date,
            message_id=p.message_id,
            in_reply_to=p.in_reply_to,
            body=p.body,
            diff=p.diff,
            raw=mail_from_patch(p),
        )
        for p in rows
    ]


def mail_from_patch(p: series_store.Patch) -> bytes:
    """A git-am-able mail from a stored patch row."""
    author = f"{p.author} <{p.author_email}>" if p.author_email else p.author or "unknown"
    headers = [
        f"From: {author}",
        f"Date: {p.date}" if p.date else "",
        f"Subject: [PATCH {p.idx}/{p.total}] {p.subject}",
        f"Message-ID: <{p.message_id.strip('<>')}>" if p.message_id else "",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=UTF-8",
        "Content-Transfer-Encoding: 8bit",
    ]
    body = p.body.rstrip("\n")
    text = "\n".join(h for h in headers if h) + "\n\n" + body + "\n---\n" + p.diff
    if not text.endswith("\n"):
        text += "\n"
    return text.encode()


def fetch_pushed(eng: Engine, series_id: int, repo: Path) -> None:
    """A series that came by git push is built from the commits as pushed: copy them from
    the intake repository into the tree's repository (no git am)."""
    from stackbench import gitcmd

    with db.session(eng) as s:
        series = series_store.get(s, series_id)
        head, source = series.push_head, series.push_repo
    if not head or not source or trees.has_commit(repo, head):
        return
    if not Path(source).exists():
        raise StackbenchError(f"pushed commits of series {series_id} are gone: {source}")
    gitcmd.fetch_commit(repo, source, head, f"refs/stackbench/series/{series_id}")


def _apply(
    eng: Engine, sr: SeriesRun, repo: Path, base: str, tree: trees.TreeDef
) -> list[KernelTask] | None:
    from stackbench.patches.apply import apply_series, remove_worktree

    sid = sr.series_id
    fetch_pushed(eng, sid, repo)
    with db.session(eng) as s:
        series = series_store.get(s, sid)
        patches = kernels_store.stack(series)[1:]
        # a comparison of one kernel (a nightly's first night) has no patch to apply
        applied = (bool(patches) or bool(series.base_commit)) and all(
            k.commit and trees.has_commit(repo, k.commit) for k in patches
        )
        if applied and series.base_commit:
            base_sha = series.base_commit
        else:
            mails = _series_mails(s, series)
            applied = False
    if not applied:
        set_state(eng, sid, "applying", f"git am onto {base}")
        name = f"{APPLY_PREFIX}{sid}-{secrets.token_hex(4)}"
        workdir = kpaths.cache_root() / name
        # held while the worktree lives: one left by a killed apply holds nothing, and
        # prune_apply_worktrees removes it
        with kpaths.locked(name):
            try:
                result = apply_series(
                    repo, base, mails, workdir, ref=f"refs/stackbench/series/{sid}"
                )
            finally:
                remove_worktree(repo, workdir)
        (kpaths.locks_dir() / f"{name}.lock").unlink(missing_ok=True)
        fault = None if result.ok else disk_fault_in(result.error)
        if fault:  # git am stopped by the disk, not by the patch: nothing is recorded
            raise HostFault(f"git am onto {base}: {fault}")
        with db.session(eng) as s:
            record_apply(s, sid, result)
        if not result.ok:
            return None
        base_sha = result.base_sha
    with db.session(eng) as s:
        series = series_store.get(s, sid)
        tasks = [
            KernelTask(label="base", name=kernels_store.base_name(base, base_sha), commit=base_sha)
        ]
        for k in kernels_store.stack(series)[1:]:
            p = k.patch
            tasks.append(
                KernelTask(
                    label=k.label,
                    name=kernels_store.kernel_name(p.idx, p.total, k.commit),
                    commit=k.commit,
                    patch_id=p.id,
                )
            )
    return tasks


def prune_apply_worktrees() -> list[Path]:
    """Remove the worktrees that applies killed midway left (``apply-*`` under the kernel
    cache, and their registration in the tree's git), sparing the live ones; the removed
    ones. The dispatcher calls it when it starts."""
    from stackbench import gitcmd
    from stackbench.patches.apply import remove_worktree

    root = kpaths.cache_root()
    stale = {d for d in root.glob(f"{APPLY_PREFIX}*") if not kpaths.held(d.name)}
    try:
        repos = {trees.local_repo(t.name) for t in trees.list_trees()} - {None}
    except StackbenchError:  # a broken tree file: the directories still go
        repos = set()
    for repo in sorted(repos):
        listed = gitcmd.git(repo, "worktree", "list", "--porcelain", check=False).stdout
        for line in listed.splitlines():
            where = Path(line.removeprefix("worktree "))
            if line.startswith("worktree ") and where.parent == root and where in stale:
                remove_worktree(repo, where)
        gitcmd.git(repo, "worktree", "prune", check=False)
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)
    for lock in kpaths.locks_dir().glob(f"{APPLY_PREFIX}*.lock"):
        if not kpaths.held(lock.name.removesuffix(".lock")):
            lock.unlink(missing_ok=True)
    return sorted(stale)
