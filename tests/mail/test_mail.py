"""Mail through a real SMTP server (aiosmtpd on loopback): content, threading, header
safety, and delivery that survives the server being down."""

from __future__ import annotations

import email
import socket
from datetime import UTC, datetime, timedelta
from email import policy

import pytest
from aiosmtpd.controller import Controller
from helpers.intake import submit_series
from helpers.listmail import runs
from sqlalchemy import text

from stackbench import cli
from stackbench.errors import InputError
from stackbench.jobs.executors.jobspecs import format_job_spec
from stackbench.mail import outbox, reports
from stackbench.mail.config import MailConfig
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import series_runs_store
from stackbench.resultsdb.models import Patch, Regression, Series


class Capture:
    def __init__(self) -> None:
        self.messages: list[email.message.Message] = []
        self.envelopes: list[list[str]] = []
        self.raw: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd API)
        self.messages.append(email.message_from_bytes(envelope.content, policy=policy.default))
        self.envelopes.append(list(envelope.rcpt_tos))
        self.raw.append(envelope.content)
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp():
    port = _free_port()
    handler = Capture()
    ctl = Controller(handler, hostname="127.0.0.1", port=port)
    ctl.start()
    yield handler, port
    ctl.stop()


def _cfg(port: int) -> MailConfig:
    return MailConfig(
        host="127.0.0.1",
        port=port,
        list_addr="linux-mm@kvack.example",
        sender="stackbench <bot@stackbench.example>",
        timeout_s=5,
    )


HOSTILE = "mm: <script>alert(1)</script>\r\nBcc: victim@example.com"


def _series(eng, submitter_email: str = "dev@example.com") -> int:
    """A finished series owned by the account "dev" (verified address dev@example.com)."""
    from sqlalchemy.orm import Session

    from stackbench.mail import accounts

    with Session(eng) as s, s.begin():
        owner = accounts.create_user(s, "dev", password="pw-dev-123", email="dev@example.com")
        owner_id = owner.id
    base, c1 = "b" * 40, "c" * 40
    ig.ingest(eng, runs(base, "base", [100, 101, 99, 100, 100]))
    ig.ingest(eng, runs(c1, "1/1", [70, 71, 69, 70, 70]))
    with Session(eng) as s, s.begin():
        series = Series(
            title=HOSTILE,
            version=2,
            submitter="Dev",
            submitter_email=submitter_email,
            message_id="<cover-123@example.com>",
            base_commit=base,
            state="done",
            owner_id=owner_id,
        )
        series.patches.append(
            Patch(
                idx=1,
                total=1,
                subject=HOSTILE,
                author="Dev",
                author_email="dev@example.com",
                message_id="<p1@example.com>",
                commit_sha=c1,
                state="applied",
            )
        )
        s.add(series)
        s.flush()
        s.execute(text("UPDATE kernel_build SET series_id = :s"), {"s": series.id})
        return series.id


def test_series_report_threads_under_cover_letter_and_is_header_safe(eng, smtp):
    handler, port = smtp
    sid = _series(eng)
    mail = reports.series_report(eng, sid, _cfg(port))
    reports.queue(eng, mail)
    rep = outbox.deliver(eng, _cfg(port))
    assert len(rep.sent) == 1 and len(handler.messages) == 1
    msg = handler.messages[0]
    assert msg["In-Reply-To"] == "<cover-123@example.com>"
    assert "<cover-123@example.com>" in msg["References"]
    assert msg["Bcc"] is None
    assert "victim@example.com" not in handler.envelopes[0]
    subject = str(msg["Subject"])
    assert "\n" not in subject and subject.strip().startswith("Re: [PATCH v2 0/1]")
    body = msg.get_payload(decode=True).decode()
    assert "vm-scalability.throughput" in body and "-30.0%" in body
    assert sorted(handler.envelopes[0]) == ["dev@example.com", "linux-mm@kvack.example"]


