"""Mail traffic for the mailing-list tests: the demo stack as posted (v1 and v2), an fs/-only
series, an unrelated thread, a reply, a malformed mail and seed 002, a list declared on a
real public-inbox archive, and what the watcher stored."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from conftest import SHARED
from sqlalchemy import func, select

from helpers.pubinbox import Inbox
from stackbench.kernels.lists import clean_list
from stackbench.resultsdb import db
from stackbench.resultsdb.models import ListMessage, ListThread, MailList, Series

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "patches" / "stacks" / "compaction-demo"
LIST = "test-mm@lists.example.org"
BASE = "1234567890abcdef1234567890abcdef12345678"
ROBOT = "stackbench <robot@stackbench.example.org>"


def demo_mails(version: int = 1, tag: str = "") -> list[bytes]:
    """The demo stack as posted to the list: cover (with base-commit:) and three patches
    threaded under it; ``version`` > 1 renames Message-IDs and tags subjects."""
    out = []
    for f in sorted(DEMO.glob("000*.patch")):
        text = f.read_text()
        text = re.sub(r"\A(From [0-9a-f]+ .*\n)", "", text)
        text = text.replace("Subject: [PATCH ", f"To: {LIST}\nSubject: [PATCH {tag}")
        if version > 1:
            text = text.replace(".git.demo@", f".v{version}.git.demo@")
        if "0000-cover" in f.name:
            text = text.replace("\n-- \n", f"\nbase-commit: {BASE}\n-- \n", 1)
        out.append(text.encode())
    return out


FS_PATCH = f"""From: Someone <someone@example.org>
To: {LIST}
Subject: [PATCH] fs: spell a comment right
Message-ID: <fs-only@example.org>
Date: Tue, 16 Jan 2024 10:00:00 +0000

A comment said "teh".

Signed-off-by: Someone <someone@example.org>
---
 fs/namei.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/fs/namei.c b/fs/namei.c
--- a/fs/namei.c
+++ b/fs/namei.c
@@ -1,1 +1,1 @@
-/* teh */
+/* the */
""".encode()

UNRELATED = f"""From: Asker <asker@example.org>
To: {LIST}
Subject: Why does kswapd wake so often?
Message-ID: <question@example.org>
Date: Tue, 16 Jan 2024 11:00:00 +0000

A question, no patch.
""".encode()

REPLY = f"""From: Reviewer <reviewer@example.org>
To: {LIST}
Subject: Re: [PATCH 0/3] mm: compaction and THP fault demo stack
Message-ID: <review@example.org>
In-Reply-To: <cover.1795306855.git.demo@stackbench.invalid>
References: <cover.1795306855.git.demo@stackbench.invalid>
Date: Tue, 16 Jan 2024 12:00:00 +0000

Looks good, but have you measured it?

diff --git a/mm/compaction.c b/mm/compaction.c
--- a/mm/compaction.c
+++ b/mm/compaction.c
@@ -1,1 +1,1 @@
-a
+b
""".encode()

MALFORMED = f"""From: Fuzzer <fuzz@example.org>
To: {LIST}
Subject: [PATCH 99999999999999/3] mm: overflow the counter
Message-ID: <hostile@example.org>
Date: Tue, 16 Jan 2024 13:00:00 +0000

