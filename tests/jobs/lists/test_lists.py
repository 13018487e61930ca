"""Mailing lists as sources, against a real public-inbox v2 archive: the watcher sorts a
list's traffic, assembles the posted series the way patchwork does and stores each once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from helpers.listmail import (
    BASE,
    FS_PATCH,
    LIST,
    MALFORMED,
    REPLY,
    ROBOT,
    SKIPPED,
    UNRELATED,
    demo_mails,
    list_def,
    partial_series,
    traffic,
)
from helpers.listmail import counts as _counts
from helpers.pubinbox import Inbox
from sqlalchemy import func, select

from stackbench.jobs.lists import list_watch
from stackbench.patches import inbox as pi
from stackbench.resultsdb import db
from stackbench.resultsdb.models import ListMessage, ListThread, MailList, Series

pytest_plugins = ["helpers.web", "helpers.lifecycle", "helpers.listmail"]


def test_only_the_two_mm_series_become_series(eng, archive):
    traffic(archive)
    lst = list_def(str(archive.dir))
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert not rep.error, rep.error
    assert len(rep.series) == 2, rep.line()
    with db.session(eng) as s:
        rows = s.execute(select(Series).order_by(Series.version)).scalars().all()
        assert [(r.version, r.source, r.base_commit or r.base_ref) for r in rows] == [
            (1, "list", BASE), (2, "list", BASE)
        ]  # fmt: skip
        assert [[p.subject for p in r.patches] for r in rows] == [
            [
                "mm/compaction: factor out the compaction defer limit",
                "mm/huge_memory: wake kcompactd for THP faults outside MADV_HUGEPAGE",
                "mm/huge_memory: zero anonymous THPs before charging them",
            ]
        ] * 2
        assert rows[0].message_id == "<cover.1795306855.git.demo@stackbench.invalid>"
        # v2 is a new revision linked to v1
        assert rows[1].meta["previous_version"] == rows[0].id
        assert rows[0].meta["list"]["name"] == "test-mm"
        assert rows[1].meta["list"]["subject"] == (
            "[PATCH v2 0/3] mm: compaction and THP fault demo stack"
        )
        reasons = dict(
            s.execute(
                select(ListMessage.message_id, ListMessage.reason).where(
                    ListMessage.kind == "skipped"
                )
            ).all()
        )
    assert reasons["<review@example.org>"] == "a reply in a thread"
    assert reasons["<question@example.org>"] == "not a patch (no [PATCH] tag)"
    assert reasons["<hostile@example.org>"].startswith("malformed:")
    kinds, threads = _counts(eng, "test-mm")
    assert kinds == {"cover": 2, "patch": 7, "skipped": SKIPPED}
    assert ("fs: spell a comment right", "filtered") in threads
    assert rep.duplicates == 1  # the copy of 2/3

    again = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (again.read, again.series, again.error) == (0, [], "")
    assert _counts(eng, "test-mm")[0] == kinds


def test_over_public_inbox_httpd_and_a_killed_fetch(eng, archive, monkeypatch):
    traffic(archive)
    url = archive.serve()
    lst = list_def(url, name="test-mm-http")
    monkeypatch.setattr(pi, "BATCH", 3)
    calls = []

    def killed() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the watcher dies between two batches

    with pytest.raises(KeyboardInterrupt):
        list_watch.fetch(eng, lst, own_sender=ROBOT, after_batch=killed)
    kinds, _ = _counts(eng, "test-mm-http")
    assert sum(kinds.values()) == 6  # two batches of three, committed with their cursor
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert not rep.error, rep.error
    assert len(rep.series) == 2
    kinds, _ = _counts(eng, "test-mm-http")
    assert kinds == {"cover": 2, "patch": 7, "skipped": SKIPPED}


def test_incomplete_after_the_time_box(eng, archive):
    for raw in partial_series():
        archive.deliver(raw)
    lst = list_def(str(archive.dir))
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (rep.series, rep.incomplete) == ([], 0)
    assert _counts(eng, "test-mm")[1] == [("mm/slub: part 0", "collecting")]
    later = datetime.now(UTC) + timedelta(hours=2)
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT, now=later)
    assert (rep.series, rep.incomplete) == ([], 1)
    with db.session(eng) as s:
        t = s.execute(select(ListThread)).scalar_one()
        assert (t.state, t.reason) == ("incomplete", "2 of 3 patches after 3600 s; missing 3/3")
        assert s.execute(select(func.count()).select_from(Series)).scalar_one() == 0


def test_unreachable_archive_is_retried_with_backoff(eng, tmp_path):
    lst = list_def(str(tmp_path / "nowhere"))
    now = datetime.now(UTC)
    rep = list_watch.fetch(eng, lst, now=now)
    assert "no public-inbox epoch" in rep.error
    with db.session(eng) as s:
        row = s.execute(select(MailList)).scalar_one()
        assert (row.failures, row.last_error) == (1, rep.error)
        first_wait = row.next_fetch_at - now
    list_watch.fetch(eng, lst, now=now)
    with db.session(eng) as s:
        row = s.execute(select(MailList)).scalar_one()
        assert row.failures == 2
        assert row.next_fetch_at - now > first_wait
    assert list_watch.due(eng, [lst], now) == []


def test_the_service_that_up_starts_makes_the_series(eng, archive, tmp_path, monkeypatch):
    import time

    import yaml

    from stackbench.jobs.driver import dispatcher_service

    traffic(archive)
    folder = tmp_path / "lists"
    folder.mkdir()
    data = {
        "name": "svc-mm",
        "archive": str(archive.dir),
        "tree": "linux-6.1",
        "interval": 1,
        "filters": {"to": [LIST], "paths": ["mm/"]},
    }
    (folder / "svc-mm.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("STACKBENCH_LISTS", str(folder))
    monkeypatch.setenv("STACKBENCH_MAIL_FROM", ROBOT)
    assert dispatcher_service.start_lists().startswith("lists: started")
    try:
        deadline = time.monotonic() + 60
        made = 0
        while time.monotonic() < deadline and made < 2:
            with db.session(eng) as s:
                made = s.execute(select(func.count()).select_from(Series)).scalar_one()
            time.sleep(0.5)
        assert made == 2, dispatcher_service.logfile("lists").read_text()[-2000:]
        archive.deliver(partial_series()[0])  # the running watcher reads new mail too
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "mm/slub: part 0" not in dict(
            _counts(eng, "svc-mm")[1]
        ):
            time.sleep(0.5)
        assert ("mm/slub: part 0", "collecting") in _counts(eng, "svc-mm")[1]
    finally:
        assert dispatcher_service.stop_lists().startswith("lists: stopped")
    with db.session(eng) as s:
        assert s.execute(select(func.count()).select_from(Series)).scalar_one() == 2


def test_a_watcher_killed_mid_fetch_loses_and_duplicates_nothing(eng, archive, tmp_path):
    """A real ``stackbench lists fetch`` process is killed with SIGKILL while it stores a
    batch (held inside its transaction by a trigger that sleeps); the next fetch reads
    every message once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml
    from sqlalchemy import text

    v1 = demo_mails()
    for raw in v1:
        archive.deliver(raw)
    lst = list_def(str(archive.dir))
    assert len(list_watch.fetch(eng, lst, own_sender=ROBOT).series) == 1
    traffic_after = [REPLY, FS_PATCH, UNRELATED, MALFORMED, *demo_mails(2, "v2 ")]
    for raw in traffic_after:
        archive.deliver(raw)
    with eng.begin() as c:
        c.execute(text(
            "CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
            "IF NEW.subject LIKE '%v2 2/3%' THEN PERFORM pg_sleep(120); END IF; "
            "RETURN NEW; END$$"
        ))  # fmt: skip
        c.execute(text(
            "CREATE TRIGGER hold BEFORE INSERT ON list_message FOR EACH ROW "
            "EXECUTE FUNCTION hold()"
        ))  # fmt: skip
    folder = tmp_path / "lists"
    folder.mkdir()
    data = {"name": "test-mm", "archive": str(archive.dir), "tree": "linux-6.1",
            "filters": {"to": [LIST], "paths": ["mm/"]}}  # fmt: skip
    (folder / "test-mm.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "STACKBENCH_LISTS": str(folder), "STACKBENCH_MAIL_FROM": ROBOT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stackbench", "lists", "fetch", "test-mm"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        backend = None
        deadline = time.monotonic() + 60
        while backend is None and time.monotonic() < deadline:
            with eng.connect() as c:
                backend = c.execute(
                    text("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
                ).scalar()
            time.sleep(0.2)
        assert backend, proc.stdout.read().decode() if proc.poll() is not None else "no wait"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        with eng.begin() as c:
            c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE wait_event = 'PgSleep'"))  # fmt: skip
            c.execute(text("DROP TRIGGER hold ON list_message"))
    kinds, _ = _counts(eng, "test-mm")
    assert kinds == {"cover": 1, "patch": 3}  # the killed batch left nothing behind
    rep = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (rep.read, rep.duplicates, len(rep.series)) == (len(traffic_after), 0, 1)
    kinds, _ = _counts(eng, "test-mm")
    assert kinds == {"cover": 2, "patch": 7, "skipped": 3}  # fs/ patch: a filtered thread
    again = list_watch.fetch(eng, lst, own_sender=ROBOT)
    assert (again.read, again.series) == (0, [])


def test_a_series_cross_posted_to_two_lists_is_one_series(eng, tmp_path):
    first, second = Inbox(tmp_path / "a", LIST, "a"), Inbox(tmp_path / "b", LIST, "b")
    for box in (first, second):
        for raw in demo_mails():
            box.deliver(raw)
    made = [
        list_watch.fetch(eng, list_def(str(box.dir), name=name), own_sender=ROBOT).series
        for box, name in ((first, "list-a"), (second, "list-b"))
    ]
    assert made[0] == made[1] and len(made[0]) == 1
    with db.session(eng) as s:
        assert s.execute(select(func.count()).select_from(Series)).scalar_one() == 1


def test_a_series_without_base_commit_is_applied_on_the_trees_base(eng, archive, tree):
    """No ``base-commit:`` in the mails: the series is keyed and applied (real git am) on
    the tree's configured base."""
    from helpers.lifecycle import git

    from stackbench.jobs.driver.apply_stage import apply_only

    repo, work, base = tree
    out = archive.dir.parent / "mails"
    git(work, "format-patch", "-q", "--cover-letter", "--thread=shallow", f"--to={LIST}",
        "-o", str(out), f"{base}..HEAD")  # fmt: skip
    for f in sorted(out.glob("*.patch")):
        assert b"base-commit:" not in f.read_bytes()
        archive.deliver(f.read_bytes())
    lst = list_def(str(archive.dir), tree="tiny")
    (sid,) = list_watch.fetch(eng, lst, own_sender=ROBOT).series
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert (x.base_ref, x.base_commit) == ("v0", None)  # tiny.yaml's default_base
    kernels = apply_only(eng, sid)
    assert kernels is not None and kernels[0][0] == base
    with db.session(eng) as s:
        x = s.get(Series, sid)
        assert (x.state, x.base_commit) == ("applied", base)
        shas = [p.commit_sha for p in sorted(x.patches, key=lambda p: p.idx)]
    assert all(shas) and [k for k, _ in kernels[1:]] == shas
    assert git(repo, "rev-parse", f"{shas[-1]}^{{tree}}") == git(work, "rev-parse", "HEAD^{tree}")
