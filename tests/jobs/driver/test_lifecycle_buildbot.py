"""Every submission runs: with the services up (the dispatcher, a Buildbot master, a worker
posting to the web API), a series submitted through a front door reaches ``done`` (runs
stored, report mail queued) or ``failed`` with the reason, and nothing else is run by hand.

Real PostgreSQL, real Buildbot master and worker, real web API, real ``git am`` and
``git push``; the kernel builds and guest runs are the worker's ``--dry-kernel`` ones (see
tests/jobs/driver/test_buildbot_fanout.py), and a kernel that does not build is a worker command that
fails the way make does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

pytest.importorskip("buildbot")
pytest.importorskip("buildbot_worker")

from helpers.lifecycle import GIT_ENV, finished, git, report_mail, wait_for  # noqa: E402
from test_buildbot_fanout import start_web, start_worker  # noqa: E402

from stackbench.jobs.driver import dispatcher_service  # noqa: E402
from stackbench.jobs.executors import services  # noqa: E402
from stackbench.jobs.executors.buildbot import client  # noqa: E402
from stackbench.jobs.executors.buildbot.client import buildset_properties  # noqa: E402
from stackbench.resultsdb import series_runs_store  # noqa: E402
from stackbench.resultsdb.models import KernelBuild, MailOutbox, Run, Series  # noqa: E402

pytest_plugins = ["helpers.lifecycle"]
JOB = "vm-scalability"
RUNS = 2
# what a worker shows when make fails; the series must carry this line and the log address
MAKE_ERROR = "mm/compaction.c:42:9: error: 'cc' undeclared (first use in this function)"
FAILING_WORKER = """\
import os, sys
argv = sys.argv[1:]
if argv[:2] == ["worker", "build"] and argv[argv.index("--name") + 1].startswith("2/2-"):
    print("  CC      mm/compaction.o")
    print({error!r})
    print("make: *** [scripts/Makefile.build:250: mm/compaction.o] Error 1")
    sys.exit(2)
os.execv({argv0!r}, {argv!r} + argv)
"""


def add_account(name: str, email: str, worker: bool = False) -> str:
    from stackbench.mail import accounts
    from stackbench.resultsdb import db

    with db.session() as s:  # as `stackbench user add NAME --email`: a verified address
        user = accounts.create_user(s, name, password=f"pw-{name}-1", email=email, worker=worker)
        return accounts.create_token(s, user, f"token of {name}")


def failing_worker_command(tmp_path: Path) -> list[str]:
    argv = services.stackbench_argv()
    script = tmp_path / "stackbench-failing-build"
    script.write_text(
        f"#!{sys.executable}\n" + FAILING_WORKER.format(error=MAKE_ERROR, argv0=argv[0], argv=argv)
    )
    script.chmod(0o755)
    return [str(script)]


@pytest.fixture
def stack(eng, tmp_path, monkeypatch, request):
    """What `stackbench up` runs, on loopback: the web API, a Buildbot master with one
    dry-kernel worker, and the dispatcher service. ``request.param``: True for a worker
    whose build of patch 2/2 fails."""
    failing = getattr(request, "param", False)
    # a test that must catch the series between two rounds asks for slower dry boots
    slow = request.node.get_closest_marker("dry_seconds")
    server, web_url = start_web(tmp_path)
    base = tmp_path / "bb"
    extra = {
        "dry_kernel": True,
        "dry_seconds": slow.args[0] if slow else 0.5,
        "jobs": [JOB],
        "runs": RUNS,
        "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}],
    }
    if failing:
        extra["stackbench"] = failing_worker_command(tmp_path)
    worker = {"name": "w1", "kind": "qemu", "cpus": 2, "memory_mb": 1024}
    cfg = services.create_master(base / "master", [worker], extra=extra)
    master = client.embedded_master_at(base / "master")
    monkeypatch.setenv("STACKBENCH_BUILDBOT_URL", master.url)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_USER", master.user)
    monkeypatch.setenv("STACKBENCH_BUILDBOT_PASSWORD", master.password)
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "mm-list@example.org")
    monkeypatch.setenv("STACKBENCH_PUBLIC_URL", web_url)
    wb = None
    try:
        services.start_master(base / "master")
        wb = start_worker(base, cfg, "w1", web_url)
        print(dispatcher_service.start())
        assert dispatcher_service.running_pid(), dispatcher_service.logfile().read_text()
        yield web_url, master
    finally:
        print(dispatcher_service.stop())
        if wb is not None:
            services.stop_worker(wb)
        services.stop_master(base / "master")
        server.shutdown()
        log = dispatcher_service.logfile()
        if log.exists():
            print(log.read_text()[-4000:])


def post_series(web_url: str, token: str, mbox: str) -> int:
    import json

    body = {"mbox": mbox, "tree": "tiny", "jobs": [JOB], "runs": RUNS}
    req = urllib.request.Request(
        f"{web_url}/api/series",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 201
        return int(json.loads(resp.read())["id"])


def submitted_sets(master, *, rounds: bool = False) -> list[dict]:
    """The buildsets handed to the master: the series' submissions, or (``rounds``) the
    dispatcher's batches of boots."""
    out = []
    for b in master.get("buildsets")["buildsets"]:
        if not b["parent_buildid"]:
            batch = bool(buildset_properties(master, b["bsid"]).get("rounds_key"))
            if batch == rounds:
                out.append(b)
    return out


