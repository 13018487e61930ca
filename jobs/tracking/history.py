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

from stackbench.resultsdb import (
    buildruns,
    db,
    kernels_store,
    regressions_store,
    trees_q,
    trees_store,
)
from stackbench.resultsdb import changepoints as cp
from stackbench.resultsdb.models import Regression


@dataclass(frozen=True)
class Night:
    index: int
    head: str
    build_id: int
    at: str
    # the night's own boots are the head's runs with ids in (after_run, upto_run]: the
    # nightly's first look of that night, not the boots a later night, a bisect or the A/A
    # added to the same kernel (another night's host). None: no bound (a night recorded
    # before the bounds were, or tonight's, still being measured)
    after_run: int | None = None
    upto_run: int | None = None


def nights(eng: Engine, tracked_id: int) -> list[Night]:
    with db.session(eng) as s:
        meta = trees_q.branch(s, tracked_id).meta or {}
    hist = meta.get("nights") or []
    out = []
    for i, n in enumerate(hist):
        upto = n.get("upto_run")
        if upto is None and i + 1 < len(hist):
            # a night whose first look never finished ends where the next one began
            upto = hist[i + 1].get("after_run")
        out.append(Night(i, n["head"], int(n["build"]), n.get("at", ""), n.get("after_run"), upto))
    return out


def record_night(
    eng: Engine, tracked_id: int, head: str, build_id: int, after_run: int | None = None
) -> int:
    """Append tonight's head to the branch's history (a head already last in it is the same
    night run again); the night's index. ``after_run``: the last run stored before tonight's
    first look began (default: the last one now)."""
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        meta = dict(row.meta or {})
        hist = list(meta.get("nights") or [])
        if hist and hist[-1]["head"] == head:
            return len(hist) - 1
        hist.append(
            {
                "head": head,
                "build": build_id,
                "at": datetime.now(UTC).isoformat(),
                "after_run": kernels_store.last_run_id(s) if after_run is None else after_run,
            }
        )
        meta["nights"] = hist
        trees_store.update_branch(row, meta=meta)
        return len(hist) - 1


def close_night(eng: Engine, tracked_id: int, index: int) -> None:
    """The night's first look is measured: later boots of its head are not its own. A night
    closes once (run again, it keeps its boots)."""
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        meta = dict(row.meta or {})
        hist = list(meta.get("nights") or [])
        if index >= len(hist) or hist[index].get("upto_run") is not None:
            return
        hist[index] = {**hist[index], "upto_run": kernels_store.last_run_id(s)}
        meta["nights"] = hist
        trees_store.update_branch(row, meta=meta)


def _own(n: Night, first_run: int) -> bool:
    return (n.after_run is None or first_run > n.after_run) and (
        n.upto_run is None or first_run <= n.upto_run
    )


def values(
    eng: Engine, hist: list[Night], job_id: int, metric_id: int
) -> dict[str, list[list[float]]]:
    """{machine kind: per night, the boot means of the night's own boots of its head}."""
    boots = buildruns.boots_of(eng, sorted({n.build_id for n in hist}), job_id, metric_id)
    out: dict[str, list[list[float]]] = {}
    for b in boots:
        for i, n in enumerate(hist):
            if n.build_id == b.build_id and _own(n, b.first_run):
                out.setdefault(b.kind, [[] for _ in hist])[i].append(b.mean)
    return out


def aa_values(
    eng: Engine, hist: list[Night], job_id: int, metric_id: int
) -> dict[str, list[list[float]]]:
    """{machine kind: per night, the boot means of the nightly A/A booted after that night's
    first look and before the next night's}: the same hosts on the same nights, the
    baseline unchanged within a night (:func:`changepoints.reference` measures the nights'
    covariance on them). A night whose first look never closed has none."""
    closed = [n for n in hist if n.upto_run is not None]
    if not closed:
        return {}
    out: dict[str, list[list[float]]] = {}
    for b in buildruns.aa_boots(eng, job_id, metric_id, min(n.upto_run or 0 for n in closed)):
        for i, n in enumerate(hist):
            nxt = hist[i + 1].after_run if i + 1 < len(hist) else None
            after = n.upto_run is not None and b.first_run > n.upto_run
            if after and (nxt is None or b.first_run <= nxt):
                out.setdefault(b.kind, [[] for _ in hist])[i].append(b.mean)
                break
    return out


def _reference(
    aa: dict[str, list[list[float]]], kind: str, series: list[list[float]], rule: cp.Rule
) -> cp.Reference | None:
    return cp.reference(aa[kind], series, rule) if kind in aa else None


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
        aa = aa_values(eng, hist, job_id, metric_id)
        for kind, series in values(eng, hist, job_id, metric_id).items():
            every = cp.shifts(series, hib, rule, _reference(aa, kind, series, rule))
            found = [s for s in every if s.direction == "worse"]
            if not every:
                continue
            out.shifts[name] = [{**s.as_dict(), "kind": kind} for s in found]
            with db.session(eng) as s:
                dated = _dated(s, tree_id, branch, job_id, metric_id)
                out.fixed.extend(_close_recovered(dated, every, hist))
                alerted = [int(r.meta["change_night"]) for r in dated]
                claims = cp.claimed(every, alerted, rule)
                for r in dated:
                    shift = claims.get(int(r.meta["change_night"]))
                    if shift is None:
                        continue
                    confirms = not r.meta.get("changepoint")
                    # a shift dated again (Otava moved it as nights were added) is the
                    # regression's own: its date follows, and it alerts no more
                    if confirms or (r.state != "closed" and shift.night != r.meta["change_night"]):
                        regressions_store.merge_meta(
                            r,
                            changepoint={**shift.as_dict(), "kind": kind},
                            change_night=shift.night,
                        )
                    if confirms:
                        out.confirmed.append(r.id)
                for shift in cp.unclaimed(every, alerted, rule):
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
            aa = aa_values(eng, hist, job_id, m.id)
            for kind, series in values(eng, hist, job_id, m.id).items():
                ref = _reference(aa, kind, series, rule)
                found = cp.shifts(series, m.higher_is_better, rule, ref)
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
