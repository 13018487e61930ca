"""More rounds for a series whose headline metrics are still undecided.

When a series' measured rounds end, :func:`more_rounds` judges every later kernel against
the base, job by job, the way the comparison page does (boots as units, Benjamini-Hochberg
across the comparison, on the machine this series was measured on). A job earns more rounds
only when one of its headline metrics (``verdict.is_headline``) is undecided: counters,
durations and side metrics never keep a series measuring, because every job has dozens of
them and one of them is nearly always undecided. The next look the rule asks for (5, 10
boots per side) sets how many more boots; each is a new boot of the base and of the kernels
still in doubt, interleaved in a shuffled order like the first rounds. The cap is the
series' ``max_boots`` (boots per kernel) or :data:`DEFAULT_CAP`.

The answer says why in words (:meth:`MoreRounds.reason`); the pipeline writes it as the
series' state message, which the series page and ``stackbench submit`` show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine

from stackbench.jobs.executors import plan as boot_plan
from stackbench.resultsdb import db, kernels_store, query, series_runs_store, series_store, verdict
from stackbench.resultsdb.boots import boot_key
from stackbench.resultsdb.models import SeriesAttempt

# Boots per kernel a series may reach without asking: the verdict's second look. A rank-tested
# latency cannot decide before 10 boots per side, and under TCG a boot of the three default
# jobs takes minutes, so the third look (20) is left to series that ask with --max-boots.
DEFAULT_CAP = 10


@dataclass(frozen=True)
class Undecided:
    """One undecided headline metric: where, and the evidence so far."""

    subjob: str
    kernel: str  # the later kernel's name
    metric: str
    boots: int  # boots on the side with fewer
    change_pct: float | None
    ci: tuple[float | None, float | None]

    def describe(self, with_job: bool = True) -> str:
        """The row in words; two sub-jobs of one suite share metric names, so a row names
        its sub-job (the short line, which counts the others, may leave it out)."""
        where = f"{self.metric} on {self.kernel}"
        if with_job:
            where = f"{self.subjob}: {where}"
        if self.change_pct is None:
            return where
        lo, hi = (f"{x:+.1f}" if x is not None else "?" for x in self.ci)
        return f"{where} {self.change_pct:+.1f}% [{lo}, {hi}]"


@dataclass
class MoreRounds:
    """The decision: ``boots`` more boots of each of ``kernels`` (commits, base first) with
    the sub-jobs named in ``subjobs``."""

    boots: int
    have: int  # boots per kernel so far (the fewest among the undecided comparisons)
    cap: int
    kernels: list[str]
    subjobs: list[str]
    undecided: list[Undecided] = field(default_factory=list)
    # boots stored for the series at this look: a later look that finds no more ends the
    # loop (``have`` may stand still while boots land: a round cut by a lost worker pairs
    # nothing)
    stored: int = 0

    def reason(self) -> str:
        """One short line for a terminal and the events list: the rounds, and the largest
        undecided change; every metric and job is in :meth:`details` (the series page)."""
        shown = self.undecided[0].describe(with_job=False) if self.undecided else "-"
        more = len(self.undecided) - 1
        if more > 0:
            shown += f" and {more} more (series page)"
        return (
            f"{self.boots} more round{'s' if self.boots != 1 else ''} ({self.have} -> "
            f"{self.have + self.boots} boots per kernel, cap {self.cap}): headline undecided: "
            f"{shown}"
        )

    def details(self) -> dict[str, list[str]]:
        """What the series page lists under the short line: the jobs measured again and every
        undecided headline metric with its change so far."""
        return {"jobs": list(self.subjobs), "undecided": [u.describe() for u in self.undecided]}

    def plan(self, subjobs: list[Any]) -> list[Any]:
        """The series' sub-jobs that are re-measured, each with its runs for the new boots:
        as many runs per boot as its first rounds had."""
        out = []
        for sj in subjobs:
            if sj.name in self.subjobs:
                per_boot = math.ceil(sj.runs / boot_plan.boots_for(sj.runs))
                out.append(replace(sj, runs=per_boot * self.boots))
        return out


def cap_of(plan: SeriesAttempt | None) -> int:
    """Boots per kernel a series may reach: its attempt's ``max_boots``, else DEFAULT_CAP
    (never below its own ``runs``)."""
    cap = int(getattr(plan, "max_boots", None) or DEFAULT_CAP)
    return max(cap, int(getattr(plan, "runs", None) or 0))


def more_rounds(
    eng: Engine,
    series_id: int,
    *,
    cap: int | None = None,
    policy: verdict.Policy | None = None,
    after: MoreRounds | None = None,
) -> MoreRounds | None:
    """Whether series ``series_id`` needs more rounds now, and of what (None: every headline
    metric of every job is decided, or the undecided ones are at the cap). ``after`` is the
    previous answer: rounds that added no boot (every boot crashed) end the loop. ``have``
    counts the rounds the verdict paired; the cap counts the boots a kernel really had."""
    from stackbench.resultsdb.tables.verdict import compare

    policy = policy or verdict.DEFAULT
    with db.session(eng) as s:
        planned = cap_of(series_runs_store.current(s, series_id))
        builds = kernels_store.series_kernels(s, series_id)
    cap = cap if cap is not None else planned
    if len(builds) < 2 or cap < 1:
        return None
    kernels = [query.Kernel(b.id, b.commit, b.name, b.config_name, b.compiler) for b in builds]
    with db.session(eng) as s:
        # verdicts never pool machines: the one of the series' latest boot
        machine = series_store.latest_machine(s, series_id)
        ds = query.load(s.connection(), kernels, machine=machine)
    if not ds.runs:
        return None
    subjob_of = {r.job_id: str((r.meta or {}).get("subjob") or "") for r in ds.runs.values()}
    booted: dict[int, set] = {}
    for r in ds.runs.values():
        booted.setdefault(r.build_id, set()).add(boot_key(r))
    stored = sum(len(b) for b in booted.values())
    undecided: list[Undecided] = []
    wanted, have = 0, cap
    doubtful: set[str] = set()
    for job, kernel, rows in compare(ds, policy):
        for name, _b, _n, v in rows:
            m = next((m for m in ds.metrics.values() if m.name == name), None)
            if m is None or v.outcome != "undecided":
                continue
            if not verdict.is_headline(name, m.kind, m.higher_is_better):
                continue
            boots = min(v.n_base, v.n_new)
            if boots >= cap or len(booted.get(kernel.id, ())) >= cap:
                continue
            target = min(v.runs_wanted or policy.next_look(boots) or cap, cap)
            if target <= boots or not subjob_of.get(job.id):
                continue
            wanted, have = max(wanted, target), min(have, boots)
            doubtful.add(kernel.commit)
            undecided.append(
                Undecided(
                    subjob_of[job.id], kernel.name, name, boots, v.change_pct,
                    (v.ci_low_pct, v.ci_high_pct),
                )
            )  # fmt: skip
    if not undecided or wanted <= have or (after is not None and stored <= after.stored):
        return None
    undecided.sort(key=lambda u: -abs(u.change_pct or 0.0))
    return MoreRounds(
        boots=wanted - have,
        have=have,
        cap=cap,
        kernels=[kernels[0].commit, *(k.commit for k in kernels[1:] if k.commit in doubtful)],
        subjobs=sorted({u.subjob for u in undecided}),
        undecided=undecided,
        stored=stored,
    )


def record(eng: Engine, series_id: int, more: MoreRounds) -> None:
    """Why the series runs more rounds, in ``series.meta["more_rounds"]`` (the short line) and
    ``more_rounds_detail`` (every metric and job), which the series page shows while it
    runs; the driver's state message for the batch says the short line too."""
    with db.session(eng) as s:
        series_store.merge_meta(
            series_store.get(s, series_id),
            more_rounds=more.reason(),
            more_rounds_detail=more.details(),
        )
