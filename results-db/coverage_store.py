"""Patched-code coverage: the functions each patch changes (``patch.meta.changed_functions``,
from stackbench.patches.diffparse) and the calls an evidence boot of each kernel counted of
them during each job (``kernel_build.meta.coverage``: job -> function -> calls, or None when
the kernel could not trace it). An evidence boot's runs are never stored as runs: they enter
no verdict. The report's rows (:func:`load`) pair each kernel's counts with its base's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from stackbench.resultsdb import kernels_store
from stackbench.resultsdb.models import Patch
from stackbench.resultsdb.query import Kernel, _raw

# what a commit's row says when none of its changed functions ran in any job
NOT_RUN = "the benchmarks did not run the changed code"


def save_functions(s: Session, patch_id: int, functions: list[dict[str, Any]]) -> None:
    """Keep the functions a patch changes (name, path, change, static, inline)."""
    row = s.get(Patch, patch_id)
    if row is not None:
        row.meta = {**(row.meta or {}), "changed_functions": functions}


def save_counts(s: Session, build_id: int, job: str, counted: dict[str, Any]) -> None:
    """Merge one evidence boot's counts for ``job`` into the kernel's: ``counted`` has
    ``calls`` (function -> calls), ``untraceable`` (names) or ``error``."""
    kernels_store.update_job_meta(s, build_id, "coverage", job, lambda had: _merged(had, counted))


def _merged(kept: dict[str, Any] | None, counted: dict[str, Any]) -> dict[str, Any]:
    had = dict(kept or {})
    if counted.get("error"):
        had["error"] = counted["error"]
        return had
    had.pop("error", None)
    calls = dict(had.get("calls") or {})
    calls.update({fn: int(n) for fn, n in (counted.get("calls") or {}).items()})
    calls.update({fn: None for fn in counted.get("untraceable") or []})
    had["calls"] = calls
    # events the trace buffer dropped in this boot: its counts are lower bounds
    had.pop("lost_events", None)
    if counted.get("lost_events"):
        had["lost_events"] = int(counted["lost_events"])
    return had


@dataclass
class FunctionCalls:
    """One changed function's calls during one job on the commit's kernel and its base's
    (None: not traceable there, or not measured). A function the compiler folded into its
    callers has ``via``: the nearest callers the kernel kept, each (name, calls, base
    calls): they ran, so the code they hold could run. ``lost``/``base_lost``: events the
    trace buffer dropped during that job on that kernel (its counts are then lower
    bounds)."""

    name: str
    kind: str
    change: str
    calls: int | None
    base_calls: int | None
    measured: bool
    via: list[tuple[str, int | None, int | None]] = field(default_factory=list)
    lost: int = 0
    base_lost: int = 0

    @property
    def ran(self) -> bool | None:
        """Whether it (or, folded in, a caller) was called; None when nothing was counted,
        or when none was but the trace buffer dropped events (the calls may be among them)."""
        if self.calls is not None:
            return True if self.calls > 0 else (None if self.lost else False)
        counted = [c for _n, c, _b in self.via if c is not None]
        if not counted:
            return None
        return True if any(counted) else (None if self.lost else False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.name, "kind": self.kind, "change": self.change,
            "calls": self.calls, "base_calls": self.base_calls, "measured": self.measured,
            "via": [{"function": n, "calls": c, "base_calls": b} for n, c, b in self.via],
            # a count with events lost is a lower bound
            "lost_events": self.lost, "base_lost_events": self.base_lost,
            "lower_bound": bool(self.lost), "base_lower_bound": bool(self.base_lost),
        }  # fmt: skip


@dataclass
class CommitCoverage:
    """A kernel's row: the functions its patch changes and their calls per job."""

    kernel_id: int
    label: str
    functions: list[dict[str, Any]] | None  # None: the patch's functions are not known
    jobs: dict[str, list[FunctionCalls]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def no_function_changed(self) -> bool:
        return self.functions is not None and not self.functions

    @property
    def flag(self) -> str:
        """NOT_RUN when some function could be counted and none ran in any job."""
        ran = [f.ran for calls in self.jobs.values() for f in calls if f.ran is not None]
        return NOT_RUN if ran and not any(ran) else ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "kernel": self.label,
            "functions": self.functions,
            "no_function_changed": self.no_function_changed,
            "flag": self.flag or None,
            "jobs": {j: [f.as_dict() for f in fs] for j, fs in self.jobs.items()},
            "errors": self.errors,
        }


