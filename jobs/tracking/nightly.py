"""The nightly run of tracked branches: build the head, run the tracked jobs, compare with the
branch's last good baseline, open a regression for every metric judged worse, bisect each new
one, and mail the reports and a summary.

Tracked branches come from two places: ``jobs/tracking/tracked/*.yaml`` (and ``$STACKBENCH_TRACKED``
folders), synced into the ``tracked_branch`` table at the start of every nightly run, and rows
added from the web admin. A YAML file::

    tree: linux-6.1            # a kernels/trees definition
    branch: master             # a branch (or any ref) of the tree's repository
    jobs:                      # job specs, as `stackbench submit --jobs` takes them
      - vm-scalability[test=anon-w-seq,runtime=30s]
    runs: 5                    # boots per kernel to start with (more when undecided)
    max_runs: 20               # the cap per kernel, in boots (the verdict's unit)
    enabled: true

Per branch and night:

1. resolve the head; the head and the baseline are one comparison
   (:mod:`stackbench.jobs.tracking.comparison`), driven like a series' through the journey
   and its executor: both built (a stored build or a stored build failure is reused), then
   booted in the same shuffled rounds over every idle worker of the machine kind, and more
   rounds of both while a headline metric is undecided, up to the cap (the series' adaptive
   looks);
2. no baseline yet: measure the head alone and make it the baseline (``state: baseline``);
3. judge every metric with a direction as the comparison's series report does (each pair
   through ``blocks.pair``);
4. every metric judged changed for the worse opens a regression (one row per job, metric,
   good and bad kernel: a second run of the same night finds it and opens nothing);
5. nothing regressed: the head becomes the new baseline and the regressions open against
   the old one are closed as fixed; otherwise the baseline stays, so the next night still
   compares with the last good kernel, and a metric that is still worse at a later head is
   the regression already open (not a new one, not bisected or mailed again);
6. the head is a night of the branch's history (jobs/tracking/history.py; its point: the
   head's boots of tonight's first look, not what a bisect or the A/A boots later): change
   points over every night, per job, metric and machine kind, date the regressions the first
   look opened
   (``meta["change_night"]``), open one at a worse shift the first look missed (between the
   last night before it and the first after), and close a dated one whose level came back;
   when every metric still worse is a dated shift, the head becomes the baseline of the new
   level, so the nights after it compare with that level and alert no more;
7. each new regression is bisected between its good and bad kernels; regressions that name
   the same culprit for the same job share one report mail; then the summary mail is queued.

``now=False`` is what a scheduler may call repeatedly: a branch whose head was already judged
within the last 20 hours is left alone. ``now=True`` runs every branch again (stored builds
and runs are still reused, so only what is missing is measured).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import NotFoundError, StackbenchError
from stackbench.jobs.executors import jobspecs
from stackbench.jobs.executors.jobspecs import plan_for, resolve_jobs
from stackbench.jobs.executors.settings import Settings
from stackbench.jobs.tracking import bisect_runner as br
from stackbench.jobs.tracking import comparison, history
from stackbench.jobs.tracking.comparison import Lab
from stackbench.jobs.tracking.tracked_branches import (
    Tracked,
    load_tracked,
    one_line,
    sync_tracked,
)
from stackbench.resultsdb import (
    db,
    jobs_q,
    kernels_q,
    kernels_store,
    regressions_q,
    regressions_store,
    trees_q,
    trees_store,
)
from stackbench.resultsdb.buildruns import coarse_clock, done_boots
from stackbench.resultsdb.verdict import (
    COARSE_CLOCK,
    DEFAULT,
    Policy,
    Verdict,
)
from stackbench.resultsdb.verdict import (
    coarse_clock as coarse_verdict,
)

log = logging.getLogger(__name__)

RECENT = timedelta(hours=20)
# when one culprit regresses several metrics of a job, the mail leads with a suite's headline
# metric, else with the first kind here
HEADLINES = ("vm-scalability.throughput", "thpscale.fault-both", "stress-highalloc.pass")
KIND_ORDER = ("throughput", "latency", "percent", "duration", "count", "variability", "")

Progress = Callable[[str], None]

# ---- one branch -----------------------------------------------------------------------------


@dataclass
class JobOutcome:
    job: str  # the sub-job's spec
    job_id: int
    runs_base: int = 0  # boots (the verdict's unit; a run without a boot id is one)
    runs_head: int = 0
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    worse: list[str] = field(default_factory=list)
    # the metrics a change point may open a regression of: name -> (id, higher is better)
    metrics: dict[str, tuple[int, bool | None]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for v in self.verdicts.values():
            key = v.label if v.outcome == "changed" else v.outcome
            counts[key] = counts.get(key, 0) + 1
        return {
            "job": self.job,
            "runs_base": self.runs_base,
            "runs_head": self.runs_head,
            "verdicts": counts,
            "worse": self.worse,
        }


def _policy_for(row: trees_q.TrackedBranch, policy: Policy | None) -> Policy:
    if policy is not None:
        return policy
    p = DEFAULT
    if row.max_runs:
        p = replace(p, max_runs=row.max_runs)
    # the looks are re-planned from the start to the cap either way: a cap beyond the last
    # default look is a look of its own, and the error budget must be split over it too
    return p.starting_at(row.runs or p.start_runs)


def _subjobs(jobs: list[str]) -> list[str]:
    """The tracked job specs split into one spec per sub-job (a list parameter expands)."""
    out = []
    for spec in jobs:
        for sj in plan_for(resolve_jobs([spec], 1), Settings()):
            out.append(br.spec_for(sj.suite, sj.params))
    return out


def judge_job(
    eng: Engine, series_id: int, base_id: int, head_id: int, job: str, policy: Policy
) -> JobOutcome:
    """Every metric with a direction of one job, the head against the base, as the series
    report of their comparison (``series_id``) judges it."""
    (jid,) = br.job_ids(eng, job)
    out = JobOutcome(job, jid)
    out.runs_base, out.runs_head = done_boots(eng, base_id, jid), done_boots(eng, head_id, jid)
    metrics = [
        m for m in br.metrics_of(eng, [base_id, head_id], jid) if m.higher_is_better is not None
    ]
    kind = {m.name: m.kind for m in metrics}
    judged = comparison.pair_verdicts(eng, series_id, base_id, head_id, jid, policy)
    # a latency timed on a coarse clock on either side is never judged (nor a regression)
    coarse = any(coarse_clock(eng, b, jid) for b in (base_id, head_id))
    for m in metrics:
        if coarse and m.kind == "latency":
            # the pair's own coarse verdict (its figures included) where the comparison made
            # one; else one of no figures, counting the boots either side has
            v = judged.get(m.name)
            if v is None or v.test != COARSE_CLOCK:
                v = replace(coarse_verdict(m.name, [], []), n_base=out.runs_base,
                            n_new=out.runs_head)  # fmt: skip
            out.verdicts[m.name] = v
        elif m.name in judged:
            out.verdicts[m.name] = judged[m.name]
    out.metrics = {m.name: (m.id, m.higher_is_better) for m in metrics if m.kind not in FOLLOWERS}
    out.worse = sorted(
        n
        for n, v in out.verdicts.items()
        if v.outcome == "changed" and v.direction == "worse" and kind[n] not in FOLLOWERS
    )
    return out


# Metric kinds judged and shown but never a regression of their own: a job's wall-clock
# duration follows its throughput, and under QEMU also the host's load during one boot, which
# no repeat within that boot averages out (a nightly bisected duration.elapsed to a neutral
# commit whose boot hit a slow host). Its real changes come with the job's own metrics.
FOLLOWERS = ("duration",)


def _open_regression(
    s: Session,
    *,
    tree_id: int,
    tree: str,
    branch: str,
    job_id: int,
    metric: jobs_q.Metric,
    good_id: int,
    bad_id: int,
    v: Verdict,
) -> tuple[regressions_q.Regression, bool]:
    return regressions_store.open_regression(
        s,
        tree_id=tree_id,
        branch=branch,
        job_id=job_id,
        metric_id=metric.id,
        good_id=good_id,
        bad_id=bad_id,
        change_pct=v.change_pct,
        ci_low=v.ci_low_pct,
        ci_high=v.ci_high_pct,
        confidence=1.0 - v.q_value if v.q_value is not None else None,
        verdict="worse",
        state="open",
        meta={
            "tree": tree,
            "p_value": v.p_value,
            "q_value": v.q_value,
            "test": v.test,
            "n_base": v.n_base,  # boots, the verdict's unit
            "n_new": v.n_new,
            "runs_base": v.runs_base,
            "runs_new": v.runs_new,
            "source": "nightly",
        },
    )


@dataclass
class BranchReport:
    tree: str
    branch: str
    head: str = ""
    baseline: str = ""
    state: str = ""  # baseline | unchanged | regressed | build-failed | skipped | error
    message: str = ""
    jobs: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[int] = field(default_factory=list)  # new ones
    known: list[int] = field(default_factory=list)  # already open from an earlier night
    confirmed: list[int] = field(default_factory=list)  # dated by a change point tonight
    bisects: list[dict[str, Any]] = field(default_factory=list)
    mails: list[int] = field(default_factory=list)
    kernels_built: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_branch(
    eng: Engine,
    lab: Lab,
    tracked_id: int,
    *,
    now: bool = True,
    policy: Policy | None = None,
    progress: Progress | None = None,
) -> BranchReport:
    started = time.monotonic()
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        if row is None:
            raise NotFoundError(f"no tracked branch {tracked_id}")
        tree = trees_q.get(s, row.tree_id)
        tree_name, tree_id = tree.name, tree.id
        jobs = list(row.jobs or [])
        baseline_id = row.baseline_build_id
        baseline = kernels_q.get(s, baseline_id).commit if baseline_id else ""
        meta = dict(row.meta or {})
        pol = _policy_for(row, policy)
        bisect = row.bisect
    rep = BranchReport(tree=tree_name, branch=row.branch, baseline=baseline)

    def say(msg: str) -> None:
        if progress:
            progress(f"{tree_name}:{row.branch}: {msg}")

    def done(state: str, message: str = "") -> BranchReport:
        rep.state, rep.message = state, message
        rep.kernels_built += sum(int(b.get("kernels_built") or 0) for b in rep.bisects)
        rep.seconds = round(time.monotonic() - started, 1)
        _remember(eng, tracked_id, rep)
        say(f"{state}{': ' + message if message else ''}")
        return rep

    rep.head = lab.resolve(tree_name, row.branch)
    last = meta.get("last_run") or {}
    if not now and last.get("head") == rep.head and _recent(last.get("at")):
        rep.state, rep.message = "skipped", f"head {rep.head[:12]} already judged"
        return rep
    if not jobs:
        return done("error", "no jobs tracked")
    specs = _subjobs(jobs)
    say(f"head {rep.head[:12]}, baseline {baseline[:12] or 'none'}")
    against = baseline_id is not None and baseline != rep.head
    if baseline_id is not None and not against:
        # the head is the baseline, measured the night it became one
        history.close_night(
            eng, tracked_id, history.record_night(eng, tracked_id, rep.head, baseline_id)
        )
        return done("unchanged", "the head is the baseline")
    with db.session(eng) as s:
        before = kernels_store.last_run_id(s)
    # tonight's head and its baseline booted in the same rounds, as a series' kernels are:
    # the first look is blocked by round, never against the baseline's boots of another night
    m = comparison.measure(
        eng, lab, tree=tree_name, kernels=[baseline, rep.head] if against else [rep.head],
        jobs=specs, boots=pol.start_runs, cap=pol.max_runs if against else None, policy=pol,
        source="nightly",
        title=f"nightly {tree_name}:{row.branch} {rep.head[:12]}"
        + (f" against {baseline[:12]}" if against else ""),
    )  # fmt: skip
    rep.kernels_built = m.built
    head_id = m.builds.get(rep.head)
    if head_id is None:
        return done("build-failed", f"head {rep.head[:12]} does not build")
    night = history.record_night(eng, tracked_id, rep.head, head_id, after_run=before)
    if baseline_id is None:
        for job in specs:
            (jid,) = br.job_ids(eng, job)
            rep.jobs.append({"job": job, "runs_head": done_boots(eng, head_id, jid)})
        history.close_night(eng, tracked_id, night)
        _set_baseline(eng, tracked_id, head_id)
        rep.baseline = rep.head
        return done("baseline", f"first night: {rep.head[:12]} is the baseline")
    new: list[int] = []
    for job in specs:
        out = judge_job(eng, m.series_id, baseline_id, head_id, job, pol)
        rep.jobs.append(out.as_dict())
        with db.session(eng) as s:
            for name in out.worse:
                metric = regressions_store.metric_named(s, name)
                shifted = history.open_shift(s, tree_id, row.branch, out.job_id, metric.id)
                if shifted is not None:
                    # a change point already opened this shift: the head is at its level
                    rep.known.append(shifted)
                    continue
                reg, is_new = _open_regression(
                    s, tree_id=tree_id, tree=tree_name, branch=row.branch, job_id=out.job_id,
                    metric=metric, good_id=baseline_id, bad_id=head_id, v=out.verdicts[name],
                )  # fmt: skip
                (new if is_new else rep.known).append(reg.id)
        history.date_first_look(eng, new, night)
        check = history.check_job(
            eng, tree_id=tree_id, tree=tree_name, branch=row.branch,
            hist=history.nights(eng, tracked_id), job_id=out.job_id, metrics=out.metrics,
        )  # fmt: skip
        new.extend(r for r in check.opened if r not in new)
        rep.confirmed.extend(check.confirmed)
    rep.regressions = new
    # what the bisects and the A/A boot from here on is not tonight's point of the history
    history.close_night(eng, tracked_id, night)
    if not new and rep.known and _all_dated(eng, rep.known):
        # every metric still worse is a level shift a change point has dated: the branch
        # lives at its new level now, and the next nights compare with it
        _set_baseline(eng, tracked_id, head_id)
        return done(
            "regressed",
            f"{len(rep.known)} known regression(s), dated by their change points: "
            f"{rep.head[:12]} is the baseline of the new level",
        )
    if not new and not rep.known:
        _set_baseline(eng, tracked_id, head_id)
        closed = _close_fixed(eng, tree_id, row.branch, baseline_id, head_id)
        msg = f"nothing regressed: {rep.head[:12]} is the new baseline"
        if closed:
            msg += f"; {len(closed)} regression(s) fixed"
        return done("unchanged", msg)
    if bisect:
        for rid in _bisect_order(eng, new):
            say(f"bisecting regression {rid}")
            try:
                run = br.bisect_regression(eng, lab, rid, policy=pol, progress=say)
            except StackbenchError as exc:
                rep.bisects.append({"regression": rid, "state": "failed", "message": str(exc)})
                continue
            res = run.result
            rep.bisects.append(
                {
                    "regression": rid,
                    "bisect": run.bisect_id,
                    "state": res.state,
                    "culprit": res.culprit,
                    "confidence": res.confidence,
                    "candidates": res.candidates,
                    "kernels_built": res.kernels_built,
                    "steps": len(res.steps),
                }
            )
    rep.mails = queue_regression_mails(eng, new)
    return done("regressed", f"{len(new)} new regression(s), {len(rep.known)} known")


def _all_dated(eng: Engine, ids: list[int]) -> bool:
    with db.session(eng) as s:
        return all((regressions_q.get(s, r).meta or {}).get("changepoint") for r in ids)


def _close_fixed(eng: Engine, tree_id: int, branch: str, good_id: int, head_id: int) -> list[int]:
    """The regressions measured against the old baseline are gone at this head: close them."""
    with db.session(eng) as s:
        return regressions_store.close_fixed(s, tree_id, branch, good_id, head_id)


def _bisect_order(eng: Engine, ids: list[int]) -> list[int]:
    """The most telling metric first, so later bisects of the same job reuse its kernels
    and runs."""
    with db.session(eng) as s:
        rows = []
        for rid in ids:
            reg = regressions_q.get(s, rid)
            metric = jobs_q.metric(s, reg.metric_id)
            rows.append((reg.job_id, _rank(metric), -abs(reg.change_pct or 0.0), rid))
    return [r[-1] for r in sorted(rows)]


def _rank(metric: jobs_q.Metric) -> tuple[int, int]:
    headline = 0 if metric.name.startswith(HEADLINES) else 1
    kind = KIND_ORDER.index(metric.kind) if metric.kind in KIND_ORDER else len(KIND_ORDER)
    return headline, kind


def _recent(at: str | None) -> bool:
    if not at:
        return False
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return False
    return datetime.now(UTC) - when < RECENT


def _set_baseline(eng: Engine, tracked_id: int, build_id: int) -> None:
    with db.session(eng) as s:
        trees_store.update_branch(trees_q.branch(s, tracked_id), baseline_build_id=build_id)


def _remember(eng: Engine, tracked_id: int, rep: BranchReport) -> None:
    with db.session(eng) as s:
        row = trees_q.branch(s, tracked_id)
        meta = dict(row.meta or {})
        meta["last_run"] = {
            "at": datetime.now(UTC).isoformat(),
            "head": rep.head,
            "state": rep.state,
            "message": rep.message,
            "regressions": rep.regressions + rep.known,
        }
        trees_store.update_branch(row, meta=meta)


# ---- mails ----------------------------------------------------------------------------------


def queue_regression_mails(eng: Engine, regression_ids: list[int]) -> list[int]:
    """One report per (job, culprit): the lead metric's mail lists the others. Returns the
    outbox ids (none when no recipient is configured: the web still shows the regressions)."""
    from stackbench.mail import reports

    groups: dict[tuple[int, str], list[tuple[int, float, int]]] = {}
    with db.session(eng) as s:
        for rid in regression_ids:
            reg = regressions_q.get(s, rid)
            metric = jobs_q.metric(s, reg.metric_id)
            key = (reg.job_id, reg.culprit or f"bad:{reg.bad_build_id}")
            groups.setdefault(key, []).append((_rank(metric), -abs(reg.change_pct or 0.0), rid))
    out = []
    for members in groups.values():
        lead = sorted(members)[0][2]
        others = [m[2] for m in sorted(members)[1:]]
        with db.session(eng) as s:
            for rid in others:
                regressions_store.merge_meta(regressions_q.get(s, rid), reported_with=lead)
            regressions_store.merge_meta(regressions_q.get(s, lead), also=others)
        mail = reports.regression_report(eng, lead, job_spec=jobspecs.format_job_spec)
        if not mail.to:
            log.warning("regression %s: no mail recipient (set STACKBENCH_MAIL_LIST)", lead)
            continue
        out.append(reports.queue(eng, mail))
    return out


# ---- the night ------------------------------------------------------------------------------


def run_nightly(
    eng: Engine,
    *,
    now: bool = True,
    branches: list[str] | None = None,
    progress: Progress | None = None,
    lab: Lab | None = None,
    policy: Policy | None = None,
    tracked: list[Tracked] | None = None,
    aa_boots: int = 0,
) -> dict[str, Any]:
    """Run every enabled tracked branch (or only ``branches``, given as ``TREE:BRANCH``) and
    return the summary that the nightly mail is made of.

    ``tracked``: definitions to sync first (default: the YAML folders); ``lab``: where commits
    come from and what measures them (default: real kernels under QEMU on this machine;
    ``comparison.BuildbotLab``: a master's workers); ``policy``: the verdict rule
    (default: each branch's runs and max_runs over stackbench's default rule); ``aa_boots``:
    after the branches, boot each one's baseline 2 * aa_boots more times for the machines'
    A/A (jobs/tracking/nightly_aa.py; 0: none)."""
    started = time.monotonic()
    sync_tracked(eng, load_tracked() if tracked is None else tracked)
    if lab is None:
        lab = comparison.ThisMachine()
    with db.session(eng) as s:
        rows = trees_store.branch_list(s)
    wanted = set(branches or [])
    known = {f"{t}:{b}" for _id, t, b, _en in rows}
    missing = sorted(wanted - known)
    if missing:
        raise NotFoundError(
            f"not tracked: {', '.join(missing)} (tracked: {', '.join(sorted(known)) or 'none'})"
        )
    summary: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "branches": [],
    }
    for tid, tree, branch, enabled in rows:
        label = f"{tree}:{branch}"
        if wanted and label not in wanted:
            continue
        if not enabled and label not in wanted:
            continue
        try:
            rep = run_branch(eng, lab, tid, now=now, policy=policy, progress=progress)
        except StackbenchError as exc:
            rep = BranchReport(tree=tree, branch=branch, state="error", message=one_line(exc))
            _remember(eng, tid, rep)
            if progress:
                progress(f"{label}: error: {rep.message}")
        summary["branches"].append(rep.as_dict())
    if aa_boots:
        from stackbench.jobs.tracking import nightly_aa

        ran = [tid for tid, t, b, en in rows if f"{t}:{b}" in wanted or (en and not wanted)]
        summary["aa"] = nightly_aa.for_branches(eng, lab, ran, aa_boots, _subjobs, progress)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["kernels_built"] = sum(b["kernels_built"] for b in summary["branches"])
    summary["mail"] = queue_summary(eng, summary)
    return summary


def queue_summary(eng: Engine, summary: dict[str, Any]) -> int | None:
    from stackbench.mail import reports

    ran = [b for b in summary["branches"] if b["state"] != "skipped"]
    if not ran:
        return None
    mail = reports.nightly_summary(eng, summary)
    if not mail.to:
        log.warning("nightly summary: no mail recipient (set STACKBENCH_MAIL_LIST)")
        return None
    return reports.queue(eng, mail)
