"""large runs' samples, also as one row of packed arrays

A comparison reads whole runs: the mmtests latency table of two kernels is 900,000 samples
in ten runs, and PostgreSQL scanning and aggregating that many rows of ``sample`` took
0.25-0.3 s of a cold ``stackbench compare`` (issue 16). ``run_samples`` keeps a large run's
samples once more, in the order the tables read them ((metric, seq)): the run's metric ids
and each one's number of samples as int4 arrays, and the values as big-endian float8s packed
in a bytea (sending a float8[] costs the server a call per element; a bytea is copied as it
is), stored uncompressed. Only runs of at least 2,000 samples (ingest's COPY_THRESHOLD, the
runs ingest COPYs) have a row: a small run (an LKP stats.json) is one cheap row per stat,
and writing it twice would slow its ingest, which is bound by per-run work. ``sample``
stays the table of record (queries by metric use it); this copy is written by ingest in the
run's own transaction, and runs never change once stored.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE run_samples ("
        "run_id integer PRIMARY KEY REFERENCES run(id) ON DELETE CASCADE, "
        "metric_ids integer[] NOT NULL, "
        "counts integer[] NOT NULL, "
        '"values" bytea NOT NULL)'
    )
    # compressing megabytes of float8s costs more than it saves on a read
    op.execute('ALTER TABLE run_samples ALTER COLUMN "values" SET STORAGE EXTERNAL')
    op.execute(
        'INSERT INTO run_samples (run_id, metric_ids, counts, "values") '
        "SELECT run_id, array_agg(metric_id ORDER BY metric_id), array_agg(n ORDER BY metric_id), "
        "string_agg(v, ''::bytea ORDER BY metric_id) FROM ("
        "SELECT s.run_id, s.metric_id, count(*)::int AS n, "
        "string_agg(float8send(s.value), ''::bytea ORDER BY s.seq) AS v "
        "FROM sample s WHERE s.run_id IN ("
        "SELECT run_id FROM sample GROUP BY run_id HAVING count(*) >= 2000) "
        "GROUP BY s.run_id, s.metric_id) m GROUP BY run_id"
    )


def downgrade() -> None:
    op.execute("DROP TABLE run_samples")
