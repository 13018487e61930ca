"""List integrity against a real public-inbox archive: only the series' sender fills its
slots, a Message-ID another sender used first hides nothing, Message-IDs are kept whole up
to what a mail header line holds (and refused beyond it), and the page shows the author,
subject and date the applied commits carry."""

from __future__ import annotations

import email
import re
from email import policy

import pytest
from helpers.lifecycle import git
from helpers.listmail import (
    LIST,
    ROBOT,
    demo_mails,
    finish,
    list_def,
    smtp_into,
)
from sqlalchemy import func, select

from stackbench.jobs.lists import list_watch
from stackbench.patches import parser
from stackbench.resultsdb import db
from stackbench.resultsdb.models import ListMessage, ListThread, Series

pytest_plugins = ["helpers.web", "helpers.lifecycle", "helpers.listmail"]

STRANGER = "Mallory <mallory@example.org>"
COVER_ID = "cover.1795306855.git.demo@stackbench.invalid"


def posted(work, base: str, out) -> list[bytes]:
    """The tree fixture's two patches as posted: a cover letter and 1/2, 2/2 under it."""
    git(work, "format-patch", "-q", "--cover-letter", "--thread=shallow", f"--to={LIST}",
        "-o", str(out), f"{base}..HEAD")  # fmt: skip
    mails = [f.read_bytes() for f in sorted(out.glob("*.patch"))]
    mails[0] = mails[0].replace(b"*** BLURB HERE ***", b"Two steps, measured.")
    return mails


def msgid(raw: bytes) -> str:
    return parser.clean_msgid(email.message_from_bytes(raw).get("Message-ID")) or ""


def forged(real: bytes, *, message_id: str | None = None) -> bytes:
    """Another sender's [PATCH 2/2] in the same thread: the same subject, another diff
    (which applies as well), its own Message-ID unless it takes ``message_id``."""
    text = real.decode()
    text = re.sub(r"^From: .*$", f"From: {STRANGER}", text, count=1, flags=re.M)
    text = re.sub(r"^Message-ID: <[^>]+>$", f"Message-ID: {message_id or '<forged@evil>'}",
                  text, count=1, flags=re.M | re.I)  # fmt: skip
    assert "+int step2;" in text
    return text.replace("+int step2;", "+int evil;").encode()


def applies_the_real_patches(eng, sid: int, repo, work) -> None:
    from stackbench.jobs.driver.apply_stage import apply_only

    kernels = apply_only(eng, sid)
    assert kernels is not None
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert x.state == "applied"
        head = sorted(x.patches, key=lambda p: p.idx)[-1].commit_sha
    assert git(repo, "rev-parse", f"{head}^{{tree}}") == git(work, "rev-parse", "HEAD^{tree}")


def test_a_strangers_patch_never_fills_a_slot(eng, archive, tree, client, tmp_path):
    repo, work, base = tree
    cover, one, two = posted(work, base, tmp_path / "mails")
    for raw in (cover, one, forged(two)):
        archive.deliver(raw)
    lst = list_def(str(archive.dir), tree="tiny")
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert rep.series == [], "the stranger's 2/2 completed the series"
    archive.deliver(two)
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert (x.message_id, x.submitter_email) == (msgid(cover), "alice.dev@example.org")
        assert x.cover_letter.startswith("Two steps, measured.")
        assert [p.message_id for p in sorted(x.patches, key=lambda p: p.idx)] == [
            msgid(one), msgid(two)
        ]  # fmt: skip
        kind, reason = s.execute(
            select(ListMessage.kind, ListMessage.reason).where(
                ListMessage.message_id == "<forged@evil>"
            )
        ).one()
    assert kind == "skipped"
    assert reason == "from mallory@example.org, not the series' sender alice.dev@example.org"
    applies_the_real_patches(eng, sid, repo, work)
    html = client.get("/lists").get_data(as_text=True)
    assert "not the series&#39; sender alice.dev@example.org" in html


