"""Every front door stores a series through the one intake (stackbench.jobs.driver.intake.take)
and nothing else: each door (web form, API, CLI submit, demo, git push, list) is driven for
real with the intake watched. When the intake refuses, the door shows the refusal and no
series is stored (a door that stored one by another path fails here); when it takes the
submission, the door's one series is the one the intake stored. A static check finds that
each door module calls the intake and that series rows are created only under it."""

from __future__ import annotations

import ast
import io
import subprocess
from pathlib import Path

import pytest
from helpers.listmail import LIST, ROBOT, demo_mails, list_def
from helpers.pubinbox import Inbox
from helpers.web import add_token, add_tree, add_user, bearer, csrf_of, login
from sqlalchemy import func, select

from stackbench.cli import main
from stackbench.jobs.driver import intake
from stackbench.jobs.lists import list_watch
from stackbench.resultsdb import db, series_runs_store
from stackbench.resultsdb.models import Series

pytest_plugins = ["helpers.web"]

ROOT = Path(__file__).resolve().parents[3]
MBOX = (ROOT / "tests" / "data" / "web" / "series.mbox").read_bytes()
REFUSAL = "refused by the intake under test"
DOORS = {
    "web/submission.py": "web",
    "stackbench/cli/submit.py": "mbox",
    "stackbench/cli/demo.py": "demo",
    "jobs/driver/push_intake.py": "push",
    "jobs/lists/list_watch.py": "list",
}


@pytest.fixture(params=["refused", "taken"])
def watched(request, monkeypatch):
    """The intake, watched: ``refused`` refuses every submission, ``taken`` stores it; the
    sources it was called with."""
    real = intake.take
    seen: list[str] = []

    def take(s, sub, **kw):
        seen.append(sub.source)
        if request.param == "refused":
            raise intake.SubmissionErrors({"intake": REFUSAL})
        return real(s, sub, **kw)

    monkeypatch.setattr(intake, "take", take)
    return request.param, seen


def _series(eng) -> list[tuple[int, str]]:
    with db.session(eng) as s:
        return [(x.id, x.source) for x in s.scalars(select(Series).order_by(Series.id))]


def _outcome(eng, watched, source: str, refused_shown: bool) -> None:
    mode, seen = watched
    assert seen == [source]
    stored = _series(eng)
    if mode == "refused":
        assert refused_shown, "the door did not show the intake's refusal"
        assert stored == []  # nothing stored but by the intake
    else:
        assert [src for _id, src in stored] == [source]


def test_the_web_form(eng, client, watched):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    login(client)
    form = {
        "csrf_token": csrf_of(client, "/submit"),
        "tree": "mm",
        "jobs": "vm-scalability",
        "runs": "3",
        "mbox_text": MBOX.decode(),
    }
    r = client.post("/submit", data=form)
    _outcome(eng, watched, "web", REFUSAL in r.get_data(as_text=True))
    assert r.status_code == (400 if watched[0] == "refused" else 303)


def test_the_api(eng, client, watched):
    add_user(eng, "alice")
    add_tree(eng, "mm")
    body = {"mbox": MBOX.decode(), "tree": "mm", "jobs": ["vm-scalability"], "runs": 3}
    r = client.post("/api/series", json=body, headers=bearer(add_token(eng, "alice")))
    _outcome(eng, watched, "api", REFUSAL in str(r.get_json()))
    assert r.status_code == (400 if watched[0] == "refused" else 201)


def test_the_cli_submit(eng, tmp_path, capsys, watched):
    f = tmp_path / "s.mbox"
    f.write_bytes(MBOX)
    add_tree(eng, "mm")
    argv = ["submit", "--mbox", str(f), "--tree", "mm", "--jobs", "vm-scalability", "--no-wait"]
    rc = main(argv)
    _outcome(eng, watched, "mbox", REFUSAL in capsys.readouterr().err)
    assert rc == (1 if watched[0] == "refused" else 0)