def test_threading_survives_an_81_character_message_id(eng, smtp):
    """git format-patch's per-patch IDs (the demo's) are 81 characters: In-Reply-To and
    References go out as the IDs themselves, not as RFC 2047 encoded words."""
    handler, port = smtp
    sid = _series(eng)
    cover = "<20240301120000.4242-1-dev.someone@mail.kernel-developer.example.org>"
    patch = "<058fc9b040f6e32dd6d6746d4f2d7c9f1dc517df.1795307120.git.committer@stackbench.de>"
    assert len(patch) == 81
    from sqlalchemy.orm import Session

    with Session(eng) as s, s.begin():
        series = s.get(Series, sid)
        series.message_id = cover
        series.patches[0].message_id = patch
    reports.queue(eng, reports.series_report(eng, sid, _cfg(port)))
    outbox.enqueue(
        eng, kind="test", key="p1", to=["dev@example.com"], subject="Re: x",
        body="per patch", in_reply_to=patch, references=[cover],
    )  # fmt: skip
    assert len(outbox.deliver(eng, _cfg(port)).sent) == 2
    heads = [raw.split(b"\r\n\r\n")[0].replace(b"\r\n", b"\n") for raw in handler.raw]
    assert all(b"=?" not in h for h in heads), heads
    assert f"In-Reply-To: {cover}\n".encode() in heads[0]
    assert f"In-Reply-To: {patch}\n".encode() in heads[1]
    assert f"References: {cover} {patch}\n".encode() in heads[1]
    assert handler.messages[1]["In-Reply-To"] == patch


def test_regression_report_says_direction_in_words(eng, smtp):
    from sqlalchemy.orm import Session

    handler, port = smtp
    _series(eng)
    with Session(eng) as s, s.begin():
        ids = dict(s.execute(text("SELECT commit, id FROM kernel_build")).all())
        job = s.execute(text("SELECT id FROM job")).scalar_one()
        metric = s.execute(
            text("SELECT id FROM metric WHERE name = 'vm-scalability.throughput'")
        ).scalar_one()
        reg = Regression(
            job_id=job,
            metric_id=metric,
            good_build_id=ids["b" * 40],
            bad_build_id=ids["c" * 40],
            change_pct=-30.0,
            culprit="c" * 40,
            branch="master",
            confidence=0.99,
        )
        s.add(reg)
        s.flush()
        rid = reg.id
    mail = reports.regression_report(eng, rid, _cfg(port), job_spec=format_job_spec)
    assert mail.subject.startswith("[local:master] [mm] cccccccccc: vm-scalability.throughput")
    assert "-30.0% regression" in mail.subject
    assert "30.0% drop (worse: higher is better for this metric)" in mail.body
    reports.queue(eng, mail)
    outbox.deliver(eng, _cfg(port))
    assert handler.messages[0]["In-Reply-To"] == "<p1@example.com>"


def test_delivery_retries_after_server_was_down_and_never_sends_twice(eng, smtp):
    handler, port = smtp
    down = _cfg(_free_port())  # nothing listens there
    mid = outbox.enqueue(
        eng, kind="test", key="k1", to=["a@example.com"], subject="hi", body="body\n"
    )
    # queuing the same key again is a no-op
    assert (
        outbox.enqueue(
            eng, kind="test", key="k1", to=["a@example.com"], subject="hi", body="body\n"
        )
        == mid
    )
    now = datetime.now(UTC)
    rep = outbox.deliver(eng, down, now=now)
    assert rep.deferred == [mid] and rep.sent == []
    with eng.connect() as conn:
        row = conn.execute(text("SELECT state, attempts, last_error FROM mail_outbox")).one()
    assert row.state == "pending" and row.attempts == 1 and row.last_error
    # not due yet: nothing happens even with the server up
    assert outbox.deliver(eng, _cfg(port), now=now + timedelta(seconds=1)).sent == []
    rep = outbox.deliver(eng, _cfg(port), now=now + timedelta(minutes=5))
    assert rep.sent == [mid] and len(handler.messages) == 1
    assert outbox.deliver(eng, _cfg(port), now=now + timedelta(hours=2)).sent == []
    assert len(handler.messages) == 1


def test_gives_up_after_max_attempts_and_keeps_the_mail(eng):
    cfg = _cfg(_free_port())
    cfg.max_attempts = 2
    mid = outbox.enqueue(eng, kind="t", key="k2", to=["a@example.com"], subject="s", body="b")
    t = datetime.now(UTC)
    outbox.deliver(eng, cfg, now=t)
    rep = outbox.deliver(eng, cfg, now=t + timedelta(hours=1))
    assert rep.failed == [mid]
    with eng.connect() as conn:
        assert conn.execute(text("SELECT state FROM mail_outbox")).scalar_one() == "failed"


