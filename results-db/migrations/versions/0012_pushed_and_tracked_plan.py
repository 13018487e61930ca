"""a pushed series' commits and a tracked branch's plan as typed columns

Two kinds of ``meta`` keys were still read back as data: a series that came by git push
kept where its commits are (``meta["push"]``: the intake repository and the pushed
head; its ref, which nothing read, goes) for the apply stage to fetch, and a tracked branch kept its YAML plan (``runs``,
``max_runs``, ``bisect``) for the nightly. They are columns now, written once where the
series is taken or the branch registered. Series stored before the hostile-input migration
by the CLI kept their mails base64-encoded in ``meta["mbox_b64"]``: they move to
``series.mbox``, the one place the apply stage reads a series' mails from.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PLAN = ("runs", "max_runs", "bisect")
_WHOLE = "'^[0-9]{1,9}$'"


def upgrade() -> None:
    for column in ("push_repo text", "push_head varchar(64)"):
        op.execute(f"ALTER TABLE series ADD COLUMN {column}")
    op.execute(
        "UPDATE series SET push_repo = meta->'push'->>'repo', "
        "push_head = left(meta->'push'->>'head', 64), meta = meta - 'push' "
        "WHERE jsonb_typeof(meta->'push') = 'object'"
    )
    op.execute("UPDATE series SET meta = meta - 'push' WHERE meta ? 'push'")
    op.execute(
        "UPDATE series SET mbox = decode(meta->>'mbox_b64', 'base64') "
        "WHERE mbox IS NULL AND jsonb_typeof(meta->'mbox_b64') = 'string'"
    )
    op.execute("UPDATE series SET meta = meta - 'mbox_b64' WHERE meta ? 'mbox_b64'")

    op.execute("ALTER TABLE tracked_branch ADD COLUMN runs integer")
    op.execute("ALTER TABLE tracked_branch ADD COLUMN max_runs integer")
    op.execute("ALTER TABLE tracked_branch ADD COLUMN bisect boolean NOT NULL DEFAULT true")
    op.execute(
        "UPDATE tracked_branch SET "
        f"runs = CASE WHEN meta->>'runs' ~ {_WHOLE} THEN (meta->>'runs')::int END, "
        f"max_runs = CASE WHEN meta->>'max_runs' ~ {_WHOLE} THEN (meta->>'max_runs')::int END, "
        "bisect = meta->'bisect' IS DISTINCT FROM 'false'::jsonb, "
        "meta = meta - array[" + ", ".join(f"'{k}'" for k in PLAN) + "] "
        "WHERE meta ?| array[" + ", ".join(f"'{k}'" for k in PLAN) + "]"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE tracked_branch SET meta = coalesce(meta, '{}'::jsonb) || jsonb_build_object("
        "'runs', runs, 'max_runs', max_runs, 'bisect', bisect)"
    )
    for column in PLAN:
        op.execute(f"ALTER TABLE tracked_branch DROP COLUMN {column}")
    op.execute(
        "UPDATE series SET meta = coalesce(meta, '{}'::jsonb) || jsonb_build_object('push', "
        "jsonb_build_object('repo', push_repo, 'head', push_head)) "
        "WHERE push_head IS NOT NULL"
    )
    for column in ("push_repo", "push_head"):
        op.execute(f"ALTER TABLE series DROP COLUMN {column}")
