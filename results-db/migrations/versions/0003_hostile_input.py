"""raw mbox bytes, session generations, verified addresses, failed logins

Series keep the submitted mails as bytes (``git am`` applies exactly what was sent, in
whatever charset) in a column of their own, so listing series never reads them. A user's
``session_gen`` is part of every signed session; bumping it (logout, password change)
ends all of that user's sessions. ``email_verified`` marks the one address report mails may
go to. ``login_failure`` counts wrong passwords per name and client for the throttle,
shared by every web worker.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("series", sa.Column("mbox", sa.LargeBinary(), nullable=True))
    op.add_column(
        "app_user", sa.Column("session_gen", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(
        "app_user",
        sa.Column("email_verified", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "login_failure",
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("remote", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index("ix_login_failure_created", "login_failure", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_login_failure_created", table_name="login_failure")
    op.drop_table("login_failure")
    op.drop_column("app_user", "email_verified")
    op.drop_column("app_user", "session_gen")
    op.drop_column("series", "mbox")
