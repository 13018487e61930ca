"""The evidence boot of a series a Buildbot master measures (the stage itself:
:mod:`stackbench.jobs.executors.coverage_stage`).

Here, in the dispatcher, the functions the series' patches change are read from the tree it
applied the series to; the first batch of rounds gets one more round, ``evidence``, of one
boot per built kernel, after the measured ones, that a worker of the machine kind runs with
``worker bench --evidence`` (every job at one run, counting those functions, storing no run);
the worker's counts come back as that build's ``coverage`` property and are kept on the
kernels here. The evidence round is in no boot count, no round record and no failure of the
series: its runs never existed as runs, so no verdict sees them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.jobs.executors import coverage_stage
from stackbench.jobs.executors.buildbot.steps import EVIDENCE_ROUND
from stackbench.jobs.executors.series_state import event
from stackbench.resultsdb import db


def _props(build: dict[str, Any]) -> dict[str, Any]:
    return {k: v[0] for k, v in (build.get("properties") or {}).items()}


def is_evidence(build: dict[str, Any]) -> bool:
    """Whether a benchmark build is a series' evidence round."""
    return str(_props(build).get("round")) == EVIDENCE_ROUND


def evidence_round(
    eng: Engine, sid: int, built: list[Any], jobs: list[str], kind: str
) -> list[dict[str, Any]]:
    """The evidence boots to hand over with the series' first rounds: one per kernel of
    ``built`` (base first), every job in it; [] when evidence boots are off or no patch of
    the series changes a function (an event says which)."""
    if not coverage_stage.enabled() or not built or not jobs:
        return []
    try:
        repo, tasks = coverage_stage.series_tasks(eng, sid)
    except StackbenchError as exc:
        _say(eng, sid, f"coverage: no evidence boot: {exc}")
        return []
    functions = coverage_stage.functions_to_count(eng, sid, repo, tasks)
    if not functions:
        return []
    return [
        {
            "commit": k.commit,
            "kernel_name": k.name,
            "position": k.position,
            "tree": k.tree,
            "kernel_config": k.kernel_config,
            "artifact": k.artifact,
            "job": ",".join(jobs),
            "machine_kind": kind,
            "runs": 1,
            "round": EVIDENCE_ROUND,
            "first": 0,
            "evidence": ",".join(functions),
        }  # fmt: skip
        for k in sorted(built, key=lambda k: k.position)
    ]


def store_counts(eng: Engine, sid: int, builds: list[dict[str, Any]], done: set[int]) -> None:
    """Keep the counts of the series' evidence rounds that ended for good (the caller leaves
    out those Buildbot runs again) and are not in ``done`` (build ids, added to): on the
    kernels, or an event saying why there are none."""
    for b in builds:
        if not b.get("complete") or b["buildid"] in done or not is_evidence(b):
            continue
        done.add(b["buildid"])
        reported = _props(b).get("coverage")
        if isinstance(reported, list) and reported:
            n = coverage_stage.store_reported(eng, sid, reported)
            _say(
                eng, sid, f"coverage: {n} evidence boots at Buildbot counted the changed functions"
            )
        else:
            _say(eng, sid, f"coverage: the evidence round (Buildbot build {b['buildid']}) "
                           "reported no counts: see its log")  # fmt: skip


def _say(eng: Engine, sid: int, message: str) -> None:
    with db.session(eng) as s:
        event(s, sid, f"series:{sid}", "coverage", message)
