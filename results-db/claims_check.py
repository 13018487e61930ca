"""A series' claims checked against what stackbench measured on the same kernels.

Each claim (a row of the cover letter's LKP or mmtests table, kept by
:mod:`stackbench.resultsdb.claims_store`) names a job, a metric and two kernel columns. What
was measured for it is the verdict of that pair (:func:`stackbench.resultsdb.tables.verdict.
compare` on the two kernels alone, through :func:`stackbench.resultsdb.blocks.pair`): the same
change, interval and decision the stackbench table, the pages and the mails show for the pair.
From it, one status per claim:

* ``confirmed``: the pair's verdict is decided (changed) in the claim's direction;
* ``contradicted``: decided in the other direction;
* ``consistent``: not decided, and the interval holds the claimed change;
* ``not reproduced``: the interval excludes the claimed change (zero inside it, or a change
  smaller than claimed and than the metric's minimum effect);
* ``not checked``: no job or metric of ours for it, a kernel column the series does not
  have, or too few runs: the reason is said.

Both changes are relative changes of the value (new against base), whatever sign convention
the table printed, so a direction is the sign of the change.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from stackbench.errors import StackbenchError
from stackbench.resultsdb import claims_store, db, kernels_store, machines_q, query, series_q

if TYPE_CHECKING:
    from stackbench.resultsdb.models import Series

CONFIRMED = "confirmed"
CONSISTENT = "consistent"
NOT_REPRODUCED = "not reproduced"
CONTRADICTED = "contradicted"
NOT_CHECKED = "not checked"
STATUSES = (CONFIRMED, CONSISTENT, NOT_REPRODUCED, CONTRADICTED, NOT_CHECKED)
# rows about a metric's spread, not its value: no verdict speaks to them
DISPERSION = ("stddev", "coeffvar", "ci", "%stddev")

# a cover letter or robot report says where it measured in words like these
_MACHINE = re.compile(
    r"(?im)^[>\s]*(.*(?:test[- ]machine\s*:|\b\d+[- ]?(?:CPUs?|threads|cores|vCPUs?)\b).*)$"
)


@dataclass
class ClaimCheck:
    """One claim and what was measured for it."""

    claim: dict[str, Any]
    job: str | None
    metric: str | None
    kernel: str  # our name of the claim's kernel column ("" when not mapped)
    base: str
    status: str
    why: str = ""
    measured_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    level: str = ""
    verdict: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClaimsReport:
    """The claims section of a series' report; ``previous``: the version before's, measured."""

    series_id: int
    version: int
    checked: bool  # the submitter asked for the claims to be measured
    their_machine: str
    our_machine: str
    checks: list[ClaimCheck] = field(default_factory=list)
    left_out: int = 0
    previous: ClaimsReport | None = None

    def counts(self) -> dict[str, int]:
        return {st: sum(c.status == st for c in self.checks) for st in STATUSES}

    def as_json(self) -> dict[str, Any]:
        out = {
            "series": self.series_id,
            "version": self.version,
            "checked": self.checked,
            "their_machine": self.their_machine,
            "our_machine": self.our_machine,
            "counts": self.counts(),
            "claims": [c.as_json() for c in self.checks],
            "left_out": self.left_out,
        }
        out["previous"] = self.previous.as_json() if self.previous is not None else None
        return out


def status_of(claimed: float | None, v: Any) -> tuple[str, str]:
    """(status, why) of a claimed relative change (%) against a pair's verdict ``v``
    (:class:`stackbench.resultsdb.verdict.Verdict`, None: nothing measured)."""
    if claimed is None or not math.isfinite(claimed):
        return NOT_CHECKED, "the table gives no change to check"
    if v is None:
        return NOT_CHECKED, "nothing measured for this metric on these kernels"
    if v.outcome == "n/a" or v.change_pct is None:
        return NOT_CHECKED, f"no verdict ({v.test or 'fewer than two runs a side'})"
    if v.outcome == "changed":
        same = (v.change_pct > 0) == (claimed > 0) and claimed != 0
        if same:
            return CONFIRMED, f"measured {v.label}, in the claimed direction"
        return CONTRADICTED, f"measured {v.label}, against the claimed direction"
    lo, hi = v.ci_low_pct, v.ci_high_pct
    if lo is None or hi is None:
        return NOT_CHECKED, "the verdict has no interval"
    if lo <= claimed <= hi:
        return CONSISTENT, "undecided: the interval holds the claimed change"
    if lo <= 0 <= hi:
        return NOT_REPRODUCED, "the interval excludes the claimed change and holds zero"
    return NOT_REPRODUCED, "the interval excludes the claimed change: a smaller change measured"


def their_machine(cover_letter: str, claims: list[dict[str, Any]]) -> str:
    """Where the claims were measured, as the mail says it (a test machine line, a CPU
    count, an LKP tbox_group), "" when it does not say."""
    m = _MACHINE.search(cover_letter or "")
    if m:
        return m.group(1).strip().rstrip(":.,;")[:160]
    for c in claims:
        job = (c.get("claim") or {}).get("job") or {}
        if job.get("tbox_group"):
            return f"LKP's {job['tbox_group']}"
    return ""


def our_machine(eng: Engine, names: set[str]) -> str:
    """The machines that measured, in a reviewer's words: kind, vCPUs, memory."""
    with db.session(eng) as s:
        rows = [m for m in machines_q.listing(s) if m.name in names]
    out = []
    for m in rows:
        size = ", ".join(
            x for x in (
                f"{m.cpus} vCPUs" if m.cpus and m.kind == "qemu" else f"{m.cpus} CPUs" if m.cpus else "",
                f"{m.memory_mb} MB memory" if m.memory_mb else "",
            ) if x
        )  # fmt: skip
        what = "a QEMU guest" if m.kind == "qemu" else f"a {m.kind} box"
        out.append(f"{what} ({size})" if size else what)
    return "; ".join(dict.fromkeys(out)) or ", ".join(sorted(names))


