"""mailing lists as sources: each list's fetch state, the messages read, the threads made

``mail_list`` is one declared list (kernels/lists/*.yaml) as the watcher last saw it: the
last commit read in each public-inbox epoch (``cursors``), committed in the same
transaction as the messages those commits held, so a killed fetch neither loses nor
duplicates a message; the last error and when to try again (backoff).
``list_message`` is every message read, once per Message-ID and list: a part of a series
or skipped with its reason. ``list_thread`` is one posted series (cover letter or first
patch and its replies by In-Reply-To/References) on its way to becoming a series, or why
it did not (incomplete after the time box, outside the list's paths).

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE mail_list ("
        "id serial PRIMARY KEY, "
        "name varchar(200) NOT NULL UNIQUE, "
        "archive text NOT NULL DEFAULT '', "
        "cursors jsonb NOT NULL DEFAULT '{}', "
        "last_fetch_at timestamptz, "
        "last_ok_at timestamptz, "
        "last_error text NOT NULL DEFAULT '', "
        "failures integer NOT NULL DEFAULT 0, "
        "next_fetch_at timestamptz, "
        "meta jsonb NOT NULL DEFAULT '{}', "
        "created_at timestamptz NOT NULL DEFAULT now())"
    )
    op.execute(
        "CREATE TABLE list_thread ("
        "id serial PRIMARY KEY, "
        "list_id integer NOT NULL REFERENCES mail_list(id) ON DELETE CASCADE, "
        "root text NOT NULL, "
        "title text NOT NULL DEFAULT '', "
        "version integer NOT NULL DEFAULT 1, "
        "total integer NOT NULL DEFAULT 0, "
        "state varchar(16) NOT NULL DEFAULT 'collecting', "
        "reason text NOT NULL DEFAULT '', "
        "series_id integer REFERENCES series(id) ON DELETE SET NULL, "
        "first_seen timestamptz NOT NULL DEFAULT now(), "
        "updated_at timestamptz NOT NULL DEFAULT now(), "
        "UNIQUE (list_id, root, version))"
    )
    op.execute("CREATE INDEX ix_list_thread_state ON list_thread (state)")
    op.execute(
        "CREATE TABLE list_message ("
        "id bigserial PRIMARY KEY, "
        "list_id integer NOT NULL REFERENCES mail_list(id) ON DELETE CASCADE, "
        "message_id text NOT NULL, "
        "epoch integer NOT NULL, "
        "git_commit varchar(64) NOT NULL, "
        "subject text NOT NULL DEFAULT '', "
        "sender text NOT NULL DEFAULT '', "
        "kind varchar(16) NOT NULL, "
        "reason text NOT NULL DEFAULT '', "
        "thread_id integer REFERENCES list_thread(id) ON DELETE SET NULL, "
        "idx integer, "
        "raw bytea, "
        "created_at timestamptz NOT NULL DEFAULT now(), "
        "UNIQUE (list_id, message_id))"
    )
    op.execute("CREATE INDEX ix_list_message_thread_id ON list_message (thread_id)")


def downgrade() -> None:
    op.execute("DROP TABLE list_message")
    op.execute("DROP TABLE list_thread")
    op.execute("DROP TABLE mail_list")
