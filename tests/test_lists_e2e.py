"""From the list to the verdict and back, with the services up: a series posted to a real
public-inbox archive (served by public-inbox-httpd) is read by the list watcher service,
run by the dispatcher on a Buildbot master with a dry-kernel worker, and its report, sent
over SMTP into the same archive, is read back threaded under the cover letter; the
watcher then makes nothing of it."""

from __future__ import annotations

import email
import socket
import time
import urllib.request
from email import policy

import pytest
import yaml
from sqlalchemy import select

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from aiosmtpd.controller import Controller  # noqa: E402
from listmail import IntoInbox  # noqa: E402
from pubinbox import Inbox  # noqa: E402
from test_lifecycle_buildbot import JOB, RUNS  # noqa: E402
from test_lifecycle_buildbot import stack as stack  # noqa: E402 - the services' fixture
from test_lifecycle_support import finished, git, wait_for  # noqa: E402

from stackbench.jobs import dispatcher_service  # noqa: E402
from stackbench.mail import config, outbox  # noqa: E402
from stackbench.resultsdb import db  # noqa: E402
from stackbench.resultsdb.models import ListMessage, Series  # noqa: E402

pytest_plugins = ["test_lifecycle_support"]
LIST = "tiny-mm@lists.example.org"
ROBOT = "stackbench <robot@stackbench.example.org>"


def test_a_posted_series_is_run_and_answered_in_its_thread(eng, tree, stack, tmp_path, monkeypatch):  # noqa: F811
    _repo, work, base = tree
    box = Inbox(tmp_path / "pi", LIST)
    url = box.serve()
    out = tmp_path / "mails"
    git(work, "format-patch", "-q", "--cover-letter", "--thread=shallow", f"--base={base}",
        f"--to={LIST}", "-o", str(out), f"{base}..HEAD")  # fmt: skip
    for f in sorted(out.glob("*.patch")):
        box.deliver(f.read_bytes())
    box.deliver(
        f"From: a <a@example.org>\nTo: {LIST}\nSubject: a question\n"
        "Message-ID: <q@example.org>\n\nNo patch here.\n".encode()
    )
    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "tiny-mm.yaml").write_text(yaml.safe_dump({
        "name": "tiny-mm", "archive": url, "tree": "tiny", "interval": 1,
        "filters": {"to": [LIST], "paths": ["mm/"]}, "jobs": [JOB], "runs": RUNS,
        "reports": {"to": [LIST]},
    }))  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for k, v in {
        "STACKBENCH_LISTS": str(folder),
        "STACKBENCH_MAIL_FROM": ROBOT,
        "STACKBENCH_SMTP_HOST": "127.0.0.1",
        "STACKBENCH_SMTP_PORT": str(port),
    }.items():
        monkeypatch.setenv(k, v)  # fmt: skip
    ctl = Controller(IntoInbox(box), hostname="127.0.0.1", port=port)
    ctl.start()
    print(dispatcher_service.start_lists())
    try:

        def one_series():
            with db.session(eng) as s:
                return s.execute(select(Series.id)).scalars().all()

        (sid,) = wait_for("the watcher to make the series", one_series, timeout=60)
        x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=1)
        assert x.state == "done", (x.state, x.error)
        assert x.base_commit == base and len(x.patches) == 2
        assert all(p.commit_sha for p in x.patches)
        sent = outbox.deliver(eng, config.from_env())
        assert len(sent.sent) == 1, sent
        with db.session(eng) as s:
            cover = s.get(Series, sid).message_id
            from stackbench.resultsdb.models import MailOutbox

            mail_id = s.execute(select(MailOutbox.message_id)).scalar_one()
        with urllib.request.urlopen(f"{url}/{mail_id.strip('<>')}/raw", timeout=30) as r:
            reply = email.message_from_bytes(r.read(), policy=policy.default)
        assert reply["In-Reply-To"] == cover and cover in reply["References"]
        assert str(reply["Subject"]).startswith("Re: [PATCH 0/2]")
        assert str(reply["To"]) == LIST  # the list only: not the author
        # the dry worker's runs are no real vm-scalability case: the report goes without a
        # reproducer (tests/test_reproducer.py runs one against a real kernel)
        assert list(reply.iter_attachments()) == []

        def reply_read():
            with db.session(eng) as s:
                return s.execute(
                    select(ListMessage.reason).where(ListMessage.message_id == mail_id)
                ).scalar()

        assert wait_for("the watcher to read the reply", reply_read, timeout=60) == (
            "stackbench's own mail"
        )
        time.sleep(2)  # another round of the watcher: still one series
        assert one_series() == [sid]
    finally:
        print(dispatcher_service.stop_lists())
        ctl.stop()
        box.stop()
        log = dispatcher_service.logfile("lists")
        if log.exists():
            print(log.read_text()[-3000:])
