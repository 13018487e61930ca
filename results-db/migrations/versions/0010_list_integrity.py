"""a list's Message-IDs per sender, threads per length, and the commits' own authors

A Message-ID is a claim any sender can make: a mail that arrived first with another
sender's Message-ID hid the real one (``UNIQUE (list_id, message_id)``), so a list message
is now unique per (list, Message-ID, sender) and the watcher decides the rest. A thread is
one (root, version, length): a stranger's ``[PATCH 1/5]`` answering a 3-patch cover no
longer claims the thread's length. ``git am`` takes the author, subject and date from
in-body ``From:``/``Subject:``/``Date:`` lines: the ``commit_*`` columns hold what the
applied commit carries, beside the mail's header values.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE list_message SET sender = lower(sender)")
    op.execute("ALTER TABLE list_message DROP CONSTRAINT list_message_list_id_message_id_key")
    op.execute(
        "ALTER TABLE list_message ADD CONSTRAINT list_message_list_id_message_id_sender_key "
        "UNIQUE (list_id, message_id, sender)"
    )
    op.execute("ALTER TABLE list_thread DROP CONSTRAINT list_thread_list_id_root_version_key")
    op.execute(
        "ALTER TABLE list_thread ADD CONSTRAINT list_thread_list_id_root_version_total_key "
        "UNIQUE (list_id, root, version, total)"
    )
    for column in ("commit_author", "commit_author_email", "commit_date", "commit_subject"):
        op.execute(f"ALTER TABLE patch ADD COLUMN {column} text")


def downgrade() -> None:
    for column in ("commit_author", "commit_author_email", "commit_date", "commit_subject"):
        op.execute(f"ALTER TABLE patch DROP COLUMN {column}")
    op.execute("ALTER TABLE list_thread DROP CONSTRAINT list_thread_list_id_root_version_total_key")
    op.execute(
        "ALTER TABLE list_thread ADD CONSTRAINT list_thread_list_id_root_version_key "
        "UNIQUE (list_id, root, version)"
    )
    op.execute(
        "ALTER TABLE list_message DROP CONSTRAINT list_message_list_id_message_id_sender_key"
    )
    op.execute(
        "ALTER TABLE list_message ADD CONSTRAINT list_message_list_id_message_id_key "
        "UNIQUE (list_id, message_id)"
    )
