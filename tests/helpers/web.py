"""Helpers and fixtures for the web tests (imported by tests/web/test_web_*.py; no tests here).

Everything runs against the real PostgreSQL of the ``eng`` fixture; data is written through
the real models and the real ingest, as workers and importers write it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

DATA = Path(__file__).resolve().parents[1] / "data" / "web"


@pytest.fixture
def app(eng, monkeypatch):
    from stackbench.web import comparisons, create_app

    # each test's database starts empty, so build ids (and comparison keys) repeat: the
    # per-process caches must not serve the previous test's page
    for name, size in (("RESULTS", 32), ("CACHE", 64), ("_RECENT", 256)):
        monkeypatch.setattr(comparisons, name, comparisons.RenderCache(size))

    return create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def basic(name: str, secret: str) -> dict[str, str]:
    """git's credentials: the user name and an API token."""
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()}


def rule_path(rule, pick=None) -> str:
    """A path of ``rule`` (a werkzeug Rule of ``app.url_map``): ``pick(name, converter)``
    gives each argument's value, by default 1 for numbers and "x" for the rest."""
    from werkzeug.routing.converters import NumberConverter

    def default(name, conv):
        return 1 if isinstance(conv, NumberConverter) else "x"

    pick = pick or default
    values = {name: pick(name, conv) for name, conv in rule._converters.items()}
    return rule.build(values, append_unknown=False)[1]


def upload_body(key="run-key-1", **over):
    """A run in the wire format (results-db/wire.py), as a worker posts it."""
    import base64

    body = {
        "job": {
            "suite": "vm-scalability",
            "test": "anon-w-seq",
            "params": {"test": "anon-w-seq"},
            "suite_version": "v1",
            "runner": "builtin",
        },
        "kernel": {"commit": "c" * 40, "name": "v6.1-test"},
        "machine": {"name": "qemu-7", "kind": "qemu", "cpus": 2, "memory_mb": 2048},
        "iteration": 0,
        "samples": {"vm-scalability.throughput": [1234.5], "thpscale.fault-huge-1": [1, 2, 3]},
        "logs": {"console": base64.b64encode(b"booted\n").decode()},
        "sysstate": {"vmstat_before": {"compact_stall": 1}},
        "idempotency_key": key,
    }
    body.update(over)
    return body


def db(eng) -> Session:
    return Session(bind=eng, expire_on_commit=False)


def add_user(eng, name="alice", password="pw-alice-1", admin=False, worker=False):
    from stackbench.mail import accounts

    with db(eng) as s:
        u = accounts.create_user(s, name, password=password, admin=admin, worker=worker)
        s.commit()
        return u


def add_token(eng, name="alice") -> str:
    from stackbench.mail import accounts

    with db(eng) as s:
        tok = accounts.create_token(s, accounts.find_user(s, name), "test")
        s.commit()
        return tok


def add_tree(eng, name="mm") -> int:
    from stackbench.resultsdb.models import Tree

    with db(eng) as s:
        t = Tree(name=name, url="file:///srv/linux", default_base="v6.1")
        s.add(t)
        s.commit()
        return t.id


def csrf_of(client, path: str) -> str:
    html = client.get(path).get_data(as_text=True)
    m = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert m, f"no csrf token on {path}"
    return m.group(1)


def login(client, name="alice", password="pw-alice-1"):
    tok = csrf_of(client, "/login")
    r = client.post("/login", data={"name": name, "password": password, "csrf_token": tok})
    assert r.status_code == 303, r.get_data(as_text=True)
    return r


def make_series(
    eng,
    *,
    title="mm: compaction tweaks",
    tree="mm",
    n=2,
    state="new",
    subjects=None,
    submitter="Alice Dev",
    base="a" * 40,
    owner_id=None,
):
    """A series stored the way the patch intake stores one (state "new", patches pending)."""
    from sqlalchemy import select

    from stackbench.resultsdb import series_runs_store
    from stackbench.resultsdb.models import Patch, Series, Tree

    with db(eng) as s:
        t = s.scalar(select(Tree).where(Tree.name == tree))
        x = Series(
            tree_id=t.id if t else None,
            title=title,
            submitter=submitter,
            submitter_email="alice@example.org",
            base_ref="v6.1",
            base_commit=base,
            state=state,
            source="mbox",
            owner_id=owner_id,
            cover_letter="Cover text",
        )
        subjects = subjects or [f"mm: patch number {i}" for i in range(1, n + 1)]
        for i, subj in enumerate(subjects, 1):
            x.patches.append(
                Patch(
                    idx=i,
                    total=len(subjects),
                    subject=subj,
                    author=submitter,
                    body="body",
                    diff="--- a\n+++ b\n",
                )
            )
        s.add(x)
        s.flush()
        # the plan, on an attempt waiting for a client to hand the series over
        series_runs_store.begin(s, x.id, source="mbox", executor=series_runs_store.WAITING,
                                jobs=["vm-scalability"], runs=3)  # fmt: skip
        s.commit()
        return x.id


