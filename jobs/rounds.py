"""A series' benchmarks at Buildbot as rounds of boots, planned by the dispatcher.

The dispatcher submits a series with ``rounds_by=dispatcher``: its kernel builds store their
artifacts and trigger no benchmark. Once every kernel is built, :func:`first_boots` lays the
runs out with :mod:`stackbench.jobs.plan` (rounds; every round boots every kernel once,
running every job, the kernels in an order shuffled per round) and the master hands each
round to a worker of the kind as one benchmark build, every round at once
(``steps.BootRounds``): the rounds spread over every idle worker, and a round runs whole on
one, its boots in the round's order. Every boot is a unit of the verdict, as on the
in-process path; a worker's offset falls on every kernel of its round alike, and no kernel's
boots all fall in one stretch of host load.

When they have ended, :mod:`stackbench.jobs.adaptive` says whether headline metrics are
still undecided; :func:`more_boots` turns its answer into the next batch (the base and the
kernels in doubt, the jobs in doubt), submitted the same way, until every headline metric is
decided or the cap is reached.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from stackbench.jobs import plan as boot_plan
from stackbench.resultsdb import db, series_runs_store, series_store

KIND = "qemu"


@dataclass(frozen=True)
class Built:
    """A kernel the master built for the series, where its artifact is kept."""

    commit: str
    name: str
    position: int
    tree: str
    kernel_config: str
    artifact: str


def built_kernels(builds: list[dict[str, Any]], builder_of: Any) -> dict[str, Built]:
    """The series' kernel builds that passed, by commit (the latest attempt of each)."""
    from stackbench.jobs.buildbot.steps import artifact_path

    out: dict[str, Built] = {}
    for b in sorted(builds, key=lambda b: b["buildid"]):
        name = builder_of(b["builderid"])
        if not name.startswith("build-") or not b["complete"] or b["results"] not in (0, 1):
            continue
        p = {k: v[0] for k, v in (b.get("properties") or {}).items()}
        commit = str(p.get("commit") or "")
        if not commit:
            continue
        out[commit] = Built(
            commit=commit,
            name=str(p.get("kernel_name") or commit[:12]),
            position=int(p.get("position") or 0),
            tree=str(p.get("tree") or ""),
            kernel_config=str(p.get("kernel_config") or ""),
            artifact=artifact_path(name, int(b["number"])),
        )
    return out


def latest_attempts(builds: list[dict[str, Any]], names: dict[int, str]) -> list[dict[str, Any]]:
    """The builds without the boots a later build measured again: a master stopped mid-boot
    cancels the boot its rounds build was waiting for, and the rounds build, run again,
    boots it anew; only that later attempt says how the boot went."""
    last: dict[tuple[str, ...], int] = {}
    for b in builds:
        if names[b["buildid"]] == "bench-qemu" and "round" in (b.get("properties") or {}):
            p = {k: v[0] for k, v in b["properties"].items()}
            key = (str(p.get("commit")), str(p.get("job")), str(p.get("round")))
            last[key] = max(last.get(key, 0), int(b["buildid"]))
    keep = set(last.values())
    return [
        b
        for b in builds
        if names[b["buildid"]] != "bench-qemu"
        or "round" not in (b.get("properties") or {})
        or b["buildid"] in keep
    ]


def boots_of(build: dict[str, Any]) -> int:
    """How many boots of the plan a benchmark build ran: a round's, else one."""
    return int(((build.get("properties") or {}).get("boots") or [1])[0] or 1)


def seed_of(key: str) -> int:
    """The shuffle's seed for a batch: fixed by its key, so a batch submitted again after a
    lost answer (or a restarted dispatcher) is the same batch."""
    return zlib.crc32(key.encode())