def kept_by_kernel(
    conn: Any, kernels: list[Kernel], key: str
) -> dict[int, tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """Per kernel id what its evidence boot kept under ``meta[key]`` (by job; {} when
    nothing) and the functions its patch changes (None: not known, or no patch): what the
    coverage and the profile rows are made of."""
    rows = (
        _raw(conn)
        .execute(
            "SELECT k.id, k.meta -> %(key)s, p.meta -> 'changed_functions' "
            "FROM kernel_build k LEFT JOIN patch p ON p.id = k.patch_id WHERE k.id = ANY(%(ids)s)",
            {"key": key, "ids": [k.id for k in kernels]},
        )
        .fetchall()
    )
    return {r[0]: (_json(r[1]) or {}, _json(r[2])) for r in rows}


def _kind(fn: dict[str, Any]) -> str:
    return " ".join(w for w in ("static", "inline") if fn.get(w))


def load(conn: Any, kernels: list[Kernel]) -> list[CommitCoverage]:
    """The coverage rows of ``kernels`` (base first): one per later kernel that comes from a
    patch; [] when no kernel has evidence counts or changed functions stored."""
    if len(kernels) < 2:
        return []
    by_id = kept_by_kernel(conn, kernels, "coverage")
    base_cov = by_id.get(kernels[0].id, ({}, None))[0]
    out = []
    for k in kernels[1:]:
        cov, functions = by_id.get(k.id, ({}, None))
        if functions is None and not cov:
            continue
        row = CommitCoverage(k.id, k.label, functions)
        for job in sorted(cov):
            if cov[job].get("error"):
                row.errors[job] = cov[job]["error"]
                continue
            calls = cov[job].get("calls") or {}
            base = (base_cov.get(job) or {}).get("calls") or {}
            lost = int(cov[job].get("lost_events") or 0)
            base_lost = int((base_cov.get(job) or {}).get("lost_events") or 0)
            row.jobs[job] = [
                FunctionCalls(
                    fn["name"],
                    _kind(fn),
                    fn.get("change", "modified"),
                    calls.get(fn["name"]),
                    base.get(fn["name"]),
                    fn["name"] in calls,
                    via=_via(fn, calls, base),
                    lost=lost,
                    base_lost=base_lost,
                )  # fmt: skip
                for fn in functions or []
                if fn.get("change") != "removed"
            ]
        out.append(row)
    return out if any(r.jobs or r.functions is not None for r in out) else []


def folded_into(
    functions: list[dict[str, Any]], calls: dict[str, int | None]
) -> dict[str, list[str]]:
    """The nearest kept callers of each changed function the evidence boot found folded
    into its callers (counted as untraceable: ``calls`` has it as None), each with the
    functions it holds: where the changed code runs, for the profile to mark."""
    out: dict[str, list[str]] = {}
    for fn in functions:
        if fn.get("change") == "removed" or fn["name"] not in calls:
            continue
        for caller, _n, _b in _via(fn, calls, {}):
            out.setdefault(caller, []).append(fn["name"])
    return out


def _via(
    fn: dict[str, Any], calls: dict[str, int | None], base: dict[str, int | None]
) -> list[tuple[str, int | None, int | None]]:
    """The nearest callers with a count, for a function with none (folded into them)."""
    if calls.get(fn["name"]) is not None:
        return []
    graph = fn.get("callers") or {}
    seen, level, out = {fn["name"]}, list(graph.get(fn["name"], [])), []
    while level and not out:
        nxt = []
        for c in level:
            if c in seen:
                continue
            seen.add(c)
            if calls.get(c) is not None:
                out.append((c, calls[c], base.get(c)))
            else:
                nxt += graph.get(c, [])
        level = nxt
    return out


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
