"""The database outbox: a mail is queued once (by idempotency key) and delivered by
:func:`deliver`, which locks each row while sending so two deliverers never send the same
mail, and backs off after failures instead of dropping the mail."""

from __future__ import annotations

import hashlib
import smtplib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path

from sqlalchemy import Engine

from stackbench.mail import headers as h
from stackbench.mail.config import MailConfig, from_env
from stackbench.patches.mailheaders import clean_msgid
from stackbench.resultsdb import db, outbox_q

Transport = Callable[[EmailMessage], None]
# Message-IDs are single tokens: at the default 78 columns the email package writes one
# longer than ~66 characters as RFC 2047 encoded words, which no mailer threads on (git
# format-patch makes 81-character IDs). RFC 5322's hard limit is 998; longer headers fold
# at the spaces before IDs, so an id of up to mailheaders.MAX_MSGID stays whole.
_POLICY = policy.default.clone(max_line_length=998)


@dataclass
class DeliveryReport:
    sent: list[int] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def message_id_for(key: str, domain: str = "stackbench.invalid") -> str:
    return f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@{domain}>"


def enqueue(
    eng: Engine,
    *,
    kind: str,
    key: str,
    to: Sequence[str],
    subject: str,
    body: str,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
    cc: Sequence[str] = (),
    attachments: Sequence[tuple[str, str]] = (),
) -> int:
    """Queue a mail; queuing the same key again returns the existing row's id.
    ``attachments``: (file name, text) pairs sent as text/plain parts of their own."""
    refs = [r for r in (clean_msgid(x) for x in references) if r]
    irt = clean_msgid(in_reply_to)
    if irt and irt not in refs:
        refs.append(irt)
    headers = {"in_reply_to": irt, "references": refs, "cc": [h.clean_address(a) for a in cc]}
    if attachments:
        headers["attachments"] = [
            {"name": _file_name(name), "text": text} for name, text in attachments
        ]
    row = {
        "kind": kind,
        "idempotency_key": key,
        "message_id": message_id_for(key),
        "to_addrs": [h.clean_address(a) for a in to],
        "subject": h.clean_header(subject),
        "body": body,
        "headers": headers,
        "state": "pending",
    }
    with db.session(eng) as s:
        return outbox_q.add(s, **row)


def build_message(row, cfg: MailConfig) -> EmailMessage:
    msg = EmailMessage(policy=_POLICY)
    msg["From"] = cfg.sender
    msg["To"] = ", ".join(row.to_addrs)
    hdrs = row.headers or {}
    if hdrs.get("cc"):
        msg["Cc"] = ", ".join(hdrs["cc"])
    msg["Subject"] = h.clean_header(row.subject)
    msg["Message-ID"] = row.message_id
    msg["Date"] = format_datetime(row.created_at or datetime.now(UTC))
    if hdrs.get("in_reply_to"):
        msg["In-Reply-To"] = hdrs["in_reply_to"]
    if hdrs.get("references"):
        msg["References"] = " ".join(hdrs["references"])
    msg["X-Mailer"] = "stackbench"
    msg.set_content(row.body)
    for att in hdrs.get("attachments") or []:
        msg.add_attachment(att["text"], filename=_file_name(att["name"]))
    return msg


def _file_name(name: str) -> str:
    """An attachment's name as a plain file name (no path, no header tricks)."""
    cleaned = "".join(c for c in h.clean_header(name) if c.isalnum() or c in "._-")
    return cleaned.lstrip(".")[:100] or "attachment.txt"


def smtp_transport(cfg: MailConfig) -> Transport:
    def send(msg: EmailMessage) -> None:
        with smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout_s) as smtp:
            if cfg.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if cfg.user:
                smtp.login(cfg.user, cfg.password)
            smtp.send_message(msg)

    return send


def file_transport(directory: str | Path) -> Transport:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)

    def send(msg: EmailMessage) -> None:
        name = msg["Message-ID"].strip("<>").replace("/", "_") + ".eml"
        (out / name).write_bytes(bytes(msg))

    return send


def backoff(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min ... capped at one hour."""
    return timedelta(seconds=min(30 * 2 ** max(attempts - 1, 0), 3600))


def deliver(
    eng: Engine,
    cfg: MailConfig | None = None,
    *,
    transport: Transport | None = None,
    now: datetime | None = None,
    limit: int = 100,
) -> DeliveryReport:
    """Send every due pending mail once; failures are retried later with backoff."""
    cfg = cfg or from_env()
    if transport is None:
        transport = file_transport(cfg.dry_run_dir) if cfg.dry_run_dir else smtp_transport(cfg)
    now = now or datetime.now(UTC)
    report = DeliveryReport()
    for _ in range(limit):
        # one transaction per mail: the row stays locked while it is being sent
        with db.session(eng) as s:
            row = outbox_q.claim_due(s, now)
            if row is None:
                break
            try:
                transport(build_message(row, cfg))
            except (OSError, smtplib.SMTPException) as exc:
                attempts = row.attempts + 1
                gave_up = attempts >= cfg.max_attempts
                outbox_q.mark_attempt_failed(
                    s,
                    row.id,
                    attempts=attempts,
                    error=f"{type(exc).__name__}: {exc}"[:2000],
                    gave_up=gave_up,
                    retry_at=now + backoff(attempts),
                )
                (report.failed if gave_up else report.deferred).append(row.id)
                continue
            outbox_q.mark_sent(s, row.id, now)
            report.sent.append(row.id)
    return report
