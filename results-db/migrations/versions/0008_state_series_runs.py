"""typed series state: each hand-over's attempt, its batches of rounds and each round's try

``series_attempt`` is one hand-over of a series to an executor (number, who handed it over,
when it started and ended, its outcome) with what the dispatcher needs to follow it at
Buildbot (submission key, buildset, where its runs start, how many boots are planned) and
its progress (``k/N`` of the state's word, shown beside it).
``series_batch`` is one plan handed over at once (the first rounds, then each adaptive look)
with the plan's record. ``series_round`` is one try of a round on one worker: a round run
again after its worker was lost is a new try, not a second run. Before this, all of it was
JSON in ``series.meta`` (``attempts``, ``dispatch``, ``plans``, ``progress``) written by
five modules.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE series_attempt ("
        "id serial PRIMARY KEY, "
        "series_id integer NOT NULL REFERENCES series(id) ON DELETE CASCADE, "
        "number integer NOT NULL, "
        "source varchar(32) NOT NULL DEFAULT '', "
        "executor varchar(32) NOT NULL DEFAULT '', "
        "submission text NOT NULL DEFAULT '', "
        "buildset integer, "
        "buildbot text NOT NULL DEFAULT '', "
        "since_build integer NOT NULL DEFAULT 0, "
        "first_run bigint NOT NULL DEFAULT 0, "
        "kernels integer NOT NULL DEFAULT 0, "
        "benchmarks integer NOT NULL DEFAULT 0, "
        "progress varchar(32) NOT NULL DEFAULT '', "
        "started timestamptz NOT NULL DEFAULT now(), "
        "ended timestamptz, "
        "outcome varchar(32) NOT NULL DEFAULT '', "
        "UNIQUE (series_id, number))"
    )
    op.execute(
        "CREATE TABLE series_batch ("
        "id serial PRIMARY KEY, "
        "attempt_id integer NOT NULL REFERENCES series_attempt(id) ON DELETE CASCADE, "
        "key text NOT NULL, "
        "buildset integer, "
        "boots integer NOT NULL DEFAULT 0, "
        "have integer, "
        "stored integer, "
        "offsets jsonb NOT NULL DEFAULT '{}', "
        "plan jsonb NOT NULL DEFAULT '{}', "
        "created_at timestamptz NOT NULL DEFAULT now(), "
        "UNIQUE (attempt_id, key))"
    )
    op.execute(
        "CREATE TABLE series_round ("
        "id serial PRIMARY KEY, "
        "batch_id integer NOT NULL REFERENCES series_batch(id) ON DELETE CASCADE, "
        "round integer NOT NULL, "
        "try integer NOT NULL DEFAULT 1, "
        "worker text NOT NULL DEFAULT '', "
        "state varchar(32) NOT NULL DEFAULT 'planned', "
        "buildid integer, "
        "UNIQUE (batch_id, round, try))"
    )

    _from_meta()


FINAL = ("done", "failed", "apply-failed")


def _from_meta() -> None:
    """Series handed over before this revision keep their bookkeeping: an attempt numbered
    after every submission key the old counter made (so the next hand-over's key is new),
    with the dispatch keys, the plans as batches (the dispatcher's batches on the last
    plans, as it appended both together) and the k/N; the JSON keys are then dropped."""
    import json

    import sqlalchemy as sa

    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT id, state, meta, created_at, updated_at FROM series "
            "WHERE meta ?| array['submitted', 'dispatch', 'attempts', 'plans']"
        )
    ).all()
    for sid, state, meta, created, updated in rows:
        d = meta.get("dispatch") or {}
        ended = state in FINAL or d.get("executor") == "foreground"
        aid = conn.execute(
            sa.text(
                "INSERT INTO series_attempt (series_id, number, source, executor, submission, "
                "buildset, buildbot, since_build, first_run, kernels, benchmarks, progress, "
                "started, ended, outcome) VALUES (:sid, :n, :source, :executor, :submission, "
                ":buildset, :buildbot, :since, :first, :kernels, :benchmarks, :progress, "
                ":started, :ended, :outcome) RETURNING id"
            ),
            {
                "sid": sid,
                "n": int(meta.get("attempts") or 0) + 1,
                "source": str(meta.get("submitted") or "")[:32],
                "executor": str(d.get("executor") or "")[:32],
                "submission": str(d.get("submission") or ""),
                "buildset": d.get("buildset"),
                "buildbot": str(d.get("buildbot") or ""),
                "since": int(d.get("since_build") or 0),
                "first": int(d.get("first_run") or 0),
                "kernels": int(d.get("kernels") or 0),
                "benchmarks": int(d.get("benchmarks") or 0),
                "progress": "" if ended else str(meta.get("progress") or "")[:32],
                "started": created,
                "ended": updated if ended else None,
                "outcome": state if state in FINAL else ("superseded" if ended else ""),
            },
        ).scalar_one()
        plans = list(meta.get("plans") or [])
        batches = list(d.get("batches") or [])
        skip = len(plans) - len(batches)
        for i, plan in enumerate(plans):
            b = batches[i - skip] if i >= skip else {}
            last = i == len(plans) - 1
            conn.execute(
                sa.text(
                    "INSERT INTO series_batch (attempt_id, key, buildset, boots, have, offsets, "
                    "plan) VALUES (:aid, :key, :buildset, :boots, :have, "
                    "CAST(:offsets AS jsonb), CAST(:plan AS jsonb))"
                ),
                {
                    "aid": aid,
                    "key": str(b.get("key") or f"plan-{i + 1}"),
                    "buildset": b.get("buildset"),
                    "boots": int(b.get("boots") or 0),
                    "have": d.get("have") if last else None,
                    "offsets": json.dumps((d.get("offsets") or {}) if last else {}),
                    "plan": json.dumps(plan),
                },
            )
        for key in ("dispatch", "attempts", "plans", "progress"):
            meta.pop(key, None)
        conn.execute(
            sa.text("UPDATE series SET meta = CAST(:meta AS jsonb) WHERE id = :sid"),
            {"meta": json.dumps(meta), "sid": sid},
        )


def downgrade() -> None:
    op.execute("DROP TABLE series_round")
    op.execute("DROP TABLE series_batch")
    op.execute("DROP TABLE series_attempt")
