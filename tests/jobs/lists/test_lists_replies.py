"""Answers to what a list watcher read: report replies in the list's thread, the short
reply for a series that does not apply, the lists page, the command and the admin form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from helpers.listmail import (
    LIST,
    ROBOT,
    demo_mails,
    finish,
    list_def,
    partial_series,
    smtp_into,
    traffic,
)
from sqlalchemy import func, select

from stackbench.jobs.lists import list_watch
from stackbench.resultsdb import db
from stackbench.resultsdb.models import ListMessage, MailList, Series

pytest_plugins = ["helpers.web", "helpers.lifecycle", "helpers.listmail"]


def test_the_report_is_a_reply_in_the_lists_thread(eng, archive, monkeypatch):
    import email
    import urllib.request
    from email import policy

    from stackbench.jobs.driver import lifecycle
    from stackbench.mail import config, outbox

    traffic(archive)
    url = archive.serve()
    lst = list_def(url)
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    v1, v2 = sorted(rep.series)
    steady, slow = [100, 101, 99, 100, 100], [70, 71, 69, 70, 70]
    finish(eng, v1, [steady, steady, steady, steady])
    shas = finish(eng, v2, [steady, steady, steady, slow])

    handler, ctl = smtp_into(archive, monkeypatch)
    try:
        monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
        monkeypatch.setenv("STACKBENCH_PUBLIC_URL", "https://bench.example.org")
        for sid in (v1, v2):
            lifecycle.queue_report(eng, sid)
        sent = outbox.deliver(eng, config.from_env())
    finally:
        ctl.stop()
    assert len(sent.sent) == 2
    # to the list alone: not the author, whose address the list's config does not name
    assert handler.rcpts == [[LIST], [LIST]]

    def read_back(msgid: str) -> email.message.EmailMessage:
        with urllib.request.urlopen(f"{url}/{msgid.strip('<>')}/raw", timeout=30) as r:
            return email.message_from_bytes(r.read(), policy=policy.default)

    with db.session(eng) as s:
        cover1, cover2 = (s.get(Series, i).message_id for i in (v1, v2))
        ids = [m for (m,) in s.execute(select(MailList.id))]
    assert ids
    from sqlalchemy import text

    with eng.connect() as c:
        sent_ids = [r[0] for r in c.execute(text("SELECT message_id FROM mail_outbox ORDER BY id"))]
    first, second = (read_back(m) for m in sent_ids)
    assert first["In-Reply-To"] == cover1 and cover1 in first["References"]
    assert str(first["Subject"]) == "Re: [PATCH 0/3] mm: compaction and THP fault demo stack"
    assert "Link: https://bench.example.org/series/" in first.get_body(("plain",)).get_content()
    assert second["In-Reply-To"] == cover2
    assert str(second["Subject"]) == (
        f"[linux-6.1] [mm/huge_memory] {shas[2][:10]}: vm-scalability.throughput -30.0% regression"
    )
    body = second.get_body(("plain",)).get_content()
    assert f"| Reported-by: {ROBOT}" in body
    assert f"| Closes: https://bench.example.org/series/{v2}" in body
    assert f"Against v1 (series #{v1})" in body
    # the reproducer of the regressing commit travels with the reply
    (att,) = second.iter_attachments()
    assert att.get_filename() == f"reproduce-{shas[2][:12]}.sh"
    script = att.get_content()
    assert script.startswith("#!/bin/sh") and "export TEST=anon-w-seq" in script
    assert f"sh reproduce-{shas[2][:12]}.sh BZIMAGE (attached)" in body

    # the replies are in the archive now; the watcher reads them and makes nothing of them
    again = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (again.read, again.skipped, again.series) == (2, 2, [])
    with db.session(eng) as s:
        reasons = s.execute(
            select(ListMessage.reason).where(ListMessage.message_id.in_(sent_ids))
        ).scalars()
        assert set(reasons) == {"stackbench's own mail"}


def test_the_lists_page_shows_series_incomplete_and_skipped(eng, archive, client, tmp_path):
    traffic(archive)
    for raw in partial_series():
        archive.deliver(raw)
    lst = list_def(str(archive.dir))
    later = datetime.now(UTC) + timedelta(hours=2)
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT, now=later)
    assert (len(rep.series), rep.incomplete) == (2, 1)
    list_watch.fetch(eng, list_def(str(tmp_path / "gone"), name="gone-list"))
    html = client.get("/lists").get_data(as_text=True)
    assert 'id="test-mm"' in html and 'id="gone-list"' in html
    for sid in rep.series:
        assert f'href="/series/{sid}"' in html
    assert "incomplete" in html and "missing 3/3" in html
    assert "touches none of mm/ (fs/namei.c)" in html
    assert "a reply in a thread" in html and "&lt;review@example.org&gt;" in html
    assert "not a patch (no [PATCH] tag)" in html and "malformed:" in html
    assert "fetch failed 1 time(s) in a row" in html and "no public-inbox epoch" in html
    v1, v2 = sorted(rep.series)
    page = client.get(f"/series/{v2}").get_data(as_text=True)
    assert 'href="/lists#test-mm"' in page
    assert f'previous version: <a href="/series/{v1}">series {v1}</a>' in page


@pytest.mark.parametrize("asked", [False, True])
def test_apply_failed_gets_a_short_reply_only_when_the_list_asks(eng, archive, asked):
    from stackbench.jobs.driver import lifecycle
    from stackbench.mail import reports

    for raw in demo_mails():
        archive.deliver(raw)
    lst = list_def(str(archive.dir), reports={"to": [LIST], "apply_failed_reply": asked})
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    lifecycle.set_state(eng, sid, "apply-failed", "git am failed", error="patch 2/3 does not apply")
    line = lifecycle.report_apply_failed(eng, sid)
    if not asked:
        assert line is None
        return
    assert line.startswith("report mail #") and line.endswith(f"queued to {LIST}")
    mail = reports.series_report(eng, sid)
    assert mail.subject == "Re: [PATCH 0/3] mm: compaction and THP fault demo stack"
    assert "Why: patch 2/3 does not apply" in mail.body
    assert lifecycle.report_apply_failed(eng, sid) is None  # once


def test_the_lists_command_fetches_and_shows(eng, archive, tmp_path, monkeypatch, capsys):
    import yaml

    from stackbench import cli

    for raw in demo_mails():
        archive.deliver(raw)
    folder = tmp_path / "lists"
    folder.mkdir()
    data = {"name": "cli-mm", "archive": str(archive.dir), "tree": "linux-6.1"}
    (folder / "cli-mm.yaml").write_text(yaml.safe_dump(data))
    (folder / "broken.yaml").write_text("name: broken\narchive: x\n")
    monkeypatch.setenv("STACKBENCH_LISTS", str(folder))
    monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
    # a broken file is one line naming it and the field, no traceback
    assert cli.main(["lists", "fetch"]) == 1
    err = capsys.readouterr().err
    assert "broken.yaml" in err and "tree" in err and "Traceback" not in err
    (folder / "broken.yaml").unlink()
    assert cli.main(["lists", "fetch", "cli-mm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cli-mm: 4 new message(s), 0 skipped, 0 seen before; series made: #")
    assert cli.main(["lists", "show"]) == 0
    out = capsys.readouterr().out
    assert "cli-mm: enabled; archive" in out and "4 series mail(s), 0 skipped" in out
    assert "linux-mm: disabled" in out  # the shipped example
    assert cli.main(["lists", "fetch", "nosuch"]) == 1
    assert "no mailing list named 'nosuch'" in capsys.readouterr().err


def test_a_list_declared_in_the_admin_is_watched(eng, archive, client):
    from helpers.web import add_tree, add_user, csrf_of, login

    add_tree(eng, "linux-6.1")
    add_user(eng, "root", admin=True)
    login(client, "root")
    token = csrf_of(client, "/admin/")
    form = {"csrf_token": token, "name": "admin-mm", "archive": str(archive.dir),
            "tree": "linux-6.1", "to": LIST, "paths": "mm/", "report_to": LIST}  # fmt: skip
    assert client.post("/admin/lists", data=form).status_code == 303
    bad = {**form, "name": "bad one"}
    r = client.post("/admin/lists", data=bad)
    assert r.status_code == 400 and "name" in r.get_data(as_text=True)
    assert client.post("/admin/lists", data={**form, "archive": "relative/path",
                                             "name": "rel"}).status_code == 400  # fmt: skip
    (lst,) = [x for x in list_watch.declared(eng) if x.name == "admin-mm"]
    assert (lst.archive, lst.to, lst.paths, lst.report_to) == (
        str(archive.dir),
        (LIST,),
        ("mm/",),
        (LIST,),
    )
    for raw in demo_mails():
        archive.deliver(raw)
    list_watch.run(eng, once=True)  # the service's round: every enabled list that is due
    with db.session(eng) as s:
        assert s.execute(select(func.count()).select_from(Series)).scalar_one() == 1
    html = client.get("/admin/").get_data(as_text=True)
    assert "admin-mm" in html
    with db.session(eng) as s:
        lid = s.execute(select(MailList.id).where(MailList.name == "admin-mm")).scalar_one()
    client.post(f"/admin/lists/{lid}/toggle", data={"csrf_token": csrf_of(client, "/admin/")})
    assert [x.enabled for x in list_watch.declared(eng) if x.name == "admin-mm"] == [False]
    client.post(f"/admin/lists/{lid}/delete", data={"csrf_token": csrf_of(client, "/admin/")})
    assert [x for x in list_watch.declared(eng) if x.name == "admin-mm"] == []


def test_cc_author_puts_the_author_in_the_replys_recipients(eng, archive, monkeypatch):

    from stackbench.jobs.driver import lifecycle
    from stackbench.mail import config, outbox
    from stackbench.resultsdb.models import MailOutbox

    author = "demo@stackbench.invalid"  # the From of the demo stack's mails
    for raw in demo_mails():
        archive.deliver(raw)
    lst = list_def(str(archive.dir), reports={"to": [LIST], "cc_author": True})
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    steady = [100, 101, 99, 100, 100]
    finish(eng, sid, [steady] * 4)
    handler, ctl = smtp_into(archive, monkeypatch)
    try:
        monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
        assert lifecycle.queue_report(eng, sid).endswith(f"queued to {LIST}, {author}")
        assert len(outbox.deliver(eng, config.from_env()).sent) == 1
    finally:
        ctl.stop()
    assert handler.rcpts == [[LIST, author]]
    with db.session(eng) as s:
        mail = s.execute(select(MailOutbox)).scalar_one()
        assert mail.to_addrs == [LIST, author]
        assert mail.headers["in_reply_to"] == s.get(Series, sid).message_id


def test_a_list_series_that_does_not_apply_is_apply_failed_on_its_page(eng, archive, tree, client):
    """The author's patch was made on a tree that moved on from the base: real git am
    refuses it, its page shows git's words, and no reply goes out (the list did not ask)."""
    import html

    from helpers.lifecycle import git

    from stackbench.jobs.driver import lifecycle
    from stackbench.jobs.driver.apply_stage import apply_only
    from stackbench.resultsdb.models import MailOutbox

    _repo, work, base = tree
    git(work, "checkout", "-q", "-b", "elsewhere", base)
    (work / "mm" / "compaction.c").write_text("int elsewhere;\n")
    git(work, "commit", "-q", "-am", "mm/compaction: a change never posted")
    with open(work / "mm" / "compaction.c", "a") as fh:
        fh.write("int step3;\n")
    git(work, "commit", "-q", "-am", "mm/compaction: step 3\n\nBecause 3.")
    out = archive.dir.parent / "mails"
    git(work, "format-patch", "-q", f"--to={LIST}", "-o", str(out), "-1")
    (mail,) = out.glob("*.patch")
    archive.deliver(mail.read_bytes())
    lst = list_def(str(archive.dir), tree="tiny")
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    # what the dispatcher does with a new series: apply it, then the short reply if asked
    assert apply_only(eng, sid) is None
    assert lifecycle.report_apply_failed(eng, sid) is None
    with db.session(eng) as s:
        x = s.get(Series, sid)
        (patch,) = x.patches
        assert (x.state, x.base_commit, patch.state) == ("apply-failed", base, "apply-failed")
        assert patch.commit_sha is None
        assert "patch does not apply" in patch.error, patch.error
        assert s.execute(select(func.count()).select_from(MailOutbox)).scalar_one() == 0
    page = html.unescape(client.get(f"/series/{sid}").get_data(as_text=True))
    assert "apply-failed" in page
    assert "mm/compaction.c: patch does not apply" in page
