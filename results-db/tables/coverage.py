"""The patched-code coverage section of a comparison (stackbench.resultsdb.coverage_store):
per commit and job, how often the evidence boot saw each function its patch changes called,
beside the base's count."""

from __future__ import annotations

from stackbench.resultsdb.coverage_store import CommitCoverage, FunctionCalls
from stackbench.resultsdb.tables import section

TITLE = "== patched code: calls of the changed functions during each job"
FOOTER = (
    "calls: ftrace's function tracer on an evidence boot of each kernel (one more boot, "
    "its runs in no verdict); a static inline function the compiler folded into its "
    "callers cannot be counted"
)


def _count(n: int, lost: int = 0) -> str:
    # the trace buffer dropped events: the calls counted are a lower bound
    return f"at least {n:,}" if lost else f"{n:,}"


def _calls(
    name: str, calls: int, base: int | None, added: bool = False, lost: int = 0, base_lost: int = 0
) -> str:
    if added and base is None:
        against = " (new: not in the base)"
    else:
        against = f" (base {_count(base, base_lost)})" if base is not None else ""
    if calls == 0 and not lost:
        return f"{name} 0 calls" + (against if base else "")
    return f"{name} {_count(calls, lost)} calls{against}"


def lost_text(f: FunctionCalls) -> str:
    """What a count whose trace buffer overran says after it ("" when none did)."""
    parts = [f"{n:,} trace events lost{where}" for n, where in
             ((f.lost, ""), (f.base_lost, " on the base")) if n]  # fmt: skip
    return f" [{', '.join(parts)}: a lower bound]" if parts else ""


def function_text(f: FunctionCalls) -> str:
    """One function's part of a job's line."""
    name = f"{f.name} ({f.kind})" if f.kind else f.name
    not_run = ": this benchmark did not run the changed code"
    if not f.measured:
        return f"{name}: not counted on this kernel"
    lost = (f.lost, f.base_lost)
    if f.calls is None and f.via:
        parts = ", ".join(_calls(c, n, b, False, *lost) for c, n, b in f.via if n is not None)
        said = f"{name}: inlined into its callers; {parts}"
        return said + lost_text(f) + (not_run if f.ran is False else "")
    if f.calls is None:
        return f"{name}: not traceable in this kernel (inlined or notrace)"
    text = _calls(name, f.calls, f.base_calls, f.change == "added", *lost) + lost_text(f)
    return text + (not_run if f.ran is False else "")


def commit_lines(row: CommitCoverage) -> list[str]:
    """A commit's lines: what its patch changes, then one line per job."""
    head = f"   {row.label}"
    if row.functions is None:
        return [f"{head}: the functions its patch changes are not known"]
    if row.no_function_changed:
        return [f"{head}: no function changed"]
    lines = [head + (f"  [{row.flag}]" if row.flag else "")]
    for job, calls in row.jobs.items():
        lines.append(f"     {job}: " + "; ".join(function_text(f) for f in calls))
    for job, error in sorted(row.errors.items()):
        lines.append(f"     {job}: not counted: {error}")
    if not row.jobs and not row.errors:
        names = ", ".join(f["name"] for f in row.functions)
        lines.append(f"     changes {names}; no evidence boot counted their calls")
    return lines


def render(rows: list[CommitCoverage]) -> str:
    """The section's text; "" when no kernel has coverage."""
    return section.render(TITLE, FOOTER, rows, commit_lines)
