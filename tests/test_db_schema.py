"""The schema check every command makes: a version read against the migrations' head, a
migration only for a database never migrated, and a clear error (nothing changed) otherwise."""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy import create_engine, text

from stackbench.resultsdb import db


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stackbench", *args], capture_output=True, text=True, timeout=120
    )


def test_head_revision_is_alembics_head():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config(None))
    assert db.head_revision() == script.get_current_head()


def test_empty_database_is_migrated_on_first_use(db_url):
    with create_engine(db_url.replace("postgresql://", "postgresql+psycopg://")).begin() as c:
        c.execute(text("DROP SCHEMA public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    db.reset()
    eng = db.engine()
    assert db.current_revision(eng) == db.head_revision()
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_other_revision_is_refused_until_migrate(eng, db_url):
    from alembic import command

    # a database left at the first revision by an older stackbench: every later migration
    # undone for real, so that `migrate` has them all to apply
    command.downgrade(db.alembic_config(eng), "0001")
    db.reset()
    res = _cli("compare", "nothing")
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f"stackbench: error: the database schema is at revision 0001, this stackbench needs "
        f"{db.head_revision()}: run 'stackbench migrate' (or 'stackbench up')"
    )
    assert "Traceback" not in res.stderr
    with eng.connect() as c:  # nothing was changed behind the user's back
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0001"
    res = _cli("migrate")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"database at revision {db.head_revision()}"
    with eng.connect() as c:
        assert c.execute(text("SELECT to_regclass('ix_run_build')")).scalar() == "ix_run_build"
    res = _cli("compare", "nothing")
    assert res.returncode == 1
    assert "unknown kernel 'nothing'" in res.stderr


def test_series_bookkeeping_moves_from_meta_to_its_tables(eng):
    """A series handed over to Buildbot before revision 0008, mid-rounds: its attempt,
    dispatch keys, plans and k/N are in the typed tables after the migration, numbered so
    the next hand-over's submission key is new, and gone from series.meta."""
    import json

    from alembic import command

    from stackbench.resultsdb import series_runs_store
    from stackbench.resultsdb.models import Series

    with db.session(eng) as s:
        row = Series(title="t", state="running")
        s.add(row)
        s.flush()
        sid = row.id
    command.downgrade(db.alembic_config(eng), "0007")
    meta = {
        "submitted": "web",
        "attempts": 1,
        "progress": "3/6",
        "runs": 2,
        "plans": [{"seed": 1, "order": [["a"]]}, {"seed": 2, "order": [["b"]]}],
        "dispatch": {
            "executor": "buildbot", "submission": "stackbench-series-1-2", "buildset": 4,
            "since_build": 9, "first_run": 17, "kernels": 3, "benchmarks": 6,
            "buildbot": "http://m/", "rounds_by": "dispatcher", "have": 2,
            "offsets": {"vm": 2}, "batches": [{"key": "k-rounds-1", "buildset": 5, "boots": 6}],
        },
    }  # fmt: skip
    with eng.begin() as c:
        c.execute(text("UPDATE series SET meta = CAST(:m AS jsonb) WHERE id = :s"),
                  {"m": json.dumps(meta), "s": sid})  # fmt: skip
    command.upgrade(db.alembic_config(eng), "head")
    with db.session(eng) as s:
        d = series_runs_store.dispatch(s, sid)
        plans = series_runs_store.plans(s, sid)
        step = series_runs_store.progress(s, [sid])
        left = s.get(Series, sid).meta
    assert (d.number, d.executor, d.submission, d.buildset, d.since_build) == (
        2, "buildbot", "stackbench-series-1-2", 4, 9
    )  # fmt: skip
    assert (d.first_run, d.kernels, d.benchmarks, d.batches, d.have, d.offsets) == (
        17, 3, 6, 2, 2, {"vm": 2}
    )  # fmt: skip
    assert [p["seed"] for p in plans] == [1, 2] and step == {sid: "3/6"}
    assert left == {}  # the plan and the report flag went on to the attempt (0011)
    with db.session(eng) as s:
        last = series_runs_store.current(s, sid)
        assert (last.runs, last.report_due, last.source) == (2, True, "web")


def test_the_plan_and_the_dispatchers_flags_move_from_meta_to_the_attempt(eng):
    """Revision 0011: a series' plan and the flags the dispatcher acts on become columns
    of its attempt (a series no client handed over yet gets one, waiting for it), what is
    only shown stays in meta, and runs find their series by key, not by boot id."""
    import json

    from alembic import command
    from sqlalchemy import func

    from stackbench.resultsdb import series_runs_store, series_store
    from stackbench.resultsdb.models import Job, KernelBuild, Machine, Run, Series, SeriesAttempt

    with db.session(eng) as s:
        handed, waiting = Series(title="a", state="done"), Series(title="b", state="new")
        s.add_all([handed, waiting])
        s.flush()
        s.add(SeriesAttempt(series_id=handed.id, number=1, source="web", ended=func.now(),
                            outcome="done"))  # fmt: skip
        sids = handed.id, waiting.id
        m, k = Machine(name="m0"), KernelBuild(commit="c0")
        j = Job(suite="thpscale", params_key="")
        s.add_all([m, k, j])
        s.flush()
        boots = [f"series-{sids[0]}-attempt-1-r1-c0", f"series-{sids[1]}-bb-7", "bench-x-1",
                 f"series-{sids[0] + 99}-bb-1"]  # fmt: skip
        for n, boot in enumerate(boots):
            s.add(Run(job_id=j.id, build_id=k.id, machine_id=m.id, idempotency_key=f"k{n}",
                      boot_id=boot))  # fmt: skip
    command.downgrade(db.alembic_config(eng), "0010")
    metas = {
        sids[0]: {
            "submitted": "web", "jobs": ["thpscale"], "runs": 5, "max_runs": 12,
            "adaptive": False, "report_mail": {"id": 3, "to": ["a@example.org"]},
            "host_fault": {"error": "disk full", "step": "apply"}, "fetched": True,
            "more_rounds": "2 more rounds", "lost_workers": ["w1 lost"],
        },
        sids[1]: {"jobs": ["vm-scalability"], "check_claims": True},
    }  # fmt: skip
    with eng.begin() as c:
        for sid, meta in metas.items():
            c.execute(text("UPDATE series SET meta = CAST(:m AS jsonb) WHERE id = :s"),
                      {"m": json.dumps(meta), "s": sid})  # fmt: skip
    command.upgrade(db.alembic_config(eng), "head")
    with db.session(eng) as s:
        a, w = (series_runs_store.current(s, sid) for sid in sids)
        assert (a.jobs, a.runs, a.max_boots, a.adaptive, a.check_claims) == (
            ["thpscale"], 5, 12, False, False)  # fmt: skip
        assert a.report_due and a.report_mail == {"id": 3, "to": ["a@example.org"]}
        assert a.host_fault == {"error": "disk full", "step": "apply"} and a.fetched is True
        assert (w.number, w.executor, w.ended, w.jobs, w.check_claims, w.report_due) == (
            1, series_runs_store.WAITING, None, ["vm-scalability"], True, False)  # fmt: skip
        left = s.get(Series, sids[0]).meta
        assert left == {"more_rounds": "2 more rounds", "lost_workers": ["w1 lost"]}
        assert s.get(Series, sids[1]).meta == {}
        keyed = [r.series_id for r in s.query(Run).order_by(Run.id)]
        assert series_store.unreported(s) == []  # its report mail is noted
    assert keyed == [sids[0], sids[1], None, None]


def test_a_pushed_series_and_a_tracked_branchs_plan_move_from_meta_to_columns(eng):
    """Revision 0012: where a pushed series' commits are and a tracked branch's plan become
    columns, a CLI series' base64 mails its ``mbox``; what is only shown stays in meta."""
    import base64
    import json

    from alembic import command

    from stackbench.resultsdb.models import Series, TrackedBranch, Tree

    with db.session(eng) as s:
        pushed, old_cli, plain = Series(title="p"), Series(title="c"), Series(title="x")
        tree = Tree(name="mm")
        s.add_all([pushed, old_cli, plain, tree])
        s.flush()
        yaml_row = TrackedBranch(tree_id=tree.id, branch="main", jobs=["thpscale"])
        admin_row = TrackedBranch(tree_id=tree.id, branch="next", jobs=["thpscale"])
        s.add_all([yaml_row, admin_row])
        s.flush()
        sids, bids = (pushed.id, old_cli.id, plain.id), (yaml_row.id, admin_row.id)
    command.downgrade(db.alembic_config(eng), "0011")
    push = {"repo": "/srv/intake.git", "ref": "refs/for/mm/main", "head": "e" * 40}
    metas = {
        sids[0]: {"push": push, "rfc": True},
        sids[1]: {"mbox_b64": base64.b64encode(b"From: a\n\nmail\n").decode()},
        sids[2]: {"rfc": True},
    }
    branch_metas = {
        bids[0]: {"source": "a.yaml", "runs": 4, "max_runs": 9, "bisect": False,
                  "last_run": {"head": "f" * 40}},
        bids[1]: {"source": "api"},
    }  # fmt: skip
    with eng.begin() as c:
        for sid, meta in metas.items():
            c.execute(text("UPDATE series SET meta = CAST(:m AS jsonb) WHERE id = :s"),
                      {"m": json.dumps(meta), "s": sid})  # fmt: skip
        for bid, meta in branch_metas.items():
            c.execute(text("UPDATE tracked_branch SET meta = CAST(:m AS jsonb) WHERE id = :b"),
                      {"m": json.dumps(meta), "b": bid})  # fmt: skip
    command.upgrade(db.alembic_config(eng), "head")
    with db.session(eng) as s:
        p, c, x = (s.get(Series, sid) for sid in sids)
        assert (p.push_repo, p.push_head, p.meta) == ("/srv/intake.git", "e" * 40, {"rfc": True})
        assert (c.mbox, c.meta, c.push_head) == (b"From: a\n\nmail\n", {}, None)
        assert (x.mbox, x.meta, x.push_head) == (None, {"rfc": True}, None)
        y, a = (s.get(TrackedBranch, bid) for bid in bids)
        assert (y.runs, y.max_runs, y.bisect) == (4, 9, False)
        assert y.meta == {"source": "a.yaml", "last_run": {"head": "f" * 40}}
        assert (a.runs, a.max_runs, a.bisect, a.meta) == (None, None, True, {"source": "api"})