def page(web_url: str, sid: int) -> str:
    with urllib.request.urlopen(f"{web_url}/series/{sid}", timeout=30) as resp:
        return resp.read().decode()


def test_api_submission_reaches_done_with_runs_and_report_mail(eng, tree, stack):
    web_url, master = stack
    _repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    mbox = git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n"

    sid = post_series(web_url, token, mbox)
    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=0.2)
    assert x.state == "done", (x.state, x.error)
    assert x.error == ""
    with Session(eng) as s:
        commits = [x.base_commit, *(p.commit_sha for p in s.get(Series, sid).patches)]
        runs = s.execute(
            select(KernelBuild.commit, Run.iteration, Run.status)
            .join(Run, Run.build_id == KernelBuild.id)
            .where(KernelBuild.commit.in_(commits))
        ).all()
        mails = list(s.scalars(select(MailOutbox)))
    # base + 2 patches, one job, RUNS runs each: all measured, nothing twice
    assert sorted((c, i) for c, i, _st in runs) == sorted(
        (c, i) for c in commits for i in range(RUNS)
    )
    assert {st for *_x, st in runs} == {"done"}
    (mail,) = mails
    assert mail.to_addrs == ["alice@example.org", "mm-list@example.org"]
    assert mail.subject.startswith("Re: [PATCH 0/2]") or "step" in mail.subject
    assert f"/series/{sid}" in mail.body and "State: done" in mail.body
    html = page(web_url, sid)
    assert f"report mail #{mail.id} queued to alice@example.org, mm-list@example.org" in html
    # the dispatcher made the series' comparison once, public: its page leads with verdicts
    with Session(eng) as s:
        key = s.get(Series, sid).meta["comparison"]["key"]
    assert html.index('id="series-verdicts"') < html.index("<h2>Patches</h2>")
    assert f'href="/compare/{key}"' in html
    with urllib.request.urlopen(f"{web_url}/compare/{key}", timeout=60) as r:  # no account
        assert r.status == 200 and "stackbench verdicts" in r.read().decode()
    # one buildset for the series: the dispatcher never submitted it twice
    sets = submitted_sets(master)
    assert len(sets) == 1
    # the benchmarks: one batch of rounds (2 runs: 2 boots of each kernel, interleaved)
    (batch,) = submitted_sets(master, rounds=True)
    boots = json.loads(buildset_properties(master, batch["bsid"])["boots"])
    assert [b["round"] for b in boots] == [1, 1, 1, 2, 2, 2]
    assert {b["commit"] for b in boots[:3]} == set(commits) == {b["commit"] for b in boots[3:]}
    with Session(eng) as s:
        plans = series_runs_store.plans(s, sid)
        (attempt,) = series_runs_store.attempts(s, sid)
        tries = series_runs_store.rounds(s, sid)
    assert [k for rnd in plans[0]["order"] for k in rnd] == [b["commit"] for b in boots]
    # one attempt per hand-over (the API's), followed at Buildbot, ended with the series
    assert (attempt.number, attempt.source, attempt.executor) == (1, "api", "buildbot")
    assert attempt.outcome == "done" and attempt.buildset == sets[0]["bsid"]
    # each round of the batch ran once, whole, on the one worker
    assert [(r.round, r.try_, r.state) for r in tries] == [(1, 1, "done"), (2, 1, "done")]
    assert {r.worker for r in tries} == {"w1"}


