"""a series' plan and the dispatcher's flags as typed columns of its attempt; runs keyed to
their series

The plan a submission asked for (jobs, runs, the adaptive looks' cap in boots, whether the
looks run, the guest, whether the claims are checked) and what the dispatcher acts on (a
report is due, the report mail queued or why none, the host fault a series waits on, a
pushed tree fetched) lived in ``series.meta`` and were read back as JSON keys. They are
columns of ``series_attempt`` now; a series with such keys but no attempt yet (stored for a
client that had not handed it over) gets its first attempt, ``waiting`` for that client.
A run names its series by ``run.series_id``, found once here from the boot ids the two
executors wrote (``series-<id>-attempt-...`` in-process, ``series-<id>-bb-...`` on
Buildbot), instead of by a pattern on every read.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

KEYS = (
    "jobs",
    "runs",
    "max_runs",
    "adaptive",
    "check_claims",
    "submitted",
    "report_mail",
    "host_fault",
    "fetched",
)
_ANY_KEY = "s.meta ?| array[" + ", ".join(f"'{k}'" for k in KEYS) + "]"
_WHOLE = "'^[0-9]{1,9}$'"


def _flag(key: str) -> str:
    return (
        f"CASE WHEN s.meta->'{key}' = 'true'::jsonb THEN true "
        f"WHEN s.meta->'{key}' = 'false'::jsonb THEN false END"
    )


def upgrade() -> None:
    for column, kind in (
        ("jobs", "jsonb"),
        ("runs", "integer"),
        ("max_boots", "integer"),
        ("adaptive", "boolean"),
        ("cpus", "integer"),
        ("mem_mb", "integer"),
        ("accel", "varchar(8)"),
        ("check_claims", "boolean NOT NULL DEFAULT false"),
        ("report_due", "boolean NOT NULL DEFAULT false"),
        ("report_mail", "jsonb"),
        ("host_fault", "jsonb"),
        ("fetched", "boolean"),
    ):
        op.execute(f"ALTER TABLE series_attempt ADD COLUMN {column} {kind}")
    op.execute(
        "INSERT INTO series_attempt (series_id, number, source, executor, started, ended, "
        "outcome) SELECT s.id, 1, left(coalesce(s.meta->>'submitted', s.source), 32), "
        "'waiting', s.created_at, "
        "CASE WHEN s.state IN ('done', 'failed', 'apply-failed') THEN s.updated_at END, "
        "CASE WHEN s.state IN ('done', 'failed', 'apply-failed') THEN s.state ELSE '' END "
        f"FROM series s WHERE {_ANY_KEY} "
        "AND NOT EXISTS (SELECT 1 FROM series_attempt a WHERE a.series_id = s.id)"
    )
    # every attempt followed the one plan the series kept
    op.execute(
        "UPDATE series_attempt a SET "
        "jobs = CASE WHEN jsonb_typeof(s.meta->'jobs') = 'array' THEN s.meta->'jobs' END, "
        f"runs = CASE WHEN s.meta->>'runs' ~ {_WHOLE} THEN (s.meta->>'runs')::int END, "
        f"max_boots = CASE WHEN s.meta->>'max_runs' ~ {_WHOLE} "
        "THEN (s.meta->>'max_runs')::int END, "
        f"adaptive = {_flag('adaptive')}, "
        f"check_claims = coalesce({_flag('check_claims')}, false), "
        "report_due = s.meta ? 'submitted' "
        f"FROM series s WHERE s.id = a.series_id AND {_ANY_KEY}"
    )
    # the flags are the latest attempt's
    op.execute(
        "UPDATE series_attempt a SET "
        "report_mail = NULLIF(s.meta->'report_mail', 'null'::jsonb), "
        "host_fault = NULLIF(s.meta->'host_fault', 'null'::jsonb), "
        f"fetched = {_flag('fetched')} "
        f"FROM series s WHERE s.id = a.series_id AND {_ANY_KEY} "
        "AND a.number = (SELECT max(b.number) FROM series_attempt b WHERE b.series_id = s.id)"
    )
    op.execute(
        "UPDATE series s SET meta = s.meta - array["
        + ", ".join(f"'{k}'" for k in KEYS)
        + f"] WHERE {_ANY_KEY}"
    )

    op.execute(
        "ALTER TABLE run ADD COLUMN series_id integer REFERENCES series(id) ON DELETE SET NULL"
    )
    op.execute(
        "UPDATE run r SET series_id = s.id FROM series s "
        "WHERE r.boot_id ~ '^series-[0-9]{1,9}-(attempt|bb)-' "
        "AND s.id = substring(r.boot_id from '^series-([0-9]{1,9})-')::int"
    )
    op.execute("CREATE INDEX ix_run_series ON run (series_id)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_run_series")
    op.execute("ALTER TABLE run DROP COLUMN series_id")
    op.execute(
        "UPDATE series s SET meta = s.meta || jsonb_strip_nulls(jsonb_build_object("
        "'jobs', a.jobs, 'runs', a.runs, 'max_runs', a.max_boots, 'adaptive', a.adaptive, "
        "'check_claims', CASE WHEN a.check_claims THEN true END, "
        "'submitted', CASE WHEN a.report_due THEN a.source END, "
        "'report_mail', a.report_mail, 'host_fault', a.host_fault, 'fetched', a.fetched)) "
        "FROM series_attempt a WHERE a.series_id = s.id "
        "AND a.number = (SELECT max(b.number) FROM series_attempt b WHERE b.series_id = s.id)"
    )
    op.execute("DELETE FROM series_attempt WHERE executor = 'waiting'")
    for column in (
        "jobs",
        "runs",
        "max_boots",
        "adaptive",
        "cpus",
        "mem_mb",
        "accel",
        "check_claims",
        "report_due",
        "report_mail",
        "host_fault",
        "fetched",
    ):
        op.execute(f"ALTER TABLE series_attempt DROP COLUMN {column}")
