"""The rows of mailing lists as sources: each list's fetch state, the messages read from
its archive and the threads (posted series) they make. Every function takes the caller's
session and leaves committing to it, so the watcher stores a batch of messages and the
epoch cursor after them in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, undefer

from stackbench.resultsdb.models import ListMessage, ListThread, MailList, Series


def ensure(s: Session, name: str, archive: str, *, lock: bool = False) -> MailList:
    """The list's row (made on first use), locked for the transaction when ``lock``: two
    watchers of one list then take turns instead of reading the same commits."""
    s.execute(
        insert(MailList)
        .values(name=name, archive=archive, cursors={}, meta={})
        .on_conflict_do_nothing(index_elements=["name"])
    )
    q = select(MailList).where(MailList.name == name)
    if lock:
        q = q.with_for_update()
    row = s.execute(q).scalar_one()
    if row.archive != archive:
        row.archive = archive
        row.cursors = {}  # another archive: its commits are not the old one's
    return row


def named(s: Session, name: str) -> MailList | None:
    return s.execute(select(MailList).where(MailList.name == name)).scalar_one_or_none()


def all_lists(s: Session) -> list[MailList]:
    return list(s.execute(select(MailList).order_by(MailList.name)).scalars())


def set_cursor(row: MailList, epoch: int, commit: str) -> None:
    row.cursors = {**row.cursors, str(epoch): commit}


def add_message(s: Session, **values: Any) -> bool:
    """Store a message once per list, Message-ID and sender (another sender's mail under
    a Message-ID already read is a mail of its own); False when it was read before."""
    res = s.execute(
        insert(ListMessage)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["list_id", "message_id", "sender"])
        .returning(ListMessage.id)
    )
    return res.scalar_one_or_none() is not None


def thread(s: Session, list_id: int, root: str, version: int, total: int, title: str) -> ListThread:
    """The thread of a posted series (made by its first message to arrive)."""
    s.execute(
        insert(ListThread)
        .values(list_id=list_id, root=root, version=version, total=total, title=title)
        .on_conflict_do_nothing(index_elements=["list_id", "root", "version", "total"])
    )
    return s.execute(
        select(ListThread).where(
            ListThread.list_id == list_id,
            ListThread.root == root,
            ListThread.version == version,
            ListThread.total == total,
        )
    ).scalar_one()


def has_patch(s: Session, thread_id: int, idx: int, sender: str) -> bool:
    """True when the thread holds a mail for slot ``idx`` from ``sender``."""
    q = select(ListMessage.id).where(
        ListMessage.thread_id == thread_id,
        ListMessage.idx == idx,
        ListMessage.sender == sender,
        ListMessage.kind.in_(("cover", "patch")),
    )
    return s.execute(q.limit(1)).first() is not None


def collecting(s: Session, list_id: int) -> list[ListThread]:
    q = select(ListThread).where(ListThread.list_id == list_id, ListThread.state == "collecting")
    return list(s.execute(q.order_by(ListThread.id).with_for_update(skip_locked=True)).scalars())


def parts(s: Session, thread_id: int) -> list[ListMessage]:
    """The cover letters (index 0) and patches read for a thread, every sender's, in the
    order they arrived."""
    q = (
        select(ListMessage)
        .options(undefer(ListMessage.raw))
        .where(ListMessage.thread_id == thread_id, ListMessage.kind.in_(("cover", "patch")))
        .order_by(ListMessage.id)
    )
    return list(s.execute(q).scalars())


def set_skipped(s: Session, ids: list[int], reason: str) -> None:
    """Mark thread mails that did not make its series skipped, with why."""
    if ids:
        q = update(ListMessage).where(ListMessage.id.in_(ids))
        s.execute(q.values(kind="skipped", reason=reason[:2000]))


def earlier_version(s: Session, t: ListThread, submitter_email: str) -> int | None:
    """The series of the newest earlier version of ``t`` (same title and submitter)."""
    q = (
        select(ListThread.series_id)
        .join(Series, Series.id == ListThread.series_id)
        .where(
            ListThread.list_id == t.list_id,
            ListThread.title == t.title,
            ListThread.version < t.version,
            Series.submitter_email == submitter_email,
        )
        .order_by(ListThread.version.desc())
        .limit(1)
    )
    return s.execute(q).scalar_one_or_none()


def finish_thread(s: Session, t: ListThread, state: str, reason: str = "", **kw: Any) -> None:
    s.execute(
        update(ListThread)
        .where(ListThread.id == t.id)
        .values(state=state, reason=reason[:2000], updated_at=func.now(), **kw)
    )


def record_fetch(
    s: Session,
    list_id: int,
    *,
    now: datetime,
    next_at: datetime,
    error: str = "",
) -> None:
    row = s.get(MailList, list_id, with_for_update=True)
    row.last_fetch_at = now
    row.next_fetch_at = next_at
    row.last_error = error[:2000]
    if error:
        row.failures = (row.failures or 0) + 1
    else:
        row.failures = 0
        row.last_ok_at = now


# ---- what the lists page shows ----------------------------------------------------------


def threads_of(s: Session, list_id: int, limit: int = 200) -> list[ListThread]:
    q = select(ListThread).where(ListThread.list_id == list_id)
    return list(s.execute(q.order_by(ListThread.id.desc()).limit(limit)).scalars())


def skipped_of(s: Session, list_id: int, limit: int = 500) -> list[ListMessage]:
    q = select(ListMessage).where(ListMessage.list_id == list_id, ListMessage.kind == "skipped")
    return list(s.execute(q.order_by(ListMessage.id.desc()).limit(limit)).scalars())


def counts(s: Session, list_id: int) -> dict[str, int]:
    q = (
        select(ListMessage.kind, func.count())
        .where(ListMessage.list_id == list_id)
        .group_by(ListMessage.kind)
    )
    return {k: int(n) for k, n in s.execute(q)}


# ---- lists declared in the web admin (a YAML file of the same name wins) -----------------


def declare(s: Session, name: str, archive: str, definition: dict[str, Any]) -> MailList:
    """A list declared in the admin: its row with the definition (a list YAML's fields) in
    ``meta["definition"]``; a name in use is refused when the session commits."""
    row = MailList(name=name, archive=archive, cursors={}, meta={"definition": definition})
    s.add(row)
    return row


def declared(s: Session) -> list[dict[str, Any]]:
    """The definitions of the lists declared in the admin."""
    return [
        dict(r.meta["definition"])
        for r in all_lists(s)
        if isinstance((r.meta or {}).get("definition"), dict)
    ]


def get(s: Session, list_id: int) -> MailList | None:
    return s.get(MailList, list_id)


def set_enabled(row: MailList, enabled: bool) -> None:
    definition = dict((row.meta or {}).get("definition") or {})
    definition["enabled"] = enabled
    row.meta = {**(row.meta or {}), "definition": definition}


def delete(s: Session, row: MailList) -> None:
    """The list and what was read from it (the series it made stay)."""
    s.delete(row)
