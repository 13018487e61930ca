"""The claims section as text: the report mail's and ``compare --style stackbench``'s form of
:class:`stackbench.resultsdb.claims_check.ClaimsReport` (the pages render the same report
through their own template include)."""

from __future__ import annotations

from stackbench.resultsdb.claims_check import ClaimCheck, ClaimsReport

TITLE = "Claims of the cover letter, measured again"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}%"


def claimed_text(c: ClaimCheck) -> str:
    """What the mail claimed: its row as printed and the change of the value it implies."""
    claim = c.claim
    style = str(claim.get("style") or "table")
    printed = claim.get("printed_pct")
    change = claim.get("change_pct")
    where = f"{style} row {claim.get('metric')!r}"
    if claim.get("stddev_pct") is not None:
        where += f", stddev {claim['stddev_pct']:g}%"
    if printed is not None and change is not None and abs(printed - change) > 0.005:
        return f"{_pct(change)} (printed {printed:+g}% in {where})"
    return f"{_pct(change)} ({where})"


def measured_text(c: ClaimCheck) -> str:
    if c.measured_pct is None:
        return "-"
    ci = ""
    if c.ci_low_pct is not None and c.ci_high_pct is not None:
        ci = f" [{_pct(c.ci_low_pct)}, {_pct(c.ci_high_pct)}]"
        ci += f" at {c.level}" if c.level else ""
    return f"{_pct(c.measured_pct)}{ci}, {c.verdict}"


def machines_text(report: ClaimsReport) -> str:
    theirs = report.their_machine or "not said in the mail"
    ours = report.our_machine or "nothing measured yet"
    return f"Their machine: {theirs}.  Ours: {ours}."


def lines(report: ClaimsReport) -> list[str]:
    """The section, its lines without trailing newlines."""
    counts = ", ".join(f"{n} {st}" for st, n in report.counts().items() if n)
    out = [f"{TITLE} ({counts or 'none'}):", ""]
    if not report.checked:
        out.append("  (submitted without --check-claims: the claims' own jobs did not run)")
    out.append("  " + machines_text(report))
    out.append("  Changes are of the value, new against base; the interval is the verdict's.")
    out.append("")
    out += _rows(report.checks)
    if report.left_out:
        out.append(f"  ({report.left_out} more claims not kept)")
    prev = report.previous
    if prev is not None:
        out += [
            "",
            f"The same claims of v{prev.version} (series #{prev.series_id}), measured then:",
            "",
        ]
        out += _rows(prev.checks) or ["  (none)"]
    return out


def _rows(checks: list[ClaimCheck]) -> list[str]:
    out = []
    for c in checks:
        what = c.metric or str(c.claim.get("metric") or "?")
        job = f" ({c.job})" if c.job else ""
        kernels = f", {c.kernel} against {c.base}" if c.kernel else ""
        out.append(f"  [{c.status}] {what}{job}{kernels}")
        out.append(f"      claimed:  {claimed_text(c)}")
        if c.measured_pct is not None:
            out.append(f"      measured: {measured_text(c)}")
        if c.why:
            out.append(f"      {c.why}")
    return out