def test_the_demo(eng, capsys, monkeypatch, watched):
    from stackbench.cli import demo

    # what runs the series after the intake is not this test's: it ends at once
    monkeypatch.setattr(demo, "run_here", lambda *a, **k: "done")
    monkeypatch.setattr(demo, "run_through_dispatcher", lambda *a, **k: "done")
    rc = main(["demo", "--no-serve", "--in-process", "--runs", "1"])
    _outcome(eng, watched, "demo", REFUSAL in capsys.readouterr().err)
    assert rc == (1 if watched[0] == "refused" else 0)


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "P", "GIT_AUTHOR_EMAIL": "p@example.org",
           "GIT_COMMITTER_NAME": "P", "GIT_COMMITTER_EMAIL": "p@example.org", "HOME": str(repo)}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def test_the_git_push(eng, tmp_path, capsys, monkeypatch, watched):
    """The post-receive hook's command, in this process (git runs it in a process of its
    own, where the intake cannot be watched): a real push to refs/for/ before it."""
    work, bare = tmp_path / "work", tmp_path / "intake.git"
    _git(tmp_path, "init", "-q", "-b", "main", str(work))
    (work / "mm.c").write_text("int compaction = 1;\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "base")
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    (work / "mm.c").write_text("int compaction = 2;\n")
    _git(work, "commit", "-q", "-a", "-m", "mm: compaction 2")
    _git(work, "push", "-q", str(bare), "HEAD:refs/for/mm/main")
    head = _git(work, "rev-parse", "HEAD")
    add_tree(eng, "mm")
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{'0' * 40} {head} refs/for/mm/main\n"))
    rc = main(["intake-push", "--hook", "post-receive", "--repo", str(bare)])
    _outcome(eng, watched, "push", REFUSAL in capsys.readouterr().err)
    assert rc == (1 if watched[0] == "refused" else 0)


def test_a_watched_list(eng, tmp_path, watched):
    box = Inbox(tmp_path, LIST)
    try:
        for raw in demo_mails():
            box.deliver(raw)
        list_watch.fetch(eng, list_def(str(box.dir)), own_sender=ROBOT)
    finally:
        box.stop()
    with db.session(eng) as s:
        from stackbench.resultsdb.models import ListThread

        why = [t.reason or "" for t in s.scalars(select(ListThread))]
        assert s.scalar(select(func.count()).select_from(ListThread)) == 1
    _outcome(eng, watched, "list", any(REFUSAL in w for w in why))


# ---- the static half: who calls the intake, who creates series rows ----------------------


def _calls(path: Path) -> set[str]:
    """Dotted names of every call in PATH (``intake.take``, ``create_series``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                out.add(f"{f.value.id}.{f.attr}")
            elif isinstance(f, ast.Attribute):
                out.add(f.attr)
            elif isinstance(f, ast.Name):
                out.add(f.id)
    return out


def _sources() -> list[Path]:
    folders = ("stackbench", "jobs", "results-db", "web", "patches", "kernels", "mail")
    return [p for d in folders for p in (ROOT / d).rglob("*.py")
            if "migrations" not in p.parts and "__pycache__" not in p.parts]  # fmt: skip


def who_calls(name: str) -> set[str]:
    """The source files (relative to the project) that call ``name`` (its last part)."""
    last = name.rsplit(".", 1)[-1]
    return {
        str(p.relative_to(ROOT))
        for p in _sources()
        if any(c == name or c.rsplit(".", 1)[-1] == last for c in _calls(p))
    }


def test_every_door_calls_the_intake_and_nothing_else_makes_a_series():
    assert set(DOORS) <= who_calls("intake.take")
    # the intake is the one caller of the store's create, and it the one of the row's
    assert who_calls("create_series") == {"jobs/driver/intake.py"}
    # a nightly's or bisect's comparison is a series of the tree's own commits, made by the
    # comparison driver, not a submission: no door, nothing to parse
    assert who_calls("add_series") == {"patches/store.py", "jobs/tracking/comparison.py"}
    constructs = {p for p in who_calls("Series") if p != "results-db/tables/mmtests.py"}
    assert constructs == {"results-db/series_store.py"}  # mmtests' Series is a table's


def test_the_static_check_finds_a_door_that_bypasses_the_intake(tmp_path, monkeypatch):
    door = tmp_path / "stackbench" / "door.py"
    door.parent.mkdir()
    door.write_text("from stackbench.patches import store\n\n"
                    "def f(s, p):\n    return store.create_series(s, p)\n")  # fmt: skip
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert who_calls("create_series") == {"stackbench/door.py"}
    assert who_calls("intake.take") == set()


# ---- options the path cannot honour are refused, the others reach the run ------------------


@pytest.mark.parametrize("command", ["demo", "submit"])
def test_a_guest_size_for_the_dispatchers_workers_is_refused_in_one_line(
    eng, tmp_path, capsys, monkeypatch, command
):
    from stackbench.cli import _follow

    monkeypatch.setattr(_follow, "buildbot_installed", lambda: True)  # the default path
    f = tmp_path / "s.mbox"
    f.write_bytes(MBOX)
    add_tree(eng, "mm")
    argv = {"demo": ["demo", "--no-serve"], "submit": ["submit", "--mbox", str(f), "--tree", "mm"]}
    assert main([*argv[command], "--cpus", "4", "--accel", "tcg"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("stackbench: error: cpus: only a series run in this process"), err
    assert "accel: only" in err and len(err.splitlines()) == 1
    assert _series(eng) == []


def test_the_demos_guest_and_cap_reach_an_in_process_run(eng, monkeypatch, capsys):
    from stackbench.cli import demo

    ran = {}
    monkeypatch.setattr(demo, "run_here", lambda eng, sid, settings, **k: ran.update(
        sid=sid, settings=settings) or "done")  # fmt: skip
    argv = ["demo", "--no-serve", "--in-process", "--cpus", "4", "--mem-mb", "2048"]
    assert main([*argv, "--accel", "tcg", "--max-boots", "6"]) == 0
    got = ran["settings"]
    assert (got.cpus, got.mem_mb, got.accel) == (4, 2048, "tcg")
    with db.session(eng) as s:
        plan = series_runs_store.current(s, ran["sid"])
        assert plan.max_boots == 6 and plan.cpus == 4  # the attempt's typed plan
        assert "max_runs" not in s.get(Series, ran["sid"]).meta