def test_the_master_pushes_builds_and_the_page_shows_them_before_the_series_ends(eng, tree, stack):
    """The master's reporter NOTIFYs the dispatcher's channel at every build's start and end,
    and each kernel the master built is on the series' page (``built``, no runs yet) while
    the series is still going, not when its first benchmark's runs arrive."""
    from stackbench.jobs.driver import lifecycle
    from stackbench.resultsdb import db, signals

    web_url, _master = stack
    _repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    heard = signals.listen(db.resolve_url(start=False), lifecycle.CHANNEL)
    try:
        sid = post_series(web_url, token, git(work, "format-patch", "--stdout", f"{base}..HEAD"))
        seen: dict[str, str] = {}  # commit -> the series' state when it was first "built"

        def look():
            with urllib.request.urlopen(f"{web_url}/api/series/{sid}", timeout=30) as r:
                body = json.loads(r.read())
            for c in body.get("commits") or []:
                if c.get("state") == "built":
                    seen.setdefault(c["sha"], body["state"])
            return body["state"] in ("done", "failed") and body

        final = wait_for(f"series {sid} to finish", look, timeout=300, every=0.1)
        payloads = [n.payload for n in heard.notifies(timeout=0.5)]
    finally:
        heard.close()
    assert final["state"] == "done"
    assert any(p.startswith("build ") and p.endswith(" finished") for p in payloads), payloads
    assert any(p.endswith(" started") for p in payloads), payloads
    assert len(seen) == 3, seen  # base and both patches, each seen built before its runs
    assert set(seen.values()) <= {"building", "running"}, seen


@pytest.mark.parametrize("stack", [True], indirect=True)
def test_failed_build_fails_the_series_with_the_reason_on_its_page(eng, tree, stack):
    web_url, master = stack
    _repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    mbox = git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n"

    sid = post_series(web_url, token, mbox)
    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=0.2)
    assert x.state == "failed", (x.state, x.error)
    (bad,) = [p.commit_sha for p in x.patches if p.idx == 2]
    assert x.error.startswith(f"2/2-{bad[:8]}: build failed in step 'build kernel': {MAKE_ERROR}")
    assert f"(log: {master.url}#/builders/" in x.error
    with eng.connect() as conn:
        status = conn.execute(
            text("SELECT status, log FROM kernel_build WHERE commit = :c"), {"c": bad}
        ).one()
        measured = conn.execute(
            text(
                "SELECT count(*) FROM run r JOIN kernel_build k ON k.id = r.build_id "
                "WHERE r.status = 'done'"
            )
        ).scalar_one()
    # the kernel's row says why, with make's last lines
    assert status.status == "build-failed" and "Error 1" in status.log
    # the kernels that did build were still measured
    assert measured == 2 * RUNS
    html = page(web_url, sid)
    assert "build failed" in html and "error: &#39;cc&#39; undeclared" in html