def test_mail_list_shows_each_mail_and_why_it_failed(eng, capsys):
    from stackbench.cli import main

    cfg = _cfg(_free_port())
    cfg.max_attempts = 1
    outbox.enqueue(eng, kind="t", key="k9", to=["a@example.com"], subject="weekly", body="b")
    outbox.deliver(eng, cfg)
    assert main(["mail", "list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert "weekly" in line and "failed" in line and "(" in line  # the last error follows


def test_dry_run_writes_files(eng, tmp_path):
    cfg = _cfg(_free_port())
    cfg.dry_run_dir = str(tmp_path / "out")
    outbox.enqueue(eng, kind="t", key="k3", to=["a@example.com"], subject="s", body="b")
    assert len(outbox.deliver(eng, cfg).sent) == 1
    (eml,) = (tmp_path / "out").glob("*.eml")
    assert b"Subject: s" in eml.read_bytes()


def test_refuses_injected_recipient(eng):
    with pytest.raises(InputError, match="not a single mail address"):
        outbox.enqueue(
            eng,
            kind="t",
            key="k4",
            to=["a@example.com\r\nBcc: x@example.com"],
            subject="s",
            body="b",
        )


# the From: of the mbox: anyone can write any address there
VICTIM = "victim@example.org"
LIST_ADDR = "linux-mm@kvack.example"
REPORT_TO = "reports@lists.example.org"
BASE, C1 = "b" * 40, "c" * 40
MBOX = (
    b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
    b"From: Victim <victim@example.org>\nSubject: [PATCH] mm: x\nMessage-ID: <r@x>\n\n"
    b"x\n---\ndiff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
)


def _ended_by_the_service(eng, owner: str, posted: dict | None = None) -> int:
    """A series from a front door (the one intake, applied on BASE as a push's commits are),
    the mbox's From: VICTIM, owned by no account, an account whose address is ``verified``
    or ``unverified``; taken through the moves the journey makes to ``done``, then looked
    at by the dispatcher, which queues the report of every finished series."""
    from sqlalchemy.orm import Session

    from stackbench.jobs.driver import intake, lifecycle
    from stackbench.jobs.driver.dispatch import Dispatcher
    from stackbench.mail import accounts
    from stackbench.patches.apply import ApplyResult

    with Session(eng) as s, s.begin():
        owner_id = None
        if owner != "none":
            user = accounts.create_user(s, "dev", email="dev@example.com")
            user.email_verified = owner == "verified"
            owner_id = user.id
        sub = intake.Submission(
            source="push", tree="linux-6.1", base=BASE, mbox=MBOX, owner_id=owner_id,
            options={"jobs": ["stress-highalloc"], "runs": 1},
            meta={"list": posted} if posted else None,
        )  # fmt: skip
        sid = intake.take(s, sub).series.id
        lifecycle.record_apply(s, sid, ApplyResult(base_sha=BASE, commits=[C1], ok=True))
    lifecycle.set_state(eng, sid, "building", "handed over", progress="0/2")
    lifecycle.set_state(eng, sid, "running", "1 round", progress="0/2")
    lifecycle.set_state(eng, sid, "done", "2 kernels built, 2 benchmarks measured", error="")
    Dispatcher(eng, master=lambda: None).tick()
    return sid


def _outbox(eng) -> list[list[str]]:
    with eng.connect() as c:
        return [list(r) for r in c.scalars(text("SELECT to_addrs FROM mail_outbox ORDER BY id"))]


@pytest.mark.parametrize(
    "owner, posted, to",
    [
        ("none", None, [LIST_ADDR]),
        ("unverified", None, [LIST_ADDR]),
        ("verified", None, ["dev@example.com", LIST_ADDR]),
        ("verified", {"report_to": [REPORT_TO]}, [REPORT_TO]),
        ("none", {"report_to": [REPORT_TO], "cc_author": True}, [REPORT_TO, VICTIM]),
    ],
)
def test_the_dispatchers_report_goes_by_the_one_rule(eng, monkeypatch, owner, posted, to):
    """The list's report addresses for a list's series (the author only where it says
    cc_author), else the owner's verified address and the list; never the mbox's From:."""
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", LIST_ADDR)
    sid = _ended_by_the_service(eng, owner, posted)
    assert _outbox(eng) == [to]
    from sqlalchemy.orm import Session

    with Session(eng) as s:
        assert series_runs_store.current(s, sid).report_mail["to"] == to


def test_no_recipient_is_said_on_the_series_and_nothing_is_queued(eng, monkeypatch):
    from sqlalchemy.orm import Session

    monkeypatch.delenv("STACKBENCH_MAIL_LIST", raising=False)
    sid = _ended_by_the_service(eng, "unverified")
    assert _outbox(eng) == []
    with Session(eng) as s:
        note = series_runs_store.current(s, sid).report_mail
    assert note["to"] == [] and "no verified address" in note["why"]


def test_requeued_reports_go_by_the_same_rule(eng, monkeypatch, capsys):
    """`stackbench mail series ID` and `mail regression ID`: a regression in a series' patch
    goes to that series' recipients, not to the patch's From:."""
    from sqlalchemy.orm import Session

    monkeypatch.setenv("STACKBENCH_MAIL_LIST", LIST_ADDR)
    sid = _ended_by_the_service(eng, "unverified")
    ig.ingest(eng, runs(BASE, "base", [100, 101, 99, 100, 100]))
    ig.ingest(eng, runs(C1, "1/1", [70, 71, 69, 70, 70]))
    with Session(eng) as s, s.begin():
        assert s.get(Series, sid).patches[0].author_email == VICTIM
        ids = dict(s.execute(text("SELECT commit, id FROM kernel_build")).all())
        reg = Regression(
            job_id=s.execute(text("SELECT id FROM job")).scalar_one(),
            metric_id=s.execute(
                text("SELECT id FROM metric WHERE name = 'vm-scalability.throughput'")
            ).scalar_one(),
            good_build_id=ids[BASE], bad_build_id=ids[C1], change_pct=-30.0, culprit=C1,
        )  # fmt: skip
        s.add(reg)
        s.flush()
        rid = reg.id
    with eng.begin() as c:  # the dispatcher's report is sent: the CLI queues another
        c.execute(text("DELETE FROM mail_outbox"))
    assert cli.main(["mail", "series", str(sid)]) == 0
    assert cli.main(["mail", "regression", str(rid)]) == 0
    assert _outbox(eng) == [[LIST_ADDR], [LIST_ADDR]]


def test_comma_in_an_mbox_from_neither_crashes_nor_reaches_a_header(eng, monkeypatch, capsys):
    """From: Eve <a,evil@example.com> was accepted at intake and crashed
    `stackbench mail series ID` with a ValueError traceback."""
    from stackbench.patches.parser import parse_mbox

    mbox = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: Eve <a,evil@example.com>\nSubject: [PATCH] mm: x\nMessage-ID: <e@x>\n\n"
        b"x\n---\ndiff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n"
    )
    parsed = parse_mbox(mbox)
    assert parsed.submitter_email == "" and parsed.patches[0].author_email == ""
    assert "evil" in parsed.submitter  # kept as the name, shown but never mailed
    sid = submit_series(eng, mbox, jobs=["stress-highalloc"], runs=1)
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "linux-mm@kvack.example")
    assert cli.main(["mail", "series", str(sid)]) == 0
    assert capsys.readouterr().out.startswith("queued mail ")
    with eng.connect() as c:
        assert c.scalar(text("SELECT to_addrs FROM mail_outbox")) == ["linux-mm@kvack.example"]


def test_a_bad_recipient_is_one_line_on_the_cli(eng, monkeypatch, capsys):
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "list@example.org, other@example.org")
    sid = _series(eng)
    assert cli.main(["mail", "series", str(sid)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a single mail address" in err


def test_user_add_refuses_a_bad_address(eng):
    from sqlalchemy.orm import Session

    from stackbench.mail import accounts

    with Session(eng) as s, pytest.raises(InputError, match="invalid mail address"):
        accounts.create_user(s, "eve", email="a,evil@example.com")
