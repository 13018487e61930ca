"""A tracked branch's nightly history and its change points, as the nightly run uses them.

Every night that measures a new head appends it to the branch's history (the tracked
branch's ``meta["nights"]``: the head, its build and when). After the first look (the head
against the last good baseline, jobs/tracking/nightly.py), :func:`check_job` runs the change points of
:mod:`stackbench.resultsdb.changepoints` over the history of each of the job's metrics, per
machine kind, and:

* a worse shift near a regression already opened for the metric confirms it and dates it
  (``meta["changepoint"]``, ``meta["change_night"]``);
* a worse shift that no regression dates opens one between the last night before the
  change and the first after it, to be bisected like any other (the first look missed it:
  a drift, a step hidden by a noisy baseline);
* a shift already dated opens nothing: the nights after it belong to its segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from stackbench.resultsdb import buildruns, db, regressions_store, trees_q, trees_store
from stackbench.resultsdb import changepoints as cp
from stackbench.resultsdb.models import Regression


@dataclass(frozen=True)
class Night:
    index: int
    head: str
    build_id: int
    at: str


def nights(eng: Engine, tracked_id: int) -> list[Night]:
    with db.session(eng) as s:
        meta = trees_q.branch(s, tracked_id).meta or {}
    return [
        Night(i, n["head"], int(n["build"]), n.get("at", ""))
        for i, n in enumerate(meta.get("nights") or [])
    ]


def record_night(eng: Engine, tracked_id: int, head: str, build_id: int) -> int:
    """Append tonight's head to the branch's history (a head already last in it is the same
    night run again); the night's index."""
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        meta = dict(row.meta or {})
        hist = list(meta.get("nights") or [])
        if hist and hist[-1]["head"] == head:
            return len(hist) - 1
        hist.append({"head": head, "build": build_id, "at": datetime.now(UTC).isoformat()})
        meta["nights"] = hist
        trees_store.update_branch(row, meta=meta)
        return len(hist) - 1


def values(
    eng: Engine, hist: list[Night], job_id: int, metric_id: int
) -> dict[str, list[list[float]]]:
    """{machine kind: per night, the boot means of the night's head}."""
    by_kind = buildruns.boot_means_by_kind(eng, [n.build_id for n in hist], job_id, metric_id)
    return {kind: [per.get(n.build_id, []) for n in hist] for kind, per in by_kind.items()}


@dataclass
class Check:
    confirmed: list[int] = field(default_factory=list)  # first-look regressions now dated
    opened: list[int] = field(default_factory=list)  # new regressions at a change point
    fixed: list[int] = field(default_factory=list)  # dated ones whose level came back
    shifts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # metric: worse ones


def _dated(s, tree_id: int, branch: str, job_id: int, metric_id: int) -> list[Regression]:
    """The metric's regressions on the branch that carry a night (closed ones too: a fixed
    regression's shift stays in the history and must not open again)."""
    rows = s.scalars(
        select(Regression).where(
            Regression.tree_id == tree_id,
            Regression.branch == branch,
            Regression.job_id == job_id,
            Regression.metric_id == metric_id,
        )
    )
    return [r for r in rows if (r.meta or {}).get("change_night") is not None]


def _close_recovered(
    dated: list[Regression], every: list[cp.Shift], hist: list[Night]
) -> list[int]:
    """Close the open regressions dated by a change point after which a better shift brought
    the level back (at least half way to where it was): fixed at that shift's night. The
    first look cannot see this once the baseline has moved to the regressed level."""
    out = []
    for reg in dated:
        shift = (reg.meta or {}).get("changepoint")
        if reg.state == "closed" or not shift:
            continue
        back = shift["before"] - 0.5 * (shift["before"] - shift["after"])
        for s in every:
            if s.direction != "better" or s.night <= shift["night"]:
                continue
            if (s.after - back) * (shift["before"] - shift["after"]) >= 0:
                regressions_store.merge_meta(
                    reg, fixed_at=hist[s.night].build_id, closed_as=reg.state, fixed_night=s.night
                )
                reg.state = "closed"
                out.append(reg.id)
                break
    return out


