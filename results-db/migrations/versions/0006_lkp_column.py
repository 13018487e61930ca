"""each kernel's LKP column of a job, kept for ``--all`` tables

``lkp ncompare`` reads each commit's matrix.json, written when the result was uploaded.
``lkp_column`` keeps the same per-kernel facts for stackbench's LKP tables
(tables/lkp_columns.py): per (job, kernel), every stat's average over the kernel's complete
runs and the cell the table prints for it, and the failure stats' sums: names and cells as
newline-separated text, numbers as little-endian float8s in hex (a client splits text and
unpacks bytes faster than it converts array elements or parses numbers). The columns are
stored uncompressed: decompressing a table's megabyte cost the read 2 ms. A
row holds the fingerprint of the runs and of the table code it was made from; a stale row
is made again when a table needs it.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE lkp_column ("
        "job_id integer NOT NULL REFERENCES job(id) ON DELETE CASCADE, "
        "build_id integer NOT NULL REFERENCES kernel_build(id) ON DELETE CASCADE, "
        "fingerprint text NOT NULL, "
        "runs integer NOT NULL, "
        "axes text NOT NULL, "
        "perf text NOT NULL, "
        "avgs text NOT NULL, "
        "cells text NOT NULL, "
        "fails text NOT NULL, "
        "sums text NOT NULL, "
        "origins text NOT NULL, "
        "PRIMARY KEY (job_id, build_id))"
    )
    op.execute("CREATE INDEX ix_lkp_column_build_id ON lkp_column (build_id)")
    for column in ("axes", "perf", "avgs", "cells", "fails", "sums", "origins"):
        op.execute(f"ALTER TABLE lkp_column ALTER COLUMN {column} SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.execute("DROP TABLE lkp_column")