def test_slots_filled_only_by_mixed_senders_end_incomplete_with_why(eng, archive, tree, tmp_path):
    from datetime import UTC, datetime, timedelta

    _repo, work, base = tree
    cover, one, two = posted(work, base, tmp_path / "mails")
    for raw in (cover, one, forged(two)):
        archive.deliver(raw)
    later = datetime.now(UTC) + timedelta(hours=2)
    rep = list_watch.fetch(
        eng, list_def(str(archive.dir), tree="tiny"), own_sender=ROBOT, now=later
    )
    assert (rep.series, rep.incomplete) == ([], 1)
    with db.session(eng) as s:
        t = s.execute(select(ListThread)).scalar_one()
    assert (t.state, t.reason) == (
        "incomplete",
        "no sender sent all 2 patches after 3600 s "
        "(from alice.dev@example.org, mallory@example.org)",
    )


def test_a_message_id_used_first_by_another_sender_hides_nothing(eng, archive, tree, tmp_path):
    """Before each real mail arrives a stranger's takes its Message-ID: a question the
    cover letter's, a copy of 1/2 (the same body) 1/2's, another 2/2 the real 2/2's.
    public-inbox keeps both mails of each id, and so does the watcher; the series is the
    real one, with its cover."""
    repo, work, base = tree
    cover, one, two = posted(work, base, tmp_path / "mails")
    question = (
        f"From: {STRANGER}\nTo: {LIST}\nSubject: what is this about?\n"
        f"Message-ID: {msgid(cover)}\nDate: Tue, 16 Jan 2024 10:00:00 +0000\n\nA question.\n"
    ).encode()
    copy = re.sub(rb"^From: .*$", f"From: {STRANGER}".encode(), one, count=1, flags=re.M)
    squats = (question, copy, forged(two, message_id=msgid(two)))
    for raw in (*squats, cover, one, two):
        archive.deliver(raw)
    lst = list_def(str(archive.dir), tree="tiny")
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (rep.read, rep.duplicates, len(rep.series)) == (6, 0, 1), rep.line()
    (sid,) = rep.series
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert x.message_id == msgid(cover) and x.cover_letter.startswith("Two steps")
        rows = s.execute(
            select(ListMessage.message_id, ListMessage.sender, ListMessage.kind).order_by(
                ListMessage.id
            )
        ).all()
        names = {msgid(cover): "cover", msgid(one): "1/2", msgid(two): "2/2"}
        assert [(names[m], who, kind) for m, who, kind in rows] == [
            ("cover", "mallory@example.org", "skipped"),
            ("1/2", "mallory@example.org", "skipped"),
            ("2/2", "mallory@example.org", "skipped"),
            ("cover", "alice.dev@example.org", "cover"),
            ("1/2", "alice.dev@example.org", "patch"),
            ("2/2", "alice.dev@example.org", "patch"),
        ]
    applies_the_real_patches(eng, sid, repo, work)
    again = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (again.read, again.series) == (0, [])


def long_id(length: int) -> str:
    domain = "@example.org>"
    return "<" + "x" * (length - 1 - len(domain)) + domain


def with_cover_id(mails: list[bytes], new_id: str) -> list[bytes]:
    """The demo mails with the cover letter's Message-ID replaced, every header that names
    it folded as RFC 5322 has a long one: the id alone on its continuation line."""
    return [raw.replace(f": <{COVER_ID}>".encode(), f":\n {new_id}".encode()) for raw in mails]


@pytest.mark.parametrize("length", [990, 997])
def test_a_long_message_id_threads_on_intake_and_in_the_report(eng, archive, monkeypatch, length):
    """990 characters, and 997: the longest that fits on a folded header line."""
    from stackbench.jobs.driver import lifecycle
    from stackbench.mail import config, outbox

    cover_id = long_id(length)
    for raw in with_cover_id(demo_mails(), cover_id):
        archive.deliver(raw)
    lst = list_def(str(archive.dir))
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert x.message_id == cover_id and x.cover_letter  # the cover is in its series
        assert x.meta["list"]["thread"] == cover_id
        assert s.execute(select(func.count()).select_from(ListThread)).scalar_one() == 1
    steady = [100, 101, 99, 100, 100]
    finish(eng, sid, [steady] * 4)
    handler, ctl = smtp_into(archive, monkeypatch)
    try:
        monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
        lifecycle.queue_report(eng, sid)
        assert len(outbox.deliver(eng, config.from_env()).sent) == 1
    finally:
        ctl.stop()
    (raw,) = handler.mails
    assert max(len(line) for line in raw.splitlines()) <= 998
    back = email.message_from_bytes(raw, policy=policy.default)
    assert str(back["In-Reply-To"]).strip() == cover_id
    assert cover_id in str(back["References"]).split()
    # the archive threads it under the cover too: the watcher reads it as the reply it is
    again = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (again.read, again.skipped, again.series) == (1, 1, [])