def check_job(
    eng: Engine,
    *,
    tree_id: int,
    tree: str,
    branch: str,
    hist: list[Night],
    job_id: int,
    metrics: dict[str, tuple[int, bool | None]],
    rule: cp.Rule = cp.DEFAULT_RULE,
) -> Check:
    """Change points of each metric (name: (id, higher is better)) over the history."""
    out = Check()
    for name, (metric_id, hib) in metrics.items():
        if hib is None:
            continue
        for kind, series in values(eng, hist, job_id, metric_id).items():
            every = cp.shifts(series, hib, rule)
            found = [s for s in every if s.direction == "worse"]
            if not every:
                continue
            out.shifts[name] = [{**s.as_dict(), "kind": kind} for s in found]
            with db.session(eng) as s:
                dated = _dated(s, tree_id, branch, job_id, metric_id)
                out.fixed.extend(_close_recovered(dated, every, hist))
                for shift in found:
                    near = [
                        r for r in dated if cp.dated_by(shift, every, r.meta["change_night"], rule)
                    ]
                    if near:
                        for r in near:
                            if not r.meta.get("changepoint"):
                                regressions_store.merge_meta(
                                    r,
                                    changepoint={**shift.as_dict(), "kind": kind},
                                    change_night=shift.night,
                                )
                                out.confirmed.append(r.id)
                        continue
                    before, first = hist[shift.night - 1], hist[shift.night]
                    reg, is_new = regressions_store.open_regression(
                        s,
                        tree_id=tree_id,
                        branch=branch,
                        job_id=job_id,
                        metric_id=metric_id,
                        good_id=before.build_id,
                        bad_id=first.build_id,
                        change_pct=shift.change_pct,
                        verdict="worse",
                        state="open",
                        meta={
                            "tree": tree,
                            "source": "changepoint",
                            "change_night": shift.night,
                            "changepoint": {**shift.as_dict(), "kind": kind},
                        },
                    )
                    if is_new:
                        out.opened.append(reg.id)
                        dated.append(reg)
    return out


def open_shift(s, tree_id: int, branch: str, job_id: int, metric_id: int) -> int | None:
    """The metric's regression a change point opened and that is not closed: the first look
    that finds the head worse than an older baseline is seeing that shift again."""
    for r in _dated(s, tree_id, branch, job_id, metric_id):
        if r.state != "closed" and (r.meta or {}).get("source") == "changepoint":
            return r.id
    return None


def date_first_look(eng: Engine, regression_ids: list[int], night: int) -> None:
    """A regression the first look opened tonight begins, until a change point dates it
    otherwise, at tonight's night."""
    with db.session(eng) as s:
        for rid in regression_ids:
            reg = s.get(Regression, rid)
            if (reg.meta or {}).get("change_night") is None:
                regressions_store.merge_meta(reg, change_night=night)


# ---- what the history page and the mails show ------------------------------------------------


@dataclass
class Plot:
    job_id: int
    metric: str
    kind: str  # machine kind
    higher_is_better: bool | None
    nights: list[Night]
    boots: list[list[float]]  # per night
    shifts: list[cp.Shift]
    segments: list[cp.Segment]
    regressions: list[tuple[int, int]]  # (regression id, night) opened on this history


def plots(
    eng: Engine, tracked_id: int, *, headline_only: bool = True, rule: cp.Rule = cp.DEFAULT_RULE
) -> list[Plot]:
    """Per job, headline metric and machine kind of a tracked branch: each night's boots,
    the change points, the segments between them and the regressions dated on it."""
    from stackbench.resultsdb.verdict import is_headline

    hist = nights(eng, tracked_id)
    if not hist:
        return []
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        tree_id, branch = row.tree_id, row.branch
    builds = [n.build_id for n in hist]
    out = []
    for job_id in buildruns.jobs_of(eng, builds):
        for m in buildruns.metrics_of(eng, builds[-1:], job_id):
            if headline_only and not is_headline(m.name, m.kind, m.higher_is_better):
                continue
            with db.session(eng) as s:
                regs = [
                    (r.id, int(r.meta["change_night"]))
                    for r in _dated(s, tree_id, branch, job_id, m.id)
                ]
            for kind, series in values(eng, hist, job_id, m.id).items():
                found = cp.shifts(series, m.higher_is_better, rule)
                out.append(
                    Plot(
                        job_id, m.name, kind, m.higher_is_better, hist, series, found,
                        cp.segments(series, found), regs,
                    )
                )  # fmt: skip
    return out


def tracked_of(eng: Engine, tree_id: int | None, branch: str) -> int | None:
    """The tracked branch a regression was found on, if it is still tracked."""
    with db.session(eng) as s:
        for row in trees_q.branches(s):
            if row.tree_id == tree_id and row.branch == branch:
                return row.id
    return None