diff --git a/mm/x.c b/mm/x.c
""".encode()


def partial_series() -> list[bytes]:
    """Two of a three-patch series touching mm/ (its 3/3 never arrives)."""
    out = []
    for i in (0, 1, 2):
        diff = "" if i == 0 else (
            f"---\n mm/slub.c | 2 +-\n\ndiff --git a/mm/slub.c b/mm/slub.c\n"
            f"--- a/mm/slub.c\n+++ b/mm/slub.c\n@@ -{i},1 +{i},1 @@\n-x{i}\n+y{i}\n"
        )  # fmt: skip
        irt = "" if i == 0 else "In-Reply-To: <slub-0@example.org>\n"
        out.append(
            f"From: Slab <slab@example.org>\nTo: {LIST}\n"
            f"Subject: [PATCH {i}/3] mm/slub: part {i}\nMessage-ID: <slub-{i}@example.org>\n"
            f"{irt}Date: Wed, 17 Jan 2024 10:00:0{i} +0000\n\nPart {i}.\n{diff}".encode()
        )
    return out


def list_def(archive: str, name: str = "test-mm", **extra):
    data = {
        "name": name,
        "archive": archive,
        "tree": "linux-6.1",
        "filters": {"to": [LIST], "subject_prefix": ["PATCH", "RFC"], "paths": ["mm/"]},
        "reports": {"to": [LIST]},
        "complete_within": 3600,
        **extra,
    }
    return clean_list(data, Path(f"{name}.yaml"))


# a real list mail (its headers folded into one line when it was saved): traffic too
SEED = SHARED / "seeds" / "002_c49929674e182e2f.txt"
SKIPPED = 4 if SEED.exists() else 3


def traffic(box: Inbox) -> None:
    if SEED.exists():
        box.deliver(SEED.read_bytes())
    v1 = demo_mails()
    for raw in v1:
        box.deliver(raw)
    box.deliver(REPLY)
    box.deliver(FS_PATCH)
    box.deliver(UNRELATED)
    box.deliver(MALFORMED)
    for raw in demo_mails(2, "v2 "):
        box.deliver(raw)
    box.import_again(v1[2])  # patch 2/3 once more, same Message-ID


def counts(eng, name: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    with db.session(eng) as s:
        lid = s.execute(select(MailList.id).where(MailList.name == name)).scalar_one()
        kinds = dict(
            s.execute(
                select(ListMessage.kind, func.count())
                .where(ListMessage.list_id == lid)
                .group_by(ListMessage.kind)
            ).all()
        )
        threads = s.execute(
            select(ListThread.title, ListThread.state).where(ListThread.list_id == lid)
        ).all()
    return kinds, sorted((t, st) for t, st in threads)


def runs(commit: str, name: str, values):
    from stackbench.resultsdb import ingest as ig

    return [
        ig.RunData(
            job=ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq"}),
            kernel=ig.KernelSpec(commit, name=name),
            machine=ig.MachineSpec("qemu-2cpu"),
            iteration=i,
            samples={"vm-scalability.throughput": [v]},
        )
        for i, v in enumerate(values)
    ]


def finish(eng, series_id: int, values: list[list[float]]) -> list[str]:
    """The series as the dispatcher leaves it: each patch a commit with stored runs."""
    from sqlalchemy import text

    from stackbench.resultsdb import ingest as ig

    shas = [f"{series_id}{i}".ljust(40, "e") for i in range(1, len(values))]
    ig.ingest(eng, runs(BASE, "base", values[0]))
    for i, (sha, vals) in enumerate(zip(shas, values[1:], strict=True), start=1):
        ig.ingest(eng, runs(sha, f"{i}/3", vals))
    with db.session(eng) as s:
        series = s.get(Series, series_id)
        for p, sha in zip(series.patches, shas, strict=True):
            p.commit_sha, p.state = sha, "applied"
        series.base_commit, series.state = BASE, "done"
        s.execute(
            text("UPDATE kernel_build SET series_id = :s WHERE commit = ANY(:c)"),
            {"s": series_id, "c": [BASE, *shas]},
        )
    return shas


class IntoInbox:
    """An SMTP server that delivers what it receives into the list's archive."""

    def __init__(self, box: Inbox) -> None:
        self.box = box
        self.rcpts: list[list[str]] = []
        self.mails: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd API)
        self.rcpts.append(list(envelope.rcpt_tos))
        self.mails.append(envelope.content)
        self.box.deliver(envelope.content)
        return "250 OK"


def smtp_into(box: Inbox, monkeypatch) -> tuple[IntoInbox, Controller]:
    """An SMTP server on a free local port, started, that delivers into ``box``, with
    stackbench's SMTP settings pointed at it; the caller stops the controller."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("STACKBENCH_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("STACKBENCH_SMTP_PORT", str(port))
    handler = IntoInbox(box)
    ctl = Controller(handler, hostname="127.0.0.1", port=port)
    ctl.start()
    return handler, ctl


@pytest.fixture
def archive(tmp_path):
    """The list's public-inbox archive, served while the test runs."""
    box = Inbox(tmp_path, LIST)
    yield box
    box.stop()
