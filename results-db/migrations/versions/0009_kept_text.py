"""the CLI's kept tables in a table of their own, as bytes

``stackbench compare`` kept its tables inside the web's ``comparison`` rows, as a string in
a jsonb document: reading a 6 MB LKP ``--all`` text back meant the server taking the whole
document apart (75-150 ms measured at scale 10, more than making the table again from its
kept columns). ``kept_table`` holds each text as bytea, stored uncompressed, read in
psycopg's binary format and written to stdout as it comes (15-25 ms for the same text),
beside the build ids and the fingerprint of the runs it was made from (tables/textcache.py).
The entries kept in ``comparison`` are dropped: the next command makes them again.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE kept_table ("
        "key text PRIMARY KEY, "
        "build_ids integer[] NOT NULL, "
        "fingerprint text NOT NULL, "
        "options jsonb NOT NULL, "
        "warnings jsonb NOT NULL DEFAULT '[]', "
        "text bytea NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now())"
    )
    op.execute("ALTER TABLE kept_table ALTER COLUMN text SET STORAGE EXTERNAL")
    op.execute("DELETE FROM comparison WHERE key LIKE 'cli-%'")


def downgrade() -> None:
    op.execute("DROP TABLE kept_table")