def _job_matches(stored: dict[str, Any], job: query.JobRow) -> bool:
    if stored.get("suite") != job.suite:
        return False
    params = job.params or {}
    for key, want in (stored.get("params") or {}).items():
        have = job.test if key == "test" and "test" not in params else params.get(key)
        if str(have).lower() != str(want).lower():
            return False
    return True


class _Pairs:
    """The pair verdicts of one series, each pair's dataset loaded once."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.found: dict[tuple[str, str], list] = {}
        self.machines: set[str] = set()

    def judged(self, base: str, new: str) -> list:
        from stackbench.resultsdb.tables import verdict as judged_table

        if (base, new) not in self.found:
            try:
                with self.eng.connect() as conn:
                    ds = query.load(conn, query.resolve_kernels(conn, [base, new]))
            except StackbenchError:
                ds = None
            rows = judged_table.compare(ds) if ds is not None and len(ds.kernels) == 2 else []
            if ds is not None:
                self.machines |= {r.machine for r in ds.runs.values()}
            self.found[(base, new)] = rows
        return self.found[(base, new)]

    def verdict(self, base: str, new: str, stored: dict[str, Any]) -> Any:
        for job, _kernel, rows in self.judged(base, new):
            if not _job_matches(stored, job):
                continue
            for name, _b, _n, v in rows:
                if name == stored.get("metric"):
                    return v
        return None


def stack_names(row: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A series' kernels, base first, as (commit, the name our tables give it) and as
    (commit, the patch's subject: the name an author gives a table's column)."""
    kernels = kernels_store.stack_names(row)
    subjects = [
        (commit, k.patch.subject if k.patch else name)
        for (commit, name), k in zip(kernels, kernels_store.stack(row), strict=True)
    ]
    return kernels, subjects


def series_of_kernels(eng: Engine, refs: list[str]) -> int | None:
    """The series (with claims kept) whose base and commits are the kernels ``refs`` name,
    in that order; None when they are not one series' stack."""
    from sqlalchemy import select

    from stackbench.resultsdb.models import Series

    try:
        with eng.connect() as conn:
            commits = [k.commit for k in query.resolve_kernels(conn, refs)]
    except StackbenchError:
        return None
    with db.session(eng) as s:
        rows = s.scalars(
            select(Series).where(Series.base_commit == commits[0]).order_by(Series.id.desc())
        )
        for row in rows:
            stack = [k.commit for k in kernels_store.stack(row)]
            if stack == commits and claims_store.of_series(row):
                return row.id
    return None


def check_series(eng: Engine, series_id: int, *, previous: bool = True) -> ClaimsReport | None:
    """The claims section of series ``series_id`` (None when there is none or it kept no
    claims)."""
    with db.session(eng) as s:
        row = series_q.get(s, series_id)
        return check(eng, row, previous=previous) if row is not None else None


def check(eng: Engine, row: Series, *, previous: bool = True) -> ClaimsReport | None:
    """The claims section of the series ``row`` as the caller's session read it (None when
    it kept no claims); ``previous``: with the version before's, measured."""
    stored = claims_store.of_series(row)
    if not stored:
        return None
    kernels, _subjects = stack_names(row)
    names = [n for _c, n in kernels]
    prev_id = claims_store.previous_version(row) if previous else None
    report = ClaimsReport(
        series_id=row.id,
        version=row.version or 1,
        checked=claims_store.checks_claims(row),
        their_machine=their_machine(row.cover_letter or "", stored),
        our_machine="",
        left_out=int((row.meta or {}).get("claims_left_out") or 0),
    )
    pairs = _Pairs(eng)
    for c in stored:
        report.checks.append(_check(c, kernels, names, pairs, report.checked))
    report.our_machine = our_machine(eng, pairs.machines) if pairs.machines else ""
    if prev_id is not None:
        report.previous = check_series(eng, prev_id, previous=False)
    return report


def _check(
    c: dict[str, Any],
    kernels: list[tuple[str, str]],
    names: list[str],
    pairs: _Pairs,
    checked: bool,
) -> ClaimCheck:
    claim = c.get("claim") or {}
    ki, bi = c.get("kernel_index"), c.get("base_index")
    bi = 0 if bi is None and ki is not None else bi
    where = isinstance(ki, int) and isinstance(bi, int) and 0 <= bi < len(kernels) > ki >= 0
    out = ClaimCheck(
        claim=claim,
        job=c.get("job"),
        metric=c.get("metric"),
        kernel=names[ki] if where else "",
        base=names[bi] if where else "",
        status=NOT_CHECKED,
    )
    if c.get("reason") or not c.get("job") or not c.get("metric"):
        out.why = c.get("reason") or "no job of ours measures it"
        return out
    if not where:
        out.why = "its kernel columns are not commits of this series"
        return out
    if not checked:
        out.why = "the series was not submitted with --check-claims"
        return out
    if str(c.get("statistic") or "").lower() in DISPERSION:
        out.why = (
            f"a {c['statistic']} row: the verdict compares the kernels' values, not their spread"
        )
        return out
    if not kernels[bi][0] or not kernels[ki][0]:
        out.why = "the series' commits are not applied yet"
        return out
    v = pairs.verdict(kernels[bi][1], kernels[ki][1], c)
    out.status, out.why = status_of(claim.get("change_pct"), v)
    if v is not None:
        out.measured_pct, out.ci_low_pct, out.ci_high_pct = (
            v.change_pct, v.ci_low_pct, v.ci_high_pct
        )  # fmt: skip
        out.level, out.verdict = v.level_text, v.label
    return out
