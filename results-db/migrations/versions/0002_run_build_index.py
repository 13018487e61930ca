"""index runs by kernel build

Comparisons and the web's run checks select runs by build_id alone; the (job_id, build_id)
index cannot serve that, so they scanned the whole run table.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_run_build", "run", ["build_id"])


def downgrade() -> None:
    op.drop_index("ix_run_build", table_name="run")
