"""The kernels a worker keeps between rounds.

Every round of a series boots the same kernels, and a worker takes several rounds: fetching
each kernel from the master for every round was a step (and a transfer) per boot, the
largest part of a dry boot's overhead after the worker's own process. A benchmark build
keeps its round's kernels in ``kernels/`` of the builder's directory on the worker and
fetches only those it does not hold; what no longer belongs to the round is deleted, so a
worker holds one round's kernels at most.

The fetches are remote commands of the round's first step, not steps of their own: each step
costs the master database writes (a step, its log, its state) that the round's worker waits
for, and with ten workers starting their rounds together the master wrote them for forty
fetch steps at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from buildbot.process import remotecommand, remotetransfer
from buildbot.process.results import SUCCESS
from twisted.internet import defer

KEPT = "kernels"
# a transfer is one master-worker round trip per block: Buildbot's default of 16 KiB made a
# 10 MB kernel 640 of them; Perspective Broker takes messages up to 640 KiB
BLOCK_BYTES = 512 * 1024


def kept_name(master_basedir: str, artifact: str) -> tuple[str, int] | None:
    """The name a worker keeps an artifact under and its size; None when the master has no
    such file (the fetch then fails and says so)."""
    try:
        st = (Path(master_basedir) / artifact).stat()
    except OSError:
        return None
    # builder and build number name the kernel on this master; its size and mtime tell a
    # recreated master's build of the same number apart, and the size a cut-short copy
    where = "-".join(Path(artifact).parent.parts[-2:])
    return f"{where}-{st.st_size}-{st.st_mtime_ns}.tar", st.st_size


@defer.inlineCallbacks
def plan_fetches(step: Any, artifacts: list[str]) -> Any:
    """``(paths, fetches)``: each artifact's path on the step's worker, and the
    ``(artifact, path)`` pairs to download first. ``step`` is a running step with
    Buildbot's CompositeStepMixin (its remote glob, stat and rmfile)."""
    builddir = step.getProperty("builddir")
    if not builddir:  # not on a worker's builder: fetch every kernel into the workdir
        paths = [f"kernel-{i}.tar" for i in range(len(artifacts))]
        return paths, list(zip(artifacts, paths, strict=True))
    kept_dir = step.worker.path_module.join(builddir, KEPT)
    # one glob says what the worker holds; only those are looked at more closely
    held = yield step.runGlob(step.worker.path_module.join(kept_dir, "*.tar"))
    held_names = {step.worker.path_module.basename(path) for path in held or []}
    paths, fetches, wanted = [], [], set()
    for i, artifact in enumerate(artifacts):
        named = kept_name(step.master.basedir, artifact)
        if named is None:
            path = step.worker.path_module.join(builddir, "build", f"kernel-{i}.tar")
            paths.append(path)
            fetches.append((artifact, path))
            continue
        name, size = named
        path = step.worker.path_module.join(kept_dir, name)
        paths.append(path)
        if name in wanted:
            continue
        wanted.add(name)
        if name not in held_names:
            fetches.append((artifact, path))
            continue
        st = yield step.runRemoteCommand(
            "stat",
            {"file": path, "logEnviron": False},
            abandonOnFailure=False,
            evaluateCommand=lambda cmd: None if cmd.didFail() else cmd.updates["stat"][-1],
        )
        if not st or st[6] != size:  # absent, or cut short by a worker lost mid-fetch
            fetches.append((artifact, path))
    for path in held or []:
        if step.worker.path_module.basename(path) not in wanted:
            yield step.runRmFile(path, abandonOnFailure=False)
    return paths, fetches


@defer.inlineCallbacks
def fetch(step: Any, fetches: list[tuple[str, str]], names: dict[str, str]) -> Any:
    """Download each ``(artifact, path)`` of ``fetches`` to the running ``step``'s worker,
    saying so in the step's ``fetch`` log by the kernels' ``names``; the name of the first
    kernel that could not be fetched, or None.

    One after another: a Buildbot worker runs one command of a builder at a time (a second
    one halts the first). The log is written once, at the end: each write is a database
    write of the master, and ten rounds starting together wait for each other's."""
    if not fetches:
        return None
    log = yield step.addLog("fetch")
    fetched: list[str] = []
    failed = why = ""
    for artifact, path in fetches:
        name = names.get(artifact, artifact)
        why = yield _download(step, log, artifact, path)
        if why:
            failed = name
            break
        fetched.append(f"fetched {name}\n")
    if fetched:
        yield log.addStdout("".join(fetched))
    if failed:
        yield log.addStderr(f"{failed}: {why}\n")
        return failed
    return None


@defer.inlineCallbacks
def _download(step: Any, log: Any, artifact: str, path: str) -> Any:
    """One artifact to ``path`` on the worker: "" when it arrived, else why not."""
    try:
        fp = open(os.path.join(step.master.basedir, artifact), "rb")  # noqa: SIM115
    except OSError:
        return f"{artifact} is not on the master"
    args = {
        "maxsize": None,
        "reader": remotetransfer.FileReader(fp),
        "blocksize": BLOCK_BYTES,
        "workdir": step.workdir,
        "mode": None,
        "workerdest": path,
    }
    cmd = remotecommand.RemoteCommand("downloadFile", args, decodeRC={None: SUCCESS, 0: SUCCESS})
    cmd.useLog(log, False)
    try:
        yield step.runCommand(cmd)
    finally:
        fp.close()
    return f"the download to {path} failed" if cmd.didFail() else ""