def test_a_1200_character_message_id_is_refused_with_its_reason(
    eng, archive, client, tree, tmp_path, capsys
):
    from stackbench.cli import main

    cover_id = long_id(1200)
    mails = with_cover_id(demo_mails(), cover_id)
    for raw in mails:
        archive.deliver(raw)
    rep = list_watch.fetch(eng, list_def(str(archive.dir)), own_sender=ROBOT)
    assert (rep.series, rep.read, rep.skipped) == ([], 4, 4)
    with db.session(eng) as s:
        rows = s.execute(select(ListMessage.message_id, ListMessage.reason)).all()
    reasons = sorted(r for _, r in rows)
    assert reasons[0] == (
        "malformed: In-Reply-To holds an id of 1200 characters; at most 997 fit on a mail "
        "header line (RFC 5322)"
    )
    assert reasons[-1].startswith("malformed: Message-ID holds an id of 1200 characters")
    assert all(len(m) < 100 and "xxxx" not in m for m, _ in rows)  # nothing cut and kept
    assert "Message-ID holds an id of 1200 characters" in client.get("/lists").get_data(
        as_text=True
    )

    mbox = tmp_path / "long.mbox"
    mbox.write_bytes(parser.join_mboxrd(mails))
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--no-wait"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stackbench: error: ") and len(err.strip().splitlines()) == 1
    assert "Message-ID holds an id of 1200 characters" in err
    with db.session(eng) as s:
        assert s.execute(select(func.count()).select_from(Series)).scalar_one() == 0


def test_an_in_body_from_is_the_commits_author_on_the_page_and_in_the_api(
    eng, tree, client, tmp_path
):
    from stackbench.cli import main
    from stackbench.jobs.driver.apply_stage import apply_only

    _repo, work, base = tree
    out = tmp_path / "m"
    git(work, "format-patch", "-q", "-o", str(out), f"{base}..HEAD")
    one, two = (f.read_bytes() for f in sorted(out.glob("*.patch")))
    body = (
        b"From: Carol Kernel <carol@example.org>\n"
        b"Subject: mm/compaction: step one, as Carol wrote it\n"
        b"Date: Wed, 3 Jan 2024 09:30:00 +0100\n\n"
    )
    head, rest = one.split(b"\n\n", 1)
    mbox = tmp_path / "series.mbox"
    mbox.write_bytes(head + b"\n\n" + body + rest + b"\n" + two)
    assert main(["submit", "--mbox", str(mbox), "--tree", "tiny", "--no-wait"]) == 0
    with db.session(eng) as s:
        sid = s.execute(select(Series.id)).scalar_one()
    assert apply_only(eng, sid) is not None
    first, second = client.get(f"/api/series/{sid}/patches").get_json()["patches"]
    assert (first["author"], first["author_email"]) == ("Carol Kernel", "carol@example.org")
    assert first["subject"] == "mm/compaction: step one, as Carol wrote it"
    assert first["date"] == "2024-01-03T09:30:00+01:00"
    assert first["mail"]["author_email"] == "alice.dev@example.org"
    assert first["mail"]["subject"] == "mm/compaction: step 1"
    assert (second["author_email"], second["mail"]) == ("alice.dev@example.org", {})
    page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert (
        'Carol Kernel &lt;carol@example.org&gt; <span class="muted">(sent by Alice Dev '
        "&lt;alice.dev@example.org&gt;)</span>"
    ) in page
    carols = "mm/compaction: step one, as Carol wrote it"
    assert (
        f'class="patch-subject">{carols} <span class="muted">(mail: mm/compaction: step 1)' in page
    )
    assert f'<br><span class="muted">{carols}</span>' in page  # the commits x jobs matrix
