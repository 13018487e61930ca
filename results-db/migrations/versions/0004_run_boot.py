"""record the boot each run came from

Runs of one boot share that boot's state and the host's load at that time, so they are not
independent samples: statistics must treat boots as the units (issue 11). ``boot_id`` names
the boot (one QEMU boot or one bare-metal boot), ``boot_round`` the round of the plan it
belonged to (each round boots every kernel of a comparison once, in a shuffled order).
Runs stored before this revision carry the boot id in ``meta`` when the pipeline made them;
it is copied over. Imported runs have no boot: NULL.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("boot_id", sa.String(128), nullable=True))
    op.add_column("run", sa.Column("boot_round", sa.Integer(), nullable=True))
    op.execute("UPDATE run SET boot_id = left(meta->>'boot_id', 128) WHERE meta ? 'boot_id'")
    op.create_index("ix_run_boot", "run", ["boot_id"])


def downgrade() -> None:
    op.drop_index("ix_run_boot", table_name="run")
    op.drop_column("run", "boot_round")
    op.drop_column("run", "boot_id")
