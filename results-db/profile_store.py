"""CPU profiles of the evidence boots (stackbench.jobs.benchmarks.perfprof): per kernel and job
the share of perf's samples in each kernel symbol (self) and under it on the call chain
(children), kept on the kernel (``kernel_build.meta.profile``: job -> ``{"event",
"samples", "self", "children"}`` or ``{"error"}``). Like the coverage counts they come from
one boot outside every verdict. The report's rows (:func:`load`) pair each kernel's shares
with its base's and keep the symbols that moved most, the functions the kernel's patch
changes (``patch.meta.changed_functions``) marked, and so are the callers the evidence boot
found holding a changed function the compiler folded in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from stackbench.resultsdb import coverage_store, kernels_store
from stackbench.resultsdb.query import Kernel

# LKP's name for a symbol's self share (its children share: perf-profile.children...)
SELF_PREFIX = "perf-profile.self.cycles-pp."
CHILDREN_PREFIX = "perf-profile.children.cycles-pp."
# the moved symbols a job's rows list (the patched functions come on top of these)
TOP = 10


def save(s: Session, build_id: int, job: str, profile: dict[str, Any] | None) -> None:
    """Keep one evidence boot's profile of ``job`` on the kernel (None: not profiled)."""
    if profile is not None:
        kernels_store.update_job_meta(s, build_id, "profile", job, lambda _kept: profile)


def function_of(symbol: str) -> str:
    """The C function a kernel symbol is: gcc's clones (``compact_zone.isra.0``,
    ``.constprop.0``, ``.part.0``, ``.cold``) are the function they came from."""
    return symbol.split(".", 1)[0]


@dataclass
class SymbolShare:
    """One symbol's shares of a job's samples (0..1) on the kernel and its base (None: no
    sample there above the stored floor)."""

    symbol: str
    self_share: float | None
    base_self: float | None
    children: float | None
    base_children: float | None
    patched: bool
    # the changed functions the compiler folded into this one (its code holds theirs)
    holds: list[str] = field(default_factory=list)

    @property
    def delta(self) -> float:
        return (self.self_share or 0.0) - (self.base_self or 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "symbol": self.symbol, "lkp": SELF_PREFIX + self.symbol, "patched": self.patched,
            "lkp_children": CHILDREN_PREFIX + self.symbol, "holds": self.holds,
            "self": self.self_share, "base_self": self.base_self, "delta": round(self.delta, 6),
            "children": self.children, "base_children": self.base_children,
        }  # fmt: skip


@dataclass
class KernelProfile:
    """A kernel's profile rows against the base: per job the symbols that moved most."""

    kernel_id: int
    label: str
    patched: list[str]
    jobs: dict[str, list[SymbolShare]] = field(default_factory=dict)
    samples: dict[str, tuple[int, int]] = field(default_factory=dict)  # job -> (new, base)
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id,
            "kernel": self.label,
            "patched_functions": self.patched,
            "jobs": {j: [r.as_dict() for r in rows] for j, rows in self.jobs.items()},
            "samples": {j: {"kernel": n, "base": b} for j, (n, b) in self.samples.items()},
            "errors": self.errors,
        }


def moved(
    new: dict[str, Any],
    base: dict[str, Any],
    patched: set[str],
    top: int = TOP,
    holders: dict[str, list[str]] | None = None,
) -> list[SymbolShare]:
    """The ``top`` symbols whose self share moved most from ``base`` to ``new``, then every
    patched function with a sample on either side, and every function ``holders`` says
    holds a patched one the compiler folded in (function -> the patched ones); largest
    move first."""
    holders = holders or {}
    marked = patched | set(holders)
    ns, bs = new.get("self") or {}, base.get("self") or {}
    nc, bc = new.get("children") or {}, base.get("children") or {}
    rows = [
        SymbolShare(sym, ns.get(sym), bs.get(sym), nc.get(sym), bc.get(sym),
                    function_of(sym) in marked, holders.get(function_of(sym), []))
        for sym in {*ns, *bs, *(s for s in {*nc, *bc} if function_of(s) in marked)}
    ]  # fmt: skip
    rows.sort(key=lambda r: (-abs(r.delta), r.symbol))
    chosen = rows[:top] + [r for r in rows[top:] if r.patched]
    return sorted(chosen, key=lambda r: (-abs(r.delta), r.symbol))


def load(conn: Any, kernels: list[Kernel]) -> list[KernelProfile]:
    """The profile rows of ``kernels`` (base first): one per later kernel with a profile;
    [] when no kernel has one."""
    if len(kernels) < 2:
        return []
    by_id = coverage_store.kept_by_kernel(conn, kernels, "profile")
    # a changed function the compiler folded into its callers has no symbol: its code runs
    # in theirs, which the same evidence boot's counts name
    counted = coverage_store.kept_by_kernel(conn, kernels, "coverage")
    base_prof = by_id.get(kernels[0].id, ({}, None))[0]
    out = []
    for k in kernels[1:]:
        prof, functions = by_id.get(k.id, ({}, None))
        if not prof:
            continue
        patched = [f["name"] for f in functions or [] if f.get("change") != "removed"]
        row = KernelProfile(k.id, k.label, patched)
        for job in sorted(prof):
            got, base = prof[job], base_prof.get(job) or {}
            if got.get("error"):
                row.errors[job] = got["error"]
            elif not base:
                row.errors[job] = "the base kernel has no profile of this job"
            elif base.get("error"):
                row.errors[job] = f"the base kernel's profile failed: {base['error']}"
            else:
                calls = (counted.get(k.id, ({}, None))[0].get(job) or {}).get("calls") or {}
                holders = coverage_store.folded_into(functions or [], calls)
                row.jobs[job] = moved(got, base, set(patched), holders=holders)
                row.samples[job] = (int(got.get("samples") or 0), int(base.get("samples") or 0))
        out.append(row)
    return out