def test_git_push_over_http_reaches_done(eng, tree, stack):
    web_url, _master = stack
    repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    url = web_url.replace("http://", f"http://alice:{token}@") + "/git/intake.git"
    env = {**os.environ, **GIT_ENV, "HOME": str(work), "GIT_TERMINAL_PROMPT": "0"}
    p = subprocess.run(
        ["git", "push", "-o", f"runs={RUNS}", "-o", f"jobs={JOB}", url, f"HEAD:refs/for/tiny/{base}"],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    with Session(eng) as s:
        (sid,) = s.scalars(select(Series.id)).all()
    assert f"{web_url}/series/{sid}" in p.stderr

    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=0.2)
    assert x.state == "done", (x.state, x.error)
    with Session(eng) as s:
        assert x.source == "push" and report_mail(s, sid)["to"][0] == "alice@example.org"
    with eng.connect() as conn:
        measured = conn.execute(
            text(
                "SELECT count(DISTINCT (k.commit, r.iteration)) FROM run r "
                "JOIN kernel_build k ON k.id = r.build_id WHERE r.status = 'done' "
                "AND k.commit = ANY(:c)"
            ),
            {"c": [x.base_commit, *(p.commit_sha for p in x.patches)]},
        ).scalar_one()
    # the pushed commits as pushed (no git am): base + 2 commits, RUNS runs each
    assert [p.commit_sha for p in x.patches] == git(
        work, "rev-list", "--reverse", f"{base}..HEAD"
    ).split()
    assert measured == 3 * RUNS
    # this machine builds from the tree's repository: the pushed commits were copied there
    assert git(repo, "cat-file", "-t", x.patches[-1].commit_sha) == "commit"


@pytest.fixture
def chromium():
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip(f"{chromium} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(chromium), headless=True, args=["--no-sandbox", "--no-first-run"]
        )
        yield b
        b.close()


@pytest.mark.browser
def test_web_form_in_a_browser_reaches_done(eng, tree, stack, chromium):
    """A logged-in user submits by the form in chromium and watches the series page go to
    done and name the report mail, with nothing else run."""
    from playwright.sync_api import expect

    web_url, _master = stack
    _repo, work, base = tree
    add_account("alice", "alice@example.org")
    mbox = git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n"
    page = chromium.new_context().new_page()
    page.set_default_timeout(30_000)
    page.goto(web_url + "/login")
    page.fill("#name", "alice")
    page.fill("#password", "pw-alice-1")
    page.click("#login-button")
    page.wait_for_url(web_url + "/")

    page.goto(web_url + "/submit")
    page.fill("#mbox_text", mbox)
    page.select_option("#tree", "tiny")  # a YAML tree the database has not seen yet
    page.check(f"input[name=jobs][value={JOB}]")
    page.fill("#runs", str(RUNS))
    page.click("#submit-button")
    page.wait_for_url("**/series/*")
    sid = int(page.url.rsplit("/", 1)[1])
    # the page follows the series by itself (it polls and reloads while pending)
    expect(page.locator("#series-state")).to_have_text("done", timeout=300_000)
    expect(page.locator("#report-mail")).to_contain_text(
        "queued to alice@example.org, mm-list@example.org", timeout=60_000
    )
    assert page.locator("td.cell .st-done").count() == 3  # base and both commits
    x = finished(eng, sid)
    assert x is not None and x.source == "web"
    with Session(eng) as s:
        assert series_runs_store.current(s, sid).runs == RUNS


def test_dispatcher_stopped_mid_series_picks_it_up_without_a_second_buildset(eng, tree, stack):
    from stackbench.jobs.driver.buildbot_executor import BuildbotExecutor, kernel_names

    web_url, master = stack
    _repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    mbox = git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n"
    sid = post_series(web_url, token, mbox)

    def handed_over():
        with Session(eng) as s:
            d = series_runs_store.dispatch(s, sid)
            return d if d is not None and d.executor == "buildbot" else None

    d = wait_for("the hand-over to Buildbot", handed_over, timeout=120)
    assert dispatcher_service.stop().startswith("dispatcher: stopped")
    # a dispatcher that died between submitting and recording submits again: it finds the
    # buildset of the same submission key instead of making a second one
    again = BuildbotExecutor(master).submit(sid, d.submission, kernel_names(eng, sid), [JOB], RUNS)
    assert again == d.buildset
    assert "started" in dispatcher_service.start()

    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=300, every=0.2)
    assert x.state == "done", (x.state, x.error)
    sets = submitted_sets(master)
    assert [b["bsid"] for b in sets] == [d.buildset]
    with eng.connect() as conn:
        runs = conn.execute(text("SELECT count(*), count(DISTINCT idempotency_key) FROM run")).one()
    assert tuple(runs) == (3 * RUNS, 3 * RUNS)  # nothing measured twice


