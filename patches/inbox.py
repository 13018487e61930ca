"""Reading a public-inbox archive the way lei and grokmirror do: through its own git
repositories, with nothing but git.

A public-inbox v2 inbox keeps its messages in "epochs", git repositories ``git/0.git``,
``git/1.git`` ... (served by public-inbox-httpd, and so by lore.kernel.org, as clonable
``<inbox-url>/0``, ``<inbox-url>/1`` ...). Each commit on an epoch's ``master`` adds one
message as the blob ``m`` (a commit that removes a message has none). We mirror each epoch
into a bare repository of our own and read the commits after the last one we read.

Why git and not b4 or lei: b4 fetches one thread by Message-ID (it cannot tell what is new
on a list), and lei needs its own store and daemon; an epoch fetch is incremental, works
over public-inbox-httpd's clone URLs and on a local inbox, and a commit sha is a cursor
that survives restarts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stackbench import gitcmd
from stackbench.errors import StackbenchError
from stackbench.proc import CommandError

# an epoch holds about 1 GB of mail; lore's linux-mm has fewer than ten
MAX_EPOCHS = 1000
# commits read per batch: each batch is stored in one transaction with its cursor
BATCH = 200


class ArchiveError(StackbenchError):
    """The archive cannot be reached or read (one line; the watcher retries later)."""


@dataclass(frozen=True)
class Message:
    epoch: int
    commit: str
    raw: bytes


def epoch_source(archive: str, epoch: int) -> str:
    """Where epoch N is fetched from: ``<url>/N`` for public-inbox-httpd, the
    ``git/N.git`` folder of a local inbox."""
    if archive.startswith(("http://", "https://")):
        return f"{archive.rstrip('/')}/{epoch}"
    return os.fspath(Path(archive) / "git" / f"{epoch}.git")


def _exists(archive: str, epoch: int, timeout: float) -> bool:
    source = epoch_source(archive, epoch)
    if not source.startswith(("http://", "https://")):
        return Path(source).is_dir()
    out = gitcmd.git(None, "ls-remote", "--heads", source, check=False, timeout=timeout)
    if out.returncode == 0:
        return True
    if "not found" in out.stdout.lower() or "404" in out.stdout:
        return False
    raise ArchiveError(f"{source}: {_last_line(out.stdout)}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def sync(archive: str, mirror: Path, known: int = 0, timeout: float = 600) -> list[int]:
    """Fetch every epoch of ``archive`` into bare repositories ``mirror/N.git``; the epoch
    numbers present. Epochs are numbered from 0 without gaps; ``known`` epochs already
    mirrored are fetched again without probing (only the newest grows, but a fetch of an
    unchanged one costs one round trip). ArchiveError when the archive cannot be read."""
    mirror.mkdir(parents=True, exist_ok=True)
    epochs: list[int] = []
    for n in range(MAX_EPOCHS):
        if n >= known and not _exists(archive, n, timeout):
            break
        repo = mirror / f"{n}.git"
        if not (repo / "HEAD").exists():
            gitcmd.git(None, "init", "--quiet", "--bare", repo)
        try:
            gitcmd.git(
                repo,
                "fetch",
                "--quiet",
                "--no-tags",
                epoch_source(archive, n),
                "+refs/heads/master:refs/heads/master",
                timeout=timeout,
            )
        except CommandError as exc:
            raise ArchiveError(f"{epoch_source(archive, n)}: {_last_line(exc.output)}") from None
        epochs.append(n)
    if not epochs:
        raise ArchiveError(f"{archive}: no public-inbox epoch (git/0.git) found")
    return epochs


def head(mirror: Path, epoch: int) -> str | None:
    return gitcmd.rev_parse(mirror / f"{epoch}.git", "refs/heads/master")


def new_messages(mirror: Path, epoch: int, after: str | None) -> Iterator[list[Message]]:
    """The messages of ``epoch`` committed after ``after`` (None: all), oldest first, in
    batches of at most BATCH; a batch's last message's commit is the cursor to keep."""
    repo = mirror / f"{epoch}.git"
    tip = head(mirror, epoch)
    if tip is None or tip == after:
        return
    span = f"{after}..{tip}" if after and gitcmd.is_ancestor(repo, after, tip) else tip
    commits = gitcmd.rev_list(repo, "--reverse", "--first-parent", span)
    for start in range(0, len(commits), BATCH):
        chunk = commits[start : start + BATCH]
        blobs = gitcmd.read_blobs(repo, [f"{c}:m" for c in chunk])
        yield [
            Message(epoch, c, b if b is not None else b"")
            for c, b in zip(chunk, blobs, strict=True)
        ]