def run_data(
    commit,
    iteration,
    values: dict[str, float],
    *,
    name=None,
    suite="vm-scalability",
    test="anon-w-seq",
    machine="qemu-1",
    key=None,
):
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    return RunData(
        job=JobSpec(
            suite=suite,
            test=test,
            params={"test": test, "runtime": "300s"},
            suite_version="v1",
            runner="builtin",
        ),
        kernel=KernelSpec(commit=commit, name=name or commit[:12], status="built"),
        machine=MachineSpec(name=machine, kind="qemu", cpus=2, memory_mb=2048),
        iteration=iteration,
        samples={k: [v] for k, v in values.items()},
        source="test",
        idempotency_key=key,
    )


def attach_builds(eng, series_id: int) -> list[int]:
    """Give the series' base and patches kernel builds (as the pipeline does once applied)."""
    from sqlalchemy import select

    from stackbench.resultsdb.models import KernelBuild, Patch, Series

    ids = []
    with db(eng) as s:
        x = s.get(Series, series_id)
        base = s.scalar(select(KernelBuild).where(KernelBuild.commit == x.base_commit))
        if base is None:
            base = KernelBuild(commit=x.base_commit, name="base", status="built")
            s.add(base)
        base.series_id = x.id
        ids.append(base)
        for p in s.scalars(select(Patch).where(Patch.series_id == x.id).order_by(Patch.idx)):
            p.commit_sha = p.commit_sha or hashlib.sha1(f"{x.id}-{p.idx}".encode()).hexdigest()
            p.state = "applied"
            b = s.scalar(select(KernelBuild).where(KernelBuild.commit == p.commit_sha[:40]))
            if b is None:
                b = KernelBuild(commit=p.commit_sha[:40], name=f"patch{p.idx}", status="built")
                s.add(b)
            b.series_id, b.patch_id = x.id, p.id
            ids.append(b)
        x.state = "building"
        s.commit()
        return [b.id for b in ids]


def populate_results(eng, series_id: int, runs: int = 3, stats: int = 3):
    """Ingest runs for every kernel of the series: the last patch makes throughput worse."""
    from stackbench.resultsdb import ingest
    from stackbench.resultsdb.models import KernelBuild

    build_ids = attach_builds(eng, series_id)
    with db(eng) as s:
        builds = [s.get(KernelBuild, b) for b in build_ids]
    data = []
    for ki, b in enumerate(builds):
        worse = ki == len(builds) - 1
        for it in range(runs):
            vals = {"vm-scalability.throughput": (800.0 if worse else 1000.0) + it * 3}
            for j in range(stats - 1):
                vals[f"proc-vmstat.compact_stall_{j}" if j == 0 else f"vm-scalability.m{j}"] = (
                    100.0 + j + it
                )
            data.append(run_data(b.commit, it, vals, name=b.name))
    ingest.ingest(eng, data)
    return build_ids


def finish(eng, series_id: int, build_ids: list[int]) -> None:
    """The series ended, its kernels built with a config as the pipeline builds them."""
    from sqlalchemy import update

    from stackbench.resultsdb.models import KernelBuild, Series

    with db(eng) as s:
        s.execute(update(Series).where(Series.id == series_id).values(state="done"))
        s.execute(
            update(KernelBuild)
            .where(KernelBuild.id.in_(build_ids))
            .values(config_name="tiny-guest")
        )
        s.commit()


def finished_series(eng, n: int, runs: int = 3) -> tuple[int, list[int]]:
    """A finished series of N patches with RUNS stored runs per kernel, on the tree ``mm``:
    (its id, its kernel builds' ids, base first), as the evidence sections are read from."""
    add_tree(eng)
    sid = make_series(eng, n=n)
    build_ids = populate_results(eng, sid, runs=runs)
    finish(eng, sid, build_ids)
    return sid, build_ids


def changed_function(name: str, path: str = "mm/compaction.c", static: bool = False) -> dict:
    """A function a patch modifies, as the diff reader gives it to coverage_store."""
    return {"name": name, "path": path, "change": "modified", "static": static, "inline": False}


@pytest.fixture
def server(app):
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
