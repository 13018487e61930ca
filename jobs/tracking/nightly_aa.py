"""The nightly A/A: each tracked branch's baseline kernel booted again in fresh boots through
the ordinary driver (the plan of rounds every comparison uses), the boots split into two
interleaved sets and judged against each other, per headline metric and machine kind
(:mod:`stackbench.resultsdb.aa` has the figures). The machines that booted them keep the last
nights' figures in their ``meta["aa"]``, and a bad night quarantines them
(:mod:`stackbench.resultsdb.quarantine`); the machines page shows both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, select

from stackbench.jobs.tracking import bisect_runner as br
from stackbench.jobs.tracking import comparison
from stackbench.jobs.tracking.comparison import Lab
from stackbench.resultsdb import aa, buildruns, db, quarantine
from stackbench.resultsdb.models import KernelBuild, Machine, Run
from stackbench.resultsdb.verdict import DEFAULT, Policy, is_headline

KEEP = 30  # nights of A/A figures a machine keeps


def run_aa(
    eng: Engine,
    lab: Lab,
    tree: str,
    build_id: int,
    job: str,
    *,
    boots: int = 10,
    policy: Policy = DEFAULT,
) -> dict[str, list[aa.Figures]]:
    """Boot the kernel ``2 * boots`` more times and judge the two interleaved sets of these
    boots; {machine kind: figures per headline metric}, recorded on the kind's machines."""
    (jid,) = br.job_ids(eng, job)

    def boots_by_kind() -> dict[tuple[int, str], list[float]]:
        out = {}
        for m in br.metrics_of(eng, [build_id], jid):
            for kind, per in buildruns.boot_means_by_kind(eng, [build_id], jid, m.id).items():
                out[(m.id, kind)] = per.get(build_id, [])
        return out

    stored = {key: len(v) for key, v in boots_by_kind().items()}
    with db.session(eng) as s:
        last_run = s.scalar(select(func.max(Run.id))) or 0
        commit = s.get(KernelBuild, build_id).commit
    # the kernel alone, in rounds of its own over the lab's workers, as any comparison
    comparison.measure(eng, lab, tree=tree, kernels=[commit], jobs=[job], boots=2 * boots,
                       source="aa", title=f"A/A {commit[:12]}")  # fmt: skip
    with db.session(eng) as s:
        # the machines of tonight's boots: the figures are theirs, not their whole kind's
        booted = set(
            s.scalars(select(Run.machine_id).where(Run.build_id == build_id, Run.id > last_run))
        )
    measured = boots_by_kind()
    out: dict[str, list[aa.Figures]] = {}
    for m in br.metrics_of(eng, [build_id], jid):
        if not is_headline(m.name, m.kind, m.higher_is_better):
            continue
        for (mid, kind), values in measured.items():
            if mid != m.id:
                continue
            tonight = values[stored.get((mid, kind), 0) :]  # the boots in boot order
            if len(tonight) < 4:
                continue
            # the smallest change at the cap, where a comparison decides: the first look
            # spends almost none of the error budget and finds only huge changes
            out.setdefault(kind, []).append(
                aa.figures(m.name, tonight, m.higher_is_better, m.kind, policy.max_runs, policy)
            )
    record(eng, out, booted or None)
    return out


def record(
    eng: Engine, found: dict[str, list[aa.Figures]], machine_ids: set[int] | None = None
) -> None:
    """Add tonight's figures to the A/A nights of the machines of ``machine_ids`` (all the
    kind's when None) and quarantine or release each by its nights."""
    at = datetime.now(UTC).isoformat(timespec="seconds")
    with db.session(eng) as s:
        for kind, figs in found.items():
            for m in s.scalars(select(Machine).where(Machine.kind == kind)):
                if machine_ids is not None and m.id not in machine_ids:
                    continue
                meta = dict(m.meta or {})
                night = {"at": at, "figures": [f.as_dict() for f in figs]}
                meta["aa"] = [*(meta.get("aa") or []), night][-KEEP:]
                m.meta = quarantine.judged(meta)


def for_branches(
    eng: Engine,
    lab: Lab,
    tracked_ids: list[int],
    boots: int,
    subjobs: Any,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """The A/A of every branch's baseline with its first tracked sub-job (``subjobs`` splits
    the tracked specs): one kernel per branch, the machines of each kind it ran on."""
    from stackbench.resultsdb import kernels_q, trees_q

    done = []
    for tid in tracked_ids:
        with db.session(eng) as s:
            row = trees_q.branch(s, tid)
            if row is None or row.baseline_build_id is None or not row.jobs:
                continue
            tree = trees_q.get(s, row.tree_id).name
            bid, commit = row.baseline_build_id, kernels_q.get(s, row.baseline_build_id).commit
            jobs = list(row.jobs)
        job = subjobs(jobs)[0]
        if progress:
            progress(f"{tree}:{row.branch}: A/A of {commit[:12]}, {2 * boots} boots")
        found = run_aa(eng, lab, tree, bid, job, boots=boots)
        done.append(
            {
                "tree": tree,
                "branch": row.branch,
                "kernel": commit,
                "job": job,
                "figures": {k: [f.as_dict() for f in v] for k, v in found.items()},
            }
        )
    return done