def _boots(
    plan: boot_plan.Plan, built: dict[str, Built], jobs: list[str], offset: dict[str, int]
) -> list[dict[str, Any]]:
    if not jobs:
        return []
    # one boot runs every job, as a boot of the in-process executor does: a benchmark build
    # per (kernel, round, job) booted the guest once per job, 3x the boots of the demo stack
    # for the same runs. Iterations continue after the furthest job's, so no key repeats.
    first = max(offset.get(job, 0) for job in jobs)
    out = []
    for boot in plan.boots_in_order():
        k = built[boot.kernel]
        out.append(
            {
                "commit": k.commit,
                "kernel_name": k.name,
                "position": k.position,
                "tree": k.tree,
                "kernel_config": k.kernel_config,
                "artifact": k.artifact,
                "job": ",".join(jobs),
                "machine_kind": KIND,
                "runs": boot.runs,
                "round": boot.round,
                "first": first + boot.first,
            }
        )
    return out


def first_boots(
    built: dict[str, Built], order: list[str], jobs: list[str], runs: int, key: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first rounds: ``runs`` runs of every job on every built kernel (``order``: the
    series' commits, base first), spread over boots; the boots in order and the plan's
    record (as ``series_batch.plan`` keeps it)."""
    kernels = [c for c in order if c in built]
    plan = boot_plan.make_plan(kernels, runs, seed=seed_of(key), tag=key)
    return _boots(plan, built, jobs, {}), plan.describe()


def more_boots(
    more: Any,
    built: dict[str, Built],
    jobs: list[str],
    runs: int,
    subjob_jobs: dict[str, str],
    offset: dict[str, int],
    key: str,
    first_round: int,
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """The next batch for an :class:`adaptive.MoreRounds` answer: ``more.boots`` more
    rounds of the base and the kernels in doubt, with the jobs whose sub-jobs are in doubt
    (as many runs per boot as the first rounds had); the boots, the plan's record and the
    jobs re-measured."""
    again = [j for j in jobs if any(subjob_jobs.get(sj) == j for sj in more.subjobs)]
    per_boot = math.ceil(runs / boot_plan.boots_for(runs))
    kernels = [c for c in more.kernels if c in built]
    plan = boot_plan.make_plan(
        kernels,
        per_boot * more.boots,
        boots=more.boots,
        seed=seed_of(key),
        tag=key,
        first_round=first_round,
    )
    return _boots(plan, built, again, offset), plan.describe(), again


def subjob_jobs(eng: Engine, series_id: int) -> dict[str, str]:
    """Which job spec each sub-job of the series' Buildbot boots came from (the worker
    records the spec it ran in every run's meta)."""
    with db.session(eng) as s:
        return series_store.subjob_job_specs(s, series_id)


def next_offsets(offset: dict[str, int], boots: list[dict[str, Any]]) -> dict[str, int]:
    """Iteration numbers taken so far per job, after ``boots``: a later batch starts there."""
    from stackbench.jobs.jobspecs import split_job_specs

    out = dict(offset)
    for b in boots:
        for job in split_job_specs(str(b["job"])):
            out[job] = max(out.get(job, 0), int(b["first"]) + int(b["runs"]))
    return out


# -- the dispatcher's side: when to hand the master which batch


def start(eng: Engine, bb: Any, sid: int, meta: dict[str, Any], builds: list[dict]) -> bool:
    """Every kernel has been built: hand the master the first rounds of boots (False: no
    kernel was built, nothing to measure)."""
    from stackbench.jobs import dispatch, lifecycle, pipeline

    d = _dispatch(eng, sid)
    built = built_kernels(builds, bb.builder)
    if not built:
        return False
    jobs = list(meta.get("jobs") or pipeline.DEFAULT_JOBS)
    runs = int(meta.get("runs") or lifecycle.DEFAULT_RUNS)
    order = [c for c, _ in dispatch.series_kernels(eng, sid)]
    key = f"{d.submission}-rounds-1"
    boots, described = first_boots(built, order, jobs, runs, key)
    _submit(eng, bb, sid, d, key, boots, described, "first rounds")
    return True


def go_on(eng: Engine, bb: Any, sid: int, meta: dict[str, Any], builds: list[dict]) -> bool:
    """The rounds so far have ended: more of them while a headline metric is undecided and
    the series may go on (its ``adaptive`` is not false; its cap is ``max_runs``)."""
    from stackbench.jobs import adaptive, dispatch, lifecycle, pipeline

    d = _dispatch(eng, sid)
    if meta.get("adaptive") is False:
        return False
    dispatch.attach_builds(eng, sid)
    after = None
    if d.have is not None:
        after = adaptive.MoreRounds(
            boots=0, have=d.have, cap=0, kernels=[], subjobs=[], stored=d.stored or 0
        )
    more = adaptive.more_rounds(eng, sid, after=after)
    if more is None:
        return False
    jobs = list(meta.get("jobs") or pipeline.DEFAULT_JOBS)
    runs = int(meta.get("runs") or lifecycle.DEFAULT_RUNS)
    key = f"{d.submission}-rounds-{d.batches + 1}"
    # after every round planned so far, not after the rounds the look counted: a paired
    # verdict counts only rounds holding both kernels, and a round number used twice would
    # make the later batch's build hide the earlier one's boots
    with db.session(eng) as s:
        planned = sum(int(p.get("boots_per_kernel", 0)) for p in series_runs_store.plans(s, sid))
    boots, described, _again = more_boots(
        more, built_kernels(builds, bb.builder), jobs, runs, subjob_jobs(eng, sid),
        dict(d.offsets), key, first_round=max(planned, more.have) + 1,
    )  # fmt: skip
    if not boots:
        return False
    # the page's "still running": the short line, and every metric under it
    lifecycle.update_meta(eng, sid, more_rounds=more.reason(), more_rounds_detail=more.details())
    _submit(
        eng, bb, sid, d, key, boots, described, more.reason(), have=more.have,
        stored=more.stored,
    )  # fmt: skip
    return True


def _submit(eng: Engine, bb: Any, sid: int, d: series_runs_store.Dispatch, key: str,
            boots: list[dict], described: dict[str, Any], why: str,
            have: int | None = None, stored: int | None = None) -> None:  # fmt: skip
    from stackbench.jobs import lifecycle
    from stackbench.resultsdb import quarantine

    with db.session(eng) as s:
        avoid = quarantine.avoided(s)
    bsid = bb.submit_rounds(sid, d.submission, key, boots, avoid)
    measured = d.benchmarks if d.batches else 0  # every earlier batch has ended
    benchmarks = measured + len(boots)
    offsets = next_offsets(dict(d.offsets), boots)

    def record(s: Any) -> None:
        attempt = series_runs_store.current(s, sid)
        series_runs_store.add_batch(
            s, attempt, key, described, [int(b["round"]) for b in boots],
            buildset=bsid, boots=len(boots), have=have, stored=stored, offsets=offsets,
        )  # fmt: skip

    lifecycle.set_state(
        eng, sid, "running", f"{why}: {len(boots)} boots handed to Buildbot",
        progress=f"{measured}/{benchmarks}", record=record,
    )  # fmt: skip


def _dispatch(eng: Engine, sid: int) -> series_runs_store.Dispatch:
    with db.session(eng) as s:
        d = series_runs_store.dispatch(s, sid)
    if d is None:
        raise ValueError(f"series {sid} was never handed over")
    return d


def record(eng: Engine, bb: Any, sid: int, builds: list[dict], names: dict[int, str]) -> None:
    """Each round's try as the master ran it: on which worker, and how it went (a round
    whose worker was lost ends RETRY, and its run again is the next try)."""
    from stackbench.jobs.dispatch import PASSED, RETRY

    tries = [b for b in builds if names[b["buildid"]].startswith("bench-")
             and "round" in (b.get("properties") or {})]  # fmt: skip
    if not tries:
        return
    workers: dict[int, str] = {}
    for b in tries:
        wid = b.get("workerid")
        if wid and wid not in workers:
            found = bb.master.get(f"workers/{wid}")["workers"]
            workers[wid] = found[0]["name"] if found else ""
    with db.session(eng) as s:
        attempt = series_runs_store.current(s, sid)
        for b in sorted(tries, key=lambda b: b["buildid"]):
            if not b["complete"]:
                state = "running"
            elif b["results"] == RETRY:
                state = "lost"
            else:
                state = "done" if b["results"] in PASSED else "failed"
            rnd = int(b["properties"]["round"][0])
            worker = workers.get(b.get("workerid") or 0, "")
            series_runs_store.record_round(s, attempt, rnd, int(b["buildid"]), worker, state)
