"""The mail outbox's rows: queued once by idempotency key, claimed one at a time by a
deliverer (locked, so two deliverers never send the same mail), then marked sent or
retried later. Composing and sending mails is the mail component's business."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import MailOutbox


def add(s: Session, **row: Any) -> int:
    """Queue a mail (the columns of ``mail_outbox``); a key queued before keeps its row,
    whose id is returned."""
    s.execute(
        insert(MailOutbox).values(**row).on_conflict_do_nothing(index_elements=["idempotency_key"])
    )
    return s.execute(
        text("SELECT id FROM mail_outbox WHERE idempotency_key = :k"),
        {"k": row["idempotency_key"]},
    ).scalar_one()


def claim_due(s: Session, now: datetime) -> Row | None:
    """The oldest pending mail due at ``now``, locked until the session's transaction ends
    (rows another deliverer holds are skipped, not waited for)."""
    return s.execute(
        text(
            "SELECT * FROM mail_outbox WHERE state = 'pending' AND "
            "(next_attempt_at IS NULL OR next_attempt_at <= :now) "
            "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
        ),
        {"now": now},
    ).first()


def mark_attempt_failed(
    s: Session, mail_id: int, *, attempts: int, error: str, gave_up: bool, retry_at: datetime
) -> None:
    s.execute(
        text(
            "UPDATE mail_outbox SET attempts = :a, last_error = :e, state = :s, "
            "next_attempt_at = :n WHERE id = :id"
        ),
        {
            "a": attempts,
            "e": error,
            "s": "failed" if gave_up else "pending",
            "n": retry_at,
            "id": mail_id,
        },
    )


def mark_sent(s: Session, mail_id: int, now: datetime) -> None:
    s.execute(
        text(
            "UPDATE mail_outbox SET state = 'sent', sent_at = :now, "
            "attempts = attempts + 1, last_error = '' WHERE id = :id"
        ),
        {"now": now, "id": mail_id},
    )


def listing(s: Session) -> list[Row]:
    """Every queued mail, oldest first: what ``stackbench mail list`` prints."""
    return list(
        s.execute(
            text(
                "SELECT id, kind, state, attempts, subject, last_error FROM mail_outbox ORDER BY id"
            )
        )
    )
