"""One owner of series state: the lifecycle's table of moves refuses an impossible one and
writes nothing, and no module but jobs/driver/lifecycle.py writes ``series.state`` (read
from the sources with ``ast``, like test_component_map.py; the last test shows the check
finding each kind of write it looks for)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.jobs.driver import lifecycle
from stackbench.patches.apply import ApplyResult
from stackbench.resultsdb import db, series_runs_store
from stackbench.resultsdb.models import Event, Patch, Series

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = ("results-db", "patches", "kernels", "mail", "jobs", "web", "stackbench")
OWNER = "jobs/driver/lifecycle.py"
BASE, C1 = "b" * 40, "c" * 40


def _series(eng, state: str = "applied") -> int:
    with db.session(eng) as s:
        row = Series(title="t", base_commit=BASE, state=state)
        row.patches.append(Patch(idx=1, total=1, subject="mm: x", commit_sha=C1, state="applied"))
        s.add(row)
        s.flush()
        series_runs_store.begin(s, row.id, source="web")
        return row.id


def _snapshot(eng, sid: int) -> tuple:
    with Session(eng) as s:
        x = s.get(Series, sid)
        events = s.scalar(select(func.count()).select_from(Event).where(Event.series_id == sid))
        attempts = [(a.number, a.outcome, a.ended) for a in series_runs_store.attempts(s, sid)]
        patches = [(p.state, p.commit_sha) for p in x.patches]
        return x.state, x.error, dict(x.meta), events, attempts, patches


def test_a_series_goes_its_way_through_the_table(eng):
    sid = _series(eng)
    for state in ("building", "running", "running", "done"):
        lifecycle.set_state(eng, sid, state, state)
    assert lifecycle.hand_over(eng, sid, source="web", fresh=True) == "handed-over"
    assert _snapshot(eng, sid)[0] == "applied"  # a rerun starts where a hand-over does


@pytest.mark.parametrize(
    "start, to",
    [("done", "building"), ("done", "running"), ("apply-failed", "applied"), ("new", "done")],
)
def test_an_impossible_move_is_refused_and_leaves_the_row_unchanged(eng, start, to):
    sid = _series(eng)
    path = {"done": ["building", "done"], "apply-failed": [], "new": []}[start]
    for state in path:
        lifecycle.set_state(eng, sid, state, state)
    if start in ("apply-failed", "new"):
        with db.session(eng) as s:  # a row as another door left it
            s.get(Series, sid).state = start
    before = _snapshot(eng, sid)
    with pytest.raises(lifecycle.StateError, match=f"series {sid}: {start} cannot move to {to}"):
        lifecycle.set_state(eng, sid, to, "moved", error="x", progress="1/2", meta={"k": 1})
    assert _snapshot(eng, sid) == before


def test_an_apply_outcome_the_table_refuses_writes_no_patch_either(eng):
    sid = _series(eng)
    for state in ("building", "done"):
        lifecycle.set_state(eng, sid, state, state)
    before = _snapshot(eng, sid)
    failed = ApplyResult(base_sha=BASE, commits=[], ok=False, failed_index=0, error="no")
    refused = pytest.raises(lifecycle.StateError, match="done cannot move to apply-failed")
    with refused, db.session(eng) as s:
        lifecycle.record_apply(s, sid, failed)
    assert _snapshot(eng, sid) == before


def test_an_unknown_state_is_refused(eng):
    sid = _series(eng)
    with pytest.raises(lifecycle.StateError, match="no state 'bulding'"):
        lifecycle.set_state(eng, sid, "bulding", "typo")
    assert _snapshot(eng, sid)[0] == "applied"


def test_every_state_of_the_table_moves_only_to_states_of_the_table():
    states = set(lifecycle.MOVES)
    assert states == set(lifecycle.PENDING) | set(lifecycle.FINAL)
    assert all(to <= states for to in lifecycle.MOVES.values())


# ---- who writes series.state -----------------------------------------------------------------

# an expression that is (or reads) a Series row; series_runs_store's rows are attempts
_SERIES = re.compile(r"\bSeries\b|\bseries_store\.|\bseries_q\.|\badd_series\b|\bseries\b")
# calls that store a Series' columns (not those that filter on a state, nor a patch's)
_STORING = re.compile(r"(^|\.)Series$|(^|\.)add_series$|^series_store\.save$|\bSeries\b.*\.values$")
_SQL = re.compile(r"(?is)\bupdate\s+series\s+set\b.*\bstate\b")


def _bound(func: ast.AST) -> set[str]:
    """Names a function binds to a Series (assigned from, or looping over, an expression
    that reads one)."""
    out = set()
    for node in ast.walk(func):
        pairs = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.For | ast.withitem | ast.NamedExpr):
            value = getattr(node, "value", None) or getattr(node, "iter", None)
            target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
            value = value if value is not None else getattr(node, "context_expr", None)
            pairs = [(target, value)]
        for target, value in pairs:
            if value is not None and _SERIES.search(ast.unparse(value)):
                out |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return out


def _writes(tree: ast.AST) -> list[int]:
    """Lines that write a series' state: ``X.state = ...`` on a Series, ``state=`` given to
    Series(), add_series, series_store.save or ``update(Series).values``, setattr of it, or
    an UPDATE series SET state in SQL text."""
    lines = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for scope in [tree, *scopes]:
        bound = _bound(scope)
        for node in ast.walk(scope):
            targets = []
            if isinstance(node, ast.Assign):
                targets = [t for tg in node.targets for t in ast.walk(tg)]
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "state":
                    obj = t.value
                    if (isinstance(obj, ast.Name) and obj.id in bound) or _SERIES.search(
                        ast.unparse(obj)
                    ):
                        lines.append(node.lineno)
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                kws = {k.arg for k in node.keywords}
                if "state" in kws and _STORING.search(called):
                    lines.append(node.lineno)
                args = node.args
                if (
                    called == "setattr"
                    and len(args) > 1
                    and ast.unparse(args[1]) == "'state'"
                    and (
                        _SERIES.search(ast.unparse(args[0]))
                        or (isinstance(args[0], ast.Name) and args[0].id in bound)
                    )
                ):
                    lines.append(node.lineno)
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and _SQL.search(node.value):
                lines.append(node.lineno)
    return sorted(set(lines))


def state_writers(root: Path) -> dict[str, list[int]]:
    """{file: lines} of every write of a series' state under ROOT's component folders."""
    out = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            lines = _writes(ast.parse(path.read_text(), str(path)))
            if lines:
                out[str(path.relative_to(root))] = lines
    return out


def test_only_the_lifecycle_writes_series_state():
    found = state_writers(ROOT)
    assert set(found) == {OWNER}, found
    # its one writer: _move's assignment
    (line,) = found[OWNER]
    assert "row.state = state" in (ROOT / OWNER).read_text().splitlines()[line - 1]


def test_the_check_finds_each_kind_of_write(tmp_path):
    writes = {
        "attr.py": "def f(s, sid):\n    row = series_store.get(s, sid)\n    row.state = 'done'\n",
        "tuple.py": "def f(series):\n    series.base_commit, series.state = 'x', 'done'\n",
        "get.py": "def f(s, sid):\n    s.get(Series, sid).state = 'done'\n",
        "loop.py": "def f(s):\n    for x in series_q.listing(s):\n        x.state = 'done'\n",
        "save.py": "def f(row):\n    series_store.save(row, state='done')\n",
        "new.py": "def f(s):\n    s.add(Series(title='t', state='done'))\n",
        "core.py": "def f(s):\n    s.execute(update(Series).values(state='done'))\n",
        "sql.py": "Q = 'UPDATE series SET error = :e, state = :s WHERE id = :i'\n",
        "set.py": "def f(series):\n    setattr(series, 'state', 'done')\n",
    }
    (tmp_path / "web").mkdir()
    for name, src in writes.items():
        (tmp_path / "web" / name).write_text(src)
    # other tables' states are theirs: an attempt, a regression, a patch
    (tmp_path / "web" / "other.py").write_text(
        "def f(s, sid, reg, p):\n    row = series_runs_store.current(s, sid)\n"
        "    row.state = 'x'\n    reg.state = 'closed'\n    p.state = 'applied'\n"
        "    series_q.listing(s, state='done')\n"
        "    series_store.save_patch(p, commit_sha=None, state='skipped', error='')\n"
    )
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(exist_ok=True)
    found = state_writers(tmp_path)
    assert sorted(found) == sorted(f"web/{name}" for name in writes)