# at 0.5 s a round of three boots could end while `down` stopped the dispatcher, the
# worker and the master one after the other, and the series was over before it was caught
@pytest.mark.dry_seconds(3)
def test_down_and_up_mid_series_finishes_it_with_no_run_stored_twice(eng, tree, stack, tmp_path):
    """What `stackbench down` then `up` does to a series in flight: the dispatcher, the
    worker and the master all stop while benchmarks are still to run, then start again. The
    series finishes on the same buildset, each kernel is built successfully once, and no run
    is stored twice."""
    web_url, master = stack
    _repo, work, base = tree
    token = add_account("alice", "alice@example.org")
    mbox = git(work, "format-patch", "--stdout", f"{base}..HEAD") + "\n"
    sid = post_series(web_url, token, mbox)

    def some_runs_stored():
        with eng.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM run")).scalar() >= RUNS

    wait_for("the first benchmark's runs", some_runs_stored, timeout=180)
    with Session(eng) as s:
        d = series_runs_store.dispatch(s, sid)
    # down: the dispatcher first, then the worker and the master (as `stackbench down`)
    assert dispatcher_service.stop().startswith("dispatcher: stopped")
    base_dir = tmp_path / "bb"  # where the stack fixture made the master and worker
    services.stop_worker(base_dir / "w1")
    services.stop_master(base_dir / "master")
    with Session(eng) as s:
        assert s.get(Series, sid).state in ("building", "running")  # caught mid-series
        stored_before = s.scalar(select(func.count()).select_from(Run))
    assert stored_before < 3 * RUNS

    # up again: the same master, worker and dispatcher
    services.start_master(base_dir / "master")
    services.start_worker(base_dir / "w1", env=_worker_env(base_dir / "w1"))
    assert "started" in dispatcher_service.start()
    x = wait_for(f"series {sid} to finish", lambda: finished(eng, sid), timeout=400, every=0.2)
    assert x.state == "done", (x.state, x.error)
    sets = submitted_sets(master)
    assert [b["bsid"] for b in sets] == [d.buildset]  # nothing handed over again
    with eng.connect() as conn:
        runs = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT idempotency_key), "
                "count(*) FILTER (WHERE status = 'done') FROM run"
            )
        ).one()
    # every run once; a benchmark cut short by the stop may add its attempt as a 'lost' run
    total, distinct, done = runs
    assert total == distinct and done == 3 * RUNS, tuple(runs)
    names = {b["builderid"]: b["name"] for b in master.get("builders")["builders"]}
    good: dict[str, int] = {}
    rounds: list[int] = []
    boots = 0
    for b in master.get("builds?property=commit&property=round&property=boots")["builds"]:
        if names[b["builderid"]].startswith("build-") and b["results"] == 0:
            commit = b["properties"]["commit"][0]
            good[commit] = good.get(commit, 0) + 1
        elif names[b["builderid"]] == "bench-qemu" and b["results"] == 0:
            # a benchmark build is one round: every kernel booted once, on one worker
            rounds.append(int(b["properties"]["round"][0]))
            boots += int(b["properties"]["boots"][0])
    assert sorted(good.values()) == [1, 1, 1]  # each kernel built once
    # each planned round measured once, even when its rounds build ran again after the stop
    assert len(rounds) == len(set(rounds)) and boots == 3 * RUNS, (rounds, boots)
    # in the tables: a round cut short by the stop and run again is its next try, and
    # every round has exactly one try that measured it
    with Session(eng) as s:
        tries = series_runs_store.rounds(s, sid)
    done = sorted(r.round for r in tries if r.state == "done")
    assert done == sorted(set(rounds)), [(r.round, r.try_, r.state) for r in tries]
    for rnd in set(rounds):
        mine = [r.try_ for r in tries if r.round == rnd]
        assert mine == list(range(1, len(mine) + 1))


def _worker_env(wb: Path) -> dict[str, str]:
    """The worker's environment as start_worker gave it (its web URL and its token)."""
    from test_buildbot_fanout import worker_token

    return {
        "STACKBENCH_URL": os.environ["STACKBENCH_PUBLIC_URL"],
        "STACKBENCH_WORKER_TOKEN": worker_token(f"{wb.name}-again"),
    }
