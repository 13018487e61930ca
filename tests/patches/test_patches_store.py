"""create_series (the intake's store) and the apply outcomes (stored by patches.store, the
series moved by the lifecycle) on a real PostgreSQL database."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stackbench.errors import InputError
from stackbench.jobs.driver import lifecycle
from stackbench.patches import store
from stackbench.patches.apply import ApplyResult
from stackbench.patches.parser import parse_mbox
from stackbench.resultsdb.models import Event, Patch, Series, Tree

DATA = Path(__file__).parents[1] / "data" / "patches"
SHA = [f"{i:040x}" for i in range(1, 5)]


def parsed(name: str = "no-cover.mbox"):
    return parse_mbox((DATA / name).read_bytes(), source=name)


def create(s, p, *, tree, base, **kw):
    """create_series as the intake calls it: the base and key resolved once before."""
    base_ref = store.resolve_base(p, base, None)
    key = store.series_key(p, tree, base_ref)
    return store.create_series(s, p, tree=tree, base_ref=base_ref, key=key, **kw)


def count(eng, model) -> int:
    with Session(eng) as s:
        return s.scalar(select(func.count()).select_from(model))


def test_create_series_stores_series_and_patches(eng):
    with Session(eng) as s, s.begin():
        series = create(
            s, parsed("cover-v2.mbox"), tree="linux-6.1", base="v6.1", meta={"list": "mm"}
        )
        sid = series.id
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.title == "lib: raise the constants"
        assert series.version == 2
        assert series.tree.name == "linux-6.1"
        assert series.base_ref == "v6.1"
        assert series.base_commit == "83049a6b3fa14c8976b46b37be41fdd4524fd4b5"
        assert series.state == "new" and series.source == "mbox"
        assert series.message_id.startswith("<cover.")
        assert series.in_reply_to == "<cover.v1.1709290000.git.sender@example.org>"
        assert series.meta == {"list": "mm"}  # the plan is the attempt's, stored by the intake
        assert series.cover_letter.startswith("Raise a and b.")
        assert [(p.idx, p.total, p.state) for p in series.patches] == [
            (1, 2, "pending"),
            (2, 2, "pending"),
        ]
        assert series.patches[0].author == "Jörg Müller"
        assert series.patches[0].diff.startswith("diff --git a/lib.c")
        assert s.scalar(select(func.count()).select_from(Event)) == 1


def test_resubmitting_the_same_mbox_returns_the_existing_series(eng):
    with Session(eng) as s, s.begin():
        first = create(s, parsed(), tree="linux-6.1", base=None).id
    with Session(eng) as s, s.begin():
        again = create(s, parsed(), tree="linux-6.1", base=None, meta={"list": "x"}).id
    assert again == first
    assert count(eng, Series) == 1 and count(eng, Patch) == 3 and count(eng, Tree) == 1
    # the same series aimed at another base is a different submission
    with Session(eng) as s, s.begin():
        other = create(s, parsed(), tree="linux-6.1", base="v6.2").id
    assert other != first and count(eng, Series) == 2


def test_series_without_message_id_is_keyed_by_content(eng):
    a = parsed("single-base.mbox")
    b = parsed("single-base.mbox")
    a.message_id = b.message_id = None
    with Session(eng) as s, s.begin():
        first = create(s, a, tree=None, base=None).id
        assert create(s, b, tree=None, base=None).id == first
        b.patches[0].diff += "+more\n"
        assert create(s, b, tree=None, base=None).id != first


def test_bad_tree_name_writes_nothing(eng):
    with (
        pytest.raises(InputError, match="not a valid tree name"),
        Session(eng) as s,
        s.begin(),
    ):
        create(s, parsed(), tree="../etc", base=None)
    assert count(eng, Series) == 0 and count(eng, Tree) == 0


def _series(eng, name="no-cover.mbox") -> int:
    with Session(eng) as s, s.begin():
        return create(s, parsed(name), tree="linux-6.1", base="main").id


def test_record_apply_success(eng):
    sid = _series(eng)
    with Session(eng) as s, s.begin():
        lifecycle.record_apply(s, sid, ApplyResult(base_sha=SHA[0], commits=SHA[1:4], ok=True))
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "applied" and series.error == ""
        assert series.base_commit == SHA[0]
        assert [(p.state, p.commit_sha) for p in series.patches] == [
            ("applied", SHA[1]),
            ("applied", SHA[2]),
            ("applied", SHA[3]),
        ]


def test_record_apply_failure_marks_the_patch_and_skips_the_rest(eng):
    sid = _series(eng)
    result = ApplyResult(
        base_sha=SHA[0],
        commits=[SHA[1]],
        ok=False,
        failed_index=1,
        error="patch failed: lib.c:10; lib.c: patch does not apply",
    )
    with Session(eng) as s, s.begin():
        lifecycle.record_apply(s, sid, result)
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "apply-failed"
        assert series.error == (
            "patch 2/3 'lib: raise b' does not apply: "
            "patch failed: lib.c:10; lib.c: patch does not apply"
        )
        assert [(p.state, p.commit_sha) for p in series.patches] == [
            ("applied", SHA[1]),
            ("apply-failed", None),
            ("skipped", None),
        ]
        assert "does not apply" in series.patches[1].error
        states = s.scalars(select(Event.state).order_by(Event.id)).all()
        assert states == ["new", "apply-failed"]


def test_record_apply_says_a_patch_not_built_as_shown_is_refused(eng):
    sid = _series(eng)
    result = ApplyResult(
        base_sha=SHA[0],
        commits=[],
        ok=False,
        failed_index=0,
        error="git am built something other than the diff shown: evil.c differ",
        not_as_shown=True,
    )
    with Session(eng) as s, s.begin():
        lifecycle.record_apply(s, sid, result)
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "apply-failed"
        assert series.error == (
            "patch 1/3 'lib: raise a' is refused: "
            "git am built something other than the diff shown: evil.c differ"
        )


def test_the_store_records_the_patches_and_leaves_the_series_state_to_the_lifecycle(eng):
    sid = _series(eng)
    with Session(eng) as s, s.begin():
        got = store.apply_outcome(s, sid, ApplyResult(base_sha=SHA[0], commits=SHA[1:4], ok=True))
    assert (got.state, got.error) == ("applied", "")
    assert got.message == f"applied 3 patches on {SHA[0][:12]}"
    with Session(eng) as s:
        series = s.get(Series, sid)
        assert series.state == "new" and [p.state for p in series.patches] == ["applied"] * 3
        assert s.scalars(select(Event.state)).all() == ["new"]


def test_record_apply_rejects_a_result_for_another_series(eng):
    sid = _series(eng, "single-base.mbox")
    result = ApplyResult(base_sha=SHA[0], commits=SHA[1:3], ok=True)
    with pytest.raises(InputError, match="2 commits for 1 patches"), Session(eng) as s, s.begin():
        lifecycle.record_apply(s, sid, result)
    with Session(eng) as s:
        assert s.get(Series, sid).state == "new"
