"""The profile section of a comparison (stackbench.resultsdb.profile_store): per commit and
job, the kernel symbols whose share of the evidence boot's perf samples moved most against
the base, in LKP's layout (base share, change in points, new share, then
``perf-profile.self.cycles-pp.<symbol>``), the functions the commit's patch changes marked."""

from __future__ import annotations

from stackbench.resultsdb.profile_store import KernelProfile, SymbolShare
from stackbench.resultsdb.tables import section

TITLE = "== profile: kernel symbols whose share of the CPU samples moved most"
FOOTER = (
    "% of perf's samples (cpu-clock on every CPU, 499 Hz, under TCG: no PMU, so the "
    "cycles-pp names count time, not cycles) on one evidence boot per kernel, its runs in "
    "no verdict; self is the symbol's own code, children adds what it called (kernel call "
    "chains from the guess unwinder); * the commit's patch changes this function (or one "
    "the compiler folded into it: holds ..., inlined); one boot "
    "a side: two boots of one kernel moved a symbol up to 5.5 points here (docs/profile.md)"
)


def _pct(share: float | None) -> str:
    return f"{100 * share:10.2f}" if share is not None else f"{'-':>10}"


def row_line(r: SymbolShare) -> str:
    """One symbol: base self %, change in points, new self %, the LKP name, children."""
    mark = "*" if r.patched else " "
    children = ""
    if r.children is not None or r.base_children is not None:
        children = f"  (children {_pct(r.base_children).strip()} -> {_pct(r.children).strip()})"
    holds = f"  (holds {', '.join(r.holds)}, inlined)" if r.holds else ""
    return (
        f"   {_pct(r.base_self)} {100 * r.delta:+10.2f} {_pct(r.self_share)}  "
        f"{mark}perf-profile.self.cycles-pp.{r.symbol}{children}{holds}"
    )


def kernel_lines(row: KernelProfile) -> list[str]:
    """A commit's lines: per job a header with the sample counts, then its symbols."""
    lines = [f"   {row.label}" + (f"  (patched: {', '.join(row.patched)})" if row.patched else "")]
    for job, rows in row.jobs.items():
        n, base = row.samples.get(job, (0, 0))
        lines.append(f"     {job}: {n:,} samples (base {base:,})")
        lines.append(f"   {'base':>10} {'change':>10} {'new':>10}")
        lines.extend(row_line(r) for r in rows)
        if row.patched and not any(r.patched for r in rows):
            lines.append("     no patched function has a sample in either profile")
    for job, error in sorted(row.errors.items()):
        lines.append(f"     {job}: not profiled: {error}")
    return lines


def render(rows: list[KernelProfile]) -> str:
    """The section's text; "" when no kernel has a profile."""
    return section.render(TITLE, FOOTER, rows, kernel_lines)
