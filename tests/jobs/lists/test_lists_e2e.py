"""From the list to the verdict and back, with the services up, in one run: a list's traffic
(a v1 series, its v2, an fs/-only series, an unrelated thread, a reply to the cover, a copy
of a v1 patch, a malformed mail and a real list mail), posted to a real public-inbox archive
served by public-inbox-httpd, is read by the list watcher service; the two mm series are
applied with git am, run by the dispatcher on a Buildbot master with a dry-kernel worker,
and each report, sent over SMTP into the same archive, is read back threaded under its own
cover letter; the watcher then makes nothing of the replies, and a further fetch reads
nothing new."""

from __future__ import annotations

import email
import gzip
import urllib.request
from email import policy
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from helpers.lifecycle import finished, git, wait_for  # noqa: E402
from helpers.listmail import LIST, MALFORMED, ROBOT, SEED, UNRELATED, smtp_into  # noqa: E402
from helpers.pubinbox import Inbox  # noqa: E402
from test_lifecycle_buildbot import JOB, RUNS  # noqa: E402
from test_lifecycle_buildbot import stack as stack  # noqa: E402 - the services' fixture

from stackbench.jobs.driver import dispatcher_service  # noqa: E402
from stackbench.jobs.lists import list_watch  # noqa: E402
from stackbench.kernels.lists import clean_list  # noqa: E402
from stackbench.mail import config, outbox  # noqa: E402
from stackbench.resultsdb import db, series_runs_store  # noqa: E402
from stackbench.resultsdb.models import ListMessage, ListThread, MailOutbox, Series  # noqa: E402

pytest_plugins = ["helpers.lifecycle"]
TITLE = "mm/compaction: two steps"


def posted(work: Path, out: Path, rng: str, *opts: str) -> list[bytes]:
    """The commits of ``rng`` as their author posts them: git format-patch to the list,
    the cover letter's subject and blurb filled in by hand as people do."""
    git(work, "format-patch", "-q", "--thread=shallow", f"--to={LIST}", "-o", str(out),
        *opts, rng)  # fmt: skip
    mails = []
    for f in sorted(out.glob("*.patch")):
        text = f.read_text().replace("*** SUBJECT HERE ***", TITLE)
        mails.append(text.replace("*** BLURB HERE ***", "Two steps for compaction.").encode())
    return mails


def commit(work: Path, path: str, line: str, message: str) -> None:
    f = work / path
    f.parent.mkdir(exist_ok=True)
    with open(f, "a") as fh:
        fh.write(line)
    git(work, "add", path)
    git(work, "commit", "-q", "-m", message)


def list_traffic(work: Path, base: str, tmp: Path) -> dict[str, list[bytes]]:
    """Every kind of mail the watcher must sort, made from the tiny tree: v1 is the clone's
    two mm patches; v2 the same two steps reworked; fs is one patch touching fs/ only."""
    v1 = posted(work, tmp / "v1", f"{base}..main", "--cover-letter", f"--base={base}")
    git(work, "checkout", "-q", "-b", "v2", base)
    commit(work, "mm/compaction.c", "int step1;\n", "mm/compaction: step 1\n\nBecause 1, v2.")
    commit(work, "mm/compaction.c", "long step2;\n", "mm/compaction: step 2\n\nBecause 2, v2.")
    v2 = posted(work, tmp / "v2", f"{base}..v2", "--cover-letter", f"--base={base}", "-v2")
    # git names a cover letter by the second it was made: v1's and v2's can share one
    v2 = [m.replace(b"<cover.", b"<cover-v2.") for m in v2]
    git(work, "checkout", "-q", "-b", "fs", base)
    commit(work, "fs/namei.c", "/* the */\n", "fs: spell a comment right")
    fs = posted(work, tmp / "fs", f"{base}..fs", f"--base={base}")
    git(work, "checkout", "-q", "main")
    cover = email.message_from_bytes(v1[0], policy=policy.default)
    reply = (
        f"From: Reviewer <reviewer@example.org>\nTo: {LIST}\n"
        f"Subject: Re: {cover['Subject']}\nMessage-ID: <review@example.org>\n"
        f"In-Reply-To: {cover['Message-ID']}\nReferences: {cover['Message-ID']}\n\n"
        "Have you measured it?\n"
    ).encode()
    return {"v1": v1, "v2": v2, "fs": fs, "reply": [reply]}


