"""large runs' samples, also as one row of packed arrays

A comparison reads whole runs: the mmtests latency table of two kernels is 900,000 samples
in ten runs, and PostgreSQL scanning and aggregating that many rows of ``sample`` took
0.25-0.3 s of a cold ``stackbench compare`` (issue 16). ``run_samples`` keeps a large run's
samples once more, in the order the tables read them ((metric, seq)): the run's metric ids
and each one's number of samples as big-endian int4s, and the values as big-endian float8s,
each packed in a bytea (sending an int4[] or float8[] costs the server a call per element,
4 ms for the 100,000 of an LKP table; a bytea is copied as it is), stored uncompressed. Only runs of at least 2,000 samples (ingest's COPY_THRESHOLD, the
runs ingest COPYs) have a row: a small run (an LKP stats.json) is one cheap row per stat,
and writing it twice would slow its ingest, which is bound by per-run work. ``sample``
stays the table of record (queries by metric use it); this copy is written by ingest in the
run's own transaction, and runs never change once stored.

The comparison table's ``result`` (which also keeps the CLI's tables, 600 KB for an LKP
``--all`` of 10 commits) is compressed with lz4 where the server has it: pglz took 12 ms
of the 20 ms that storing such a table cost a cold ``stackbench compare``.

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
        "metric_ids bytea NOT NULL, "
        "counts bytea NOT NULL, "
        '"values" bytea NOT NULL)'
    )
    # compressing megabytes of float8s costs more than it saves on a read
    for column in ("metric_ids", "counts", '"values"'):
        op.execute(f"ALTER TABLE run_samples ALTER COLUMN {column} SET STORAGE EXTERNAL")
    op.execute(
        'INSERT INTO run_samples (run_id, metric_ids, counts, "values") '
        "SELECT run_id, string_agg(int4send(metric_id), ''::bytea ORDER BY metric_id), "
        "string_agg(int4send(n), ''::bytea ORDER BY metric_id), "
        "string_agg(v, ''::bytea ORDER BY metric_id) FROM ("
        "SELECT s.run_id, s.metric_id, count(*)::int AS n, "
        "string_agg(float8send(s.value), ''::bytea ORDER BY s.seq) AS v "
        "FROM sample s WHERE s.run_id IN ("
        "SELECT run_id FROM sample GROUP BY run_id HAVING count(*) >= 2000) "
        "GROUP BY s.run_id, s.metric_id) m GROUP BY run_id"
    )
    # lz4 needs PostgreSQL 14 built with it (Debian's is); elsewhere pglz stays
    op.execute(
        "DO $$ BEGIN EXECUTE 'ALTER TABLE comparison ALTER COLUMN result SET COMPRESSION lz4'; "
        "EXCEPTION WHEN OTHERS THEN NULL; END $$"
    )


def downgrade() -> None:
    op.execute(
        "DO $$ BEGIN EXECUTE 'ALTER TABLE comparison ALTER COLUMN result SET COMPRESSION "
        "default'; EXCEPTION WHEN OTHERS THEN NULL; END $$"
    )
    op.execute("DROP TABLE run_samples")
