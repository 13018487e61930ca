"""The list watcher: reads each declared mailing list's public-inbox archive
(:mod:`stackbench.patches.inbox`), sorts every new message (a cover letter, a patch, or
skipped with its reason), assembles posted series the way patchwork does and stores each
complete one through the one intake (:func:`stackbench.jobs.driver.intake.take`),
where the dispatcher picks it up.

A thread is the cover letter (or the first patch when there is none) and the patches that
answer it (In-Reply-To / References), one per ``[PATCH vN m/n]``; it becomes a series once all
n patches arrived, else ``incomplete`` after the list's time box. Messages and the epoch
cursor after them are committed together, so a killed fetch neither loses nor duplicates a
message, and a message seen twice (cross-posted, fetched again) is stored once.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from stackbench import config
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.driver import intake
from stackbench.kernels.lists import ListDef, clean_list, list_lists
from stackbench.patches import inbox, parser
from stackbench.resultsdb import db, lists_q

log = logging.getLogger(__name__)

# a patch mail is kilobytes; lore refuses mails over a few MiB
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)


@dataclass
class FetchReport:
    name: str
    read: int = 0
    duplicates: int = 0
    skipped: int = 0
    series: list[int] = field(default_factory=list)
    incomplete: int = 0
    error: str = ""

    def line(self) -> str:
        if self.error:
            return f"{self.name}: {self.error}"
        made = ", ".join(f"#{i}" for i in self.series) or "none"
        return (
            f"{self.name}: {self.read} new message(s), {self.skipped} skipped, "
            f"{self.duplicates} seen before; series made: {made}; "
            f"{self.incomplete} incomplete"
        )


def mirror_dir(name: str) -> Path:
    return config.home() / "lists" / name


MAX_BACKOFF = 6 * 3600


def backoff(failures: int, interval: int) -> timedelta:
    """The wait after the n-th failed fetch in a row: the interval, then twice, four times
    ... as long, at most six hours (or the interval, when that is longer)."""
    wait = interval * 2 ** min(max(failures - 1, 0), 20)
    return timedelta(seconds=min(wait, max(interval, MAX_BACKOFF)))


# ---- sorting one message ------------------------------------------------------------------


@dataclass
class Sorted:
    message_id: str
    subject: str
    sender: str
    kind: str  # cover, patch, skipped
    reason: str = ""
    root: str = ""
    version: int = 1
    idx: int | None = None
    total: int = 0
    title: str = ""


def _addresses(msg) -> set[str]:
    import email.utils

    fields = [str(v) for k in ("To", "Cc") for v in (msg.get_all(k) or [])]
    found = {a.lower() for _, a in email.utils.getaddresses(fields) if a}
    list_id = str(msg.get("List-Id") or "")
    m = re.search(r"<([^<>\s]+)>", list_id)
    if m:
        # List-Id names the list as its address with the @ turned into a dot
        found.add(m.group(1).lower())
    return found


def _addressed(msg, wanted: tuple[str, ...]) -> bool:
    have = _addresses(msg)
    return any(addr in have or addr.replace("@", ".", 1) in have for addr in wanted)


def _msgid_of(raw: bytes) -> str | None:
    """The Message-ID of a mail the parser refused, when its headers still give one."""
    import email
    import email.policy

    try:
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        return parser.clean_msgid(msg.get("Message-ID"))
    except Exception:  # noqa: BLE001 - then the commit names it
        return None


def sort_message(raw: bytes, commit: str, lst: ListDef, own_sender: str) -> Sorted:
    """What a message is for the list: part of a posted series, or skipped and why (a
    hostile mail included: nothing it holds stops the watcher)."""
    key = f"<commit:{commit}>"
    if not raw.strip():
        return Sorted(key, "", "", "skipped", "no message in the commit (a removal)")
    if len(raw) > MAX_MESSAGE_BYTES:
        why = f"larger than {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB"
        return Sorted(_msgid_of(raw[:65536]) or key, "", "", "skipped", why)
    try:
        return _sort(raw, key, lst, own_sender)
    except InputError as exc:
        return Sorted(_msgid_of(raw) or key, "", "", "skipped", f"malformed: {exc.what}"[:300])
    except Exception as exc:  # noqa: BLE001 - any hostile mail is skipped, never fatal
        why = f"malformed: {type(exc).__name__}"
        return Sorted(_msgid_of(raw) or key, "", "", "skipped", why)


def _sort(raw: bytes, key: str, lst: ListDef, own_sender: str) -> Sorted:
    mail = parser.parse_mail(raw, 0, source=f"{lst.name} {key[8:20]}")
    msg = mail.msg
    msgid = parser.clean_msgid(msg.get("Message-ID"))
    subject = parser.clean_header(msg.get("Subject"))[:500]
    # the header's From: the sender (an in-body From: names the commit's author only)
    sender = parser.clean_address(msg.get("From"))[1].lower()
    if not msgid:
        return Sorted(key, subject, sender, "skipped", "no Message-ID header")

    def skip(reason: str) -> Sorted:
        return Sorted(msgid, subject, sender, "skipped", reason)

    own = parser.clean_address(own_sender)[1].lower() if own_sender else ""
    if str(msg.get("X-Mailer") or "").strip() == "stackbench" or (own and sender == own):
        return skip("stackbench's own mail")
    if mail.is_reply:
        return skip("a reply in a thread")
    if not mail.tagged:
        return skip("not a patch (no [PATCH] tag)")
    words = parser.clean_subject(msg.get("Subject", ""))[1]
    prefixes = tuple(p.upper() for p in lst.subject_prefix)
    if prefixes and not any(w.upper().startswith(prefixes) for w in words):
        return skip(f"subject tag is none of {', '.join(lst.subject_prefix)}")
    if lst.to and not _addressed(msg, lst.to):
        return skip(f"not addressed to {', '.join(lst.to)}")
    idx, total = mail.counter or (1, 1)
    if idx > total:
        return skip(f"patch {idx}/{total}: index beyond the series length")
    if idx > 0 and not parser.parse_body(mail.text)[1]:
        return skip(f"patch {idx}/{total} has no diff")
    refs = parser.MSGID.findall(parser.clean_header(msg.get("References")))
    parent = parser.clean_msgid(msg.get("In-Reply-To"))
    root = msgid if idx == 0 or not (refs or parent) else (refs[0] if refs else parent)
    return Sorted(
        msgid,
        subject,
        sender,
        "cover" if idx == 0 else "patch",
        root=root,
        version=mail.version,
        idx=idx,
        total=total,
        title=mail.subject[:500],
    )


# ---- fetching -----------------------------------------------------------------------------


def _store_batch(
    eng: Engine, lst: ListDef, batch: list[inbox.Message], own: str, rep: FetchReport
) -> None:
    with db.session(eng) as s:
        row = lists_q.ensure(s, lst.name, lst.archive, lock=True)
        for m in batch:
            got = sort_message(m.raw, m.commit, lst, own)
            thread_id = None
            if got.kind != "skipped":
                t = lists_q.thread(s, row.id, got.root, got.version, got.total, got.title)
                if t.state != "collecting":
                    got.kind, got.reason = "skipped", f"thread already {t.state}"
                elif lists_q.has_patch(s, t.id, got.idx, got.sender):
                    got.kind = "skipped"
                    got.reason = f"another copy of {got.idx}/{got.total} already read"
                else:
                    # any sender's mail waits in the thread: which sender's make the
                    # series is decided once one has every slot (see _pick)
                    thread_id = t.id
                    if not t.title and got.idx in (0, 1):
                        t.title = got.title
            stored = lists_q.add_message(
                s,
                list_id=row.id,
                message_id=got.message_id,
                epoch=m.epoch,
                git_commit=m.commit,
                subject=got.subject,
                sender=got.sender,
                kind=got.kind,
                reason=got.reason,
                thread_id=thread_id,
                idx=got.idx if thread_id else None,
                raw=m.raw if thread_id else None,
            )
            if not stored:
                rep.duplicates += 1
                continue
            rep.read += 1
            rep.skipped += got.kind == "skipped"
        lists_q.set_cursor(row, batch[-1].epoch, batch[-1].commit)


def fetch(
    eng: Engine,
    lst: ListDef,
    *,
    now: datetime | None = None,
    own_sender: str | None = None,
    after_batch: Callable[[], None] | None = None,
) -> FetchReport:
    """Read what is new in the list's archive and assemble series; never raises for the
    archive or a message (the report and the list's row say what went wrong)."""
    from stackbench.mail.config import from_env

    now = now or datetime.now(UTC)
    own = own_sender if own_sender is not None else from_env().sender
    rep = FetchReport(lst.name)
    with db.session(eng) as s:
        row = lists_q.ensure(s, lst.name, lst.archive)
        list_id, cursors, failures = row.id, dict(row.cursors), row.failures
    mirror = mirror_dir(lst.name)
    try:
        epochs = inbox.sync(lst.archive, mirror, known=len(cursors))
        if not cursors and lst.start == "new":
            with db.session(eng) as s:
                row = lists_q.ensure(s, lst.name, lst.archive, lock=True)
                for n in epochs:
                    lists_q.set_cursor(row, n, inbox.head(mirror, n) or "")
        else:
            for n in epochs:
                for batch in inbox.new_messages(mirror, n, cursors.get(str(n)) or None):
                    _store_batch(eng, lst, batch, own, rep)
                    if after_batch is not None:
                        after_batch()
    except (StackbenchError, OSError, subprocess.SubprocessError) as exc:
        # the archive or the mirror: unreachable, too slow (a git timeout), unreadable
        rep.error = str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
        with db.session(eng) as s:
            wait = backoff(failures + 1, lst.interval)
            lists_q.record_fetch(s, list_id, now=now, next_at=now + wait, error=rep.error)
        log.warning("list %s: %s (retry in %s)", lst.name, rep.error, wait)
        return rep
    assemble(eng, lst, now=now, rep=rep)
    with db.session(eng) as s:
        lists_q.record_fetch(s, list_id, now=now, next_at=now + timedelta(seconds=lst.interval))
    return rep


# ---- assembling series --------------------------------------------------------------------


def touched(parsed: parser.ParsedSeries) -> list[str]:
    files: list[str] = []
    for p in parsed.patches:
        for a, b in _DIFF_FILE.findall(p.diff):
            files += [a, b]
    return list(dict.fromkeys(files))


def _pick(t: lists_q.ListThread, got: list[lists_q.ListMessage]) -> list[lists_q.ListMessage]:
    """The mails of the thread's series: the series' sender's cover (when there is one)
    and patches 1..n; empty while no sender has every slot.

    The series' sender is the From of the cover letter, else of the first patch: a mail
    whose Message-ID is the thread's root, in the order they arrived (another sender may
    have used that Message-ID first). Other senders' mails never fill a slot. A thread
    whose root mail never came (it answered an earlier version, say) takes the sender of
    a first patch."""
    heads = [m for m in got if m.idx == 0 and m.message_id == t.root]
    if not heads:
        heads = [m for m in got if m.idx == 1 and m.message_id == t.root]
    if not heads and not any(m.idx == 0 for m in got):
        heads = [m for m in got if m.idx == 1]
    for head in heads:
        slots: dict[int, lists_q.ListMessage] = {}
        for m in got:
            if m.sender == head.sender and m.idx > 0:
                slots.setdefault(m.idx, m)
        if len(slots) == t.total:
            cover = [head] if head.idx == 0 else []
            return cover + [slots[i] for i in range(1, t.total + 1)]
    return []


def assemble(eng: Engine, lst: ListDef, *, now: datetime, rep: FetchReport | None = None) -> None:
    """Make a series of every complete thread, and mark those past the time box
    ``incomplete``; each thread in its own transaction with the series it makes."""
    rep = rep or FetchReport(lst.name)
    with db.session(eng) as s:
        row = lists_q.ensure(s, lst.name, lst.archive)
        ids = [t.id for t in lists_q.collecting(s, row.id)]
    for tid in ids:
        with db.session(eng) as s:
            t = s.get(lists_q.ListThread, tid, with_for_update=True)
            if t is None or t.state != "collecting":
                continue
            got = lists_q.parts(s, t.id)
            chosen = _pick(t, got)
            if not chosen:
                first = t.first_seen if t.first_seen.tzinfo else t.first_seen.replace(tzinfo=UTC)
                if now - first >= timedelta(seconds=lst.complete_within):
                    have = {m.idx for m in got if m.idx > 0}
                    missing = [f"{i}/{t.total}" for i in range(1, t.total + 1) if i not in have]
                    lists_q.finish_thread(s, t, "incomplete", _incomplete(t, got, missing, lst))
                    rep.incomplete += 1
                continue
            sender = chosen[0].sender
            for m in got:
                if m not in chosen:
                    why = f"from {m.sender or 'no address'}, not the series' sender {sender}"
                    lists_q.set_skipped(s, [m.id], why)
            t.title = parser.clean_subject(chosen[0].subject)[0][:500]
            mbox = parser.join_mboxrd([bytes(m.raw or b"") for m in chosen])
            try:
                parsed = parser.parse_mbox(mbox, source=f"{lst.name} thread {t.root[:80]}")
            except InputError as exc:
                lists_q.finish_thread(s, t, "failed", exc.what)
                continue
            except Exception as exc:  # noqa: BLE001 - a hostile thread fails alone
                lists_q.finish_thread(s, t, "failed", f"malformed: {type(exc).__name__}")
                continue
            files = touched(parsed)
            if lst.paths and not any(f.startswith(lst.paths) for f in files):
                shown = ", ".join(files[:5]) + (" ..." if len(files) > 5 else "")
                why = f"touches none of {', '.join(lst.paths)} ({shown})"
                lists_q.finish_thread(s, t, "filtered", why)
                continue
            try:
                previous = lists_q.earlier_version(s, t, parsed.submitter_email)
                # what the report needs, kept with the series (mail does not read YAML)
                meta = {
                    "list": {
                        "name": lst.name,
                        "tree": lst.tree,
                        "thread": t.root,
                        "subject": chosen[0].subject,
                        "report_to": list(lst.report_to),
                        "cc_author": lst.cc_author,
                        "apply_failed_reply": lst.apply_failed_reply,
                    },
                    "previous_version": previous,
                }
                taken = intake.take(
                    s,
                    intake.Submission(
                        source="list",
                        tree=lst.tree,
                        mbox=mbox,
                        parsed=parsed,
                        options={
                            "jobs": lst.jobs,
                            "runs": lst.runs,
                            "check_claims": lst.check_claims or None,
                        },
                        meta=meta,
                    ),
                )
                series = taken.series
                assert series is not None
            except StackbenchError as exc:
                lists_q.finish_thread(s, t, "failed", str(exc).splitlines()[0][:500])
                continue
            lists_q.finish_thread(s, t, "series", series_id=series.id)
            rep.series.append(series.id)


def _incomplete(
    t: lists_q.ListThread, got: list[lists_q.ListMessage], missing: list[str], lst: ListDef
) -> str:
    have = len({m.idx for m in got if m.idx > 0})
    why = (
        f"{have} of {t.total} patches after {lst.complete_within} s; "
        f"missing {', '.join(missing[:10])}"
    )
    if not missing:
        senders = sorted({m.sender for m in got})
        why = (
            f"no sender sent all {t.total} patches after {lst.complete_within} s "
            f"(from {', '.join(senders[:5])})"
        )
    return why


# ---- the service loop ---------------------------------------------------------------------


def declared(eng: Engine) -> list[ListDef]:
    """Every declared list: the YAML files (kernels/lists, $STACKBENCH_LISTS), then those
    declared in the web admin under another name. A broken YAML file raises InputError
    naming it; a broken admin definition is left out (the admin checked it when saved)."""
    out = {x.name: x for x in list_lists()}
    with db.session(eng) as s:
        stored = lists_q.declared(s)
    for data in stored:
        name = str(data.get("name", ""))
        if name in out:
            continue
        try:
            out[name] = clean_list(data, Path(f"admin list {name}"))
        except InputError as exc:
            log.warning("%s", exc)
    return [out[n] for n in sorted(out)]


def due(eng: Engine, lists: list[ListDef], now: datetime) -> list[ListDef]:
    with db.session(eng) as s:
        rows = {r.name: r for r in lists_q.all_lists(s)}
    out = []
    for lst in lists:
        row = rows.get(lst.name)
        nxt = row.next_fetch_at if row is not None else None
        if nxt is None or nxt <= now:
            out.append(lst)
    return out


def run(eng: Engine, *, once: bool = False, stop: Callable[[], bool] = lambda: False) -> None:
    """Fetch each enabled list when it is due, until ``stop()``; a list that fails is
    retried with backoff and never stops the others."""
    while not stop():
        try:
            lists = [x for x in declared(eng) if x.enabled]
        except StackbenchError as exc:
            log.error("lists: %s", exc)
            lists = []
        for lst in due(eng, lists, datetime.now(UTC)):
            try:
                rep = fetch(eng, lst)
            except Exception:  # noqa: BLE001 - one list's failure never stops the others
                log.exception("list %s: fetch failed", lst.name)
                continue
            log.info("%s", rep.line())
        if once:
            return
        for _ in range(50):
            if stop():
                return
            time.sleep(0.1)