# 40-70 s here; stop 33's CI stalled in it with no trace: a stall now fails it with its stack
@pytest.mark.timeout(600)
def test_the_lists_traffic_is_run_and_answered_in_its_threads(
    eng, tree, stack, tmp_path, monkeypatch
):
    repo, work, base = tree
    box = Inbox(tmp_path / "pi", LIST)
    url = box.serve()
    mails = list_traffic(work, base, tmp_path)
    for raw in [*mails["v1"], *mails["reply"], *mails["fs"], UNRELATED, MALFORMED]:
        box.deliver(raw)
    if SEED.exists():
        box.deliver(SEED.read_bytes())
    for raw in mails["v2"]:
        box.deliver(raw)
    box.import_again(mails["v1"][1])  # v1's 1/2 once more, same Message-ID
    folder = tmp_path / "lists"
    folder.mkdir()
    data = {
        "name": "tiny-mm", "archive": url, "tree": "tiny", "interval": 1,
        "filters": {"to": [LIST], "paths": ["mm/"]}, "jobs": [JOB], "runs": RUNS,
        "reports": {"to": [LIST]},
    }  # fmt: skip
    (folder / "tiny-mm.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("STACKBENCH_LISTS", str(folder))
    monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
    handler, ctl = smtp_into(box, monkeypatch)
    print(dispatcher_service.start_lists())

    def all_series() -> list[int]:
        with db.session(eng) as s:
            return s.execute(select(Series.id).order_by(Series.version)).scalars().all()

    try:
        wait_for("the watcher to make the series", lambda: len(all_series()) >= 2, timeout=60)
        v1, v2 = all_series()  # exactly two: v1 and v2, none of the rest
        heads = {v1: "main", v2: "v2"}
        covers = {}
        for sid in (v1, v2):
            x = wait_for(f"series {sid} to finish", lambda s=sid: finished(eng, s), timeout=300)
            assert x.state == "done", (sid, x.state, x.error)
            assert x.base_commit == base and len(x.patches) == 2
            assert all(p.commit_sha and p.state == "applied" for p in x.patches)
            # git am made the very trees the author posted, on the base named in the mail
            top = sorted(x.patches, key=lambda p: p.idx)[-1].commit_sha
            assert git(repo, "rev-parse", f"{top}^{{tree}}") == git(
                work, "rev-parse", f"{heads[sid]}^{{tree}}"
            )
            assert git(repo, "merge-base", "--is-ancestor", base, top) == ""
            covers[sid] = x.message_id
        with db.session(eng) as s:
            assert s.get(Series, v2).meta["previous_version"] == v1
        sent = outbox.deliver(eng, config.from_env())
        assert len(sent.sent) == 2, sent
        # nothing else was answered: two mails, each to the list alone
        assert handler.rcpts == [[LIST], [LIST]]
        with db.session(eng) as s:
            assert s.execute(select(func.count()).select_from(MailOutbox)).scalar_one() == 2
            reply_of = {
                sid: s.get(
                    MailOutbox, series_runs_store.current(s, sid).report_mail["id"]
                ).message_id
                for sid in (v1, v2)
            }
        for sid, tag in ((v1, "PATCH"), (v2, "PATCH v2")):
            with urllib.request.urlopen(f"{url}/{reply_of[sid].strip('<>')}/raw", timeout=30) as r:
                reply = email.message_from_bytes(r.read(), policy=policy.default)
            assert reply["In-Reply-To"] == covers[sid] and covers[sid] in reply["References"]
            # the dry worker's metric is no headline: never a regression subject
            assert str(reply["Subject"]) == f"Re: [{tag} 0/2] {TITLE}"
            assert str(reply["To"]) == LIST
        for sid, other in ((v1, v2), (v2, v1)):
            # the archive's own view of the cover's thread, as a list reader gets it
            thread = f"{url}/{covers[sid].strip('<>')}/t.mbox.gz"
            with urllib.request.urlopen(thread, timeout=30) as r:
                mbox = gzip.decompress(r.read()).decode(errors="replace")
            assert reply_of[sid] in mbox and covers[sid] in mbox
            assert reply_of[other] not in mbox

        def replies_read():
            with db.session(eng) as s:
                return (
                    s.execute(
                        select(ListMessage.reason).where(
                            ListMessage.message_id.in_(reply_of.values())
                        )
                    )
                    .scalars()
                    .all()
                )

        wait_for("the watcher to read both replies", lambda: len(replies_read()) == 2)
        assert set(replies_read()) == {"stackbench's own mail"}
    finally:
        print(dispatcher_service.stop_lists())
        ctl.stop()
        log = dispatcher_service.logfile("lists")
        if log.exists():
            print(log.read_text()[-3000:])
    try:
        # the service is stopped: a further fetch reads nothing new and makes nothing
        again = list_watch.fetch(eng, clean_list(data, Path("tiny-mm.yaml")))
        assert (again.error, again.read, again.series) == ("", 0, [])
    finally:
        box.stop()
    assert all_series() == [v1, v2]
    with db.session(eng) as s:
        kinds = dict(
            s.execute(select(ListMessage.kind, func.count()).group_by(ListMessage.kind)).all()
        )
        reasons = dict(s.execute(select(ListMessage.message_id, ListMessage.reason)).all())
        threads = sorted(s.execute(select(ListThread.title, ListThread.state)).all())
    # v1 and v2: a cover and 2 patches each; the fs/ patch; its copy of 1/2 stored once
    skipped = 5 + SEED.exists()  # reply, question, malformed, the 2 replies, the seed
    assert kinds == {"cover": 2, "patch": 5, "skipped": skipped}, kinds
    assert reasons["<review@example.org>"] == "a reply in a thread"
    assert reasons["<question@example.org>"] == "not a patch (no [PATCH] tag)"
    assert reasons["<hostile@example.org>"].startswith("malformed:")
    assert threads == [
        ("fs: spell a comment right", "filtered"), (TITLE, "series"), (TITLE, "series")
    ]  # fmt: skip
