"""The three report mails, rendered from the same data and tables as the web pages."""

from __future__ import annotations

import hashlib
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from stackbench.errors import NotFoundError, StackbenchError
from stackbench.mail.config import MailConfig, from_env
from stackbench.patches.mailheaders import is_mail_address
from stackbench.resultsdb import (
    accounts_q,
    db,
    jobs_q,
    kernels_q,
    machines_q,
    regressions_q,
    series_q,
    trees_q,
)
from stackbench.resultsdb.tables import render as tables

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from stackbench.resultsdb.models import Series

# the "-- " separator (with its space) lets mail clients strip the signature in replies
SIGNATURE = "\n-- \nstackbench\n"


@dataclass
class Mail:
    kind: str
    key: str
    to: list[str]
    subject: str
    body: str
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)


def _table(eng: Engine, refs: list[str], **kw) -> str:
    try:
        return tables.render(eng, refs, **kw).rstrip("\n")
    except StackbenchError as exc:
        return f"(no table: {exc})"


# the seeds' layouts, in a report only when the series ran jobs they read
SEED_TABLES = (
    ("Allocation latency (seed 001's layout):", "alloc-latency"),
    ("Order-N success beside compaction counters (seed 003's layout):", "order-success"),
)


def seed_tables(eng: Engine, refs: list[str]) -> list[str]:
    out: list[str] = []
    for title, style in SEED_TABLES:
        try:
            text = tables.render(eng, refs, style=style).rstrip("\n")
        except StackbenchError:
            continue  # no such runs in this series
        out += ["", title, "", text]
    return out


def area_of(subject: str) -> str:
    """The subsystem prefix of a commit subject: 'mm/compaction: x' -> 'mm/compaction'."""
    m = re.match(r"\s*(?:\[[^\]]*\]\s*)*([\w./-]+(?:,\s*[\w./-]+)*):", subject)
    return m.group(1) if m else "unknown"


def _commit_refs(s: Session, series: Series) -> list[str]:
    refs = series_q.kernel_commits(s, series.id)
    if series.base_commit and series.base_commit not in refs:
        refs.insert(0, series.base_commit)
    return refs


def series_report(eng: Engine, series_id: int, cfg: MailConfig | None = None) -> Mail:
    cfg = cfg or from_env()
    with db.session(eng) as s:
        series = series_q.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        patches = list(series.patches)
        owner = accounts_q.user(s, series.owner_id) if series.owner_id else None
        owner_email = owner.email if owner is not None and owner.email_verified else ""
        if owner_email and not is_mail_address(owner_email):
            owner_email = ""
        refs = _commit_refs(s, series)
    total = len(patches)
    version = f"v{series.version} " if series.version and series.version > 1 else ""
    subject = f"Re: [PATCH {version}0/{total}] {series.title}" if total else series.title
    lines = [
        f"stackbench ran {series.title!s} ({total} patches) on {series.base_ref or 'its base'}.",
        f"State: {series.state}.  Details: {cfg.public_url}/series/{series.id}",
        "",
    ]
    for p in patches:
        sha = (p.commit_sha or "")[:12] or "-" * 12
        lines.append(f"  {sha} {p.idx}/{p.total} {p.subject}  [{p.state}]")
    lines.append("")
    if len(refs) >= 2:
        lines += ["Verdicts (stackbench: change, 95% interval, FDR-controlled):", ""]
        lines.append(_table(eng, refs, style="stackbench"))
        lines += ["", "LKP comparison (lkp ncompare):", ""]
        lines.append(_table(eng, refs, style="lkp"))
        lines += ["", "mmtests comparison (thpscale):", ""]
        lines.append(_table(eng, refs, style="mmtests", suite="thpscale"))
        lines += seed_tables(eng, refs)
    else:
        lines.append("No results to compare yet.")
    lines.append("")
    # never the From of the mbox (anyone can write any address there): the list and the
    # submitting account's own verified address only
    to = [owner_email] if owner_email else []
    if cfg.list_addr:
        to.append(cfg.list_addr)
    refs_hdr = [r for r in (series.in_reply_to, series.message_id) if r]
    return Mail(
        kind="series",
        key=f"series-report:{series.id}:{series.state}",
        to=to,
        subject=subject,
        body="\n".join(lines) + SIGNATURE,
        in_reply_to=series.message_id,
        references=refs_hdr,
    )


def _direction_words(change_pct: float | None, higher_is_better: bool | None) -> str:
    if change_pct is None:
        return "a change"
    size = f"{abs(change_pct):.1f}%"
    if higher_is_better is None:
        return f"a {size} {'increase' if change_pct > 0 else 'decrease'}"
    worse = (change_pct < 0) if higher_is_better else (change_pct > 0)
    move = "drop" if change_pct < 0 else "rise"
    better = "higher" if higher_is_better else "lower"
    verdict = "worse" if worse else "better"
    return f"a {size} {move} ({verdict}: {better} is better for this metric)"


def regression_report(
    eng: Engine,
    regression_id: int,
    cfg: MailConfig | None = None,
    *,
    job_spec: Callable[[str, dict[str, Any]], str],
) -> Mail:
    """The 0-day-robot-shaped report of one regression: the culprit (or the bisect's
    candidates when it could not decide), the test and machine, culprit vs parent, the other
    metrics the same commit made worse, and how to reproduce it with stackbench.

    ``job_spec(suite, params)`` writes the reproducer's ``--job`` (jobs' job-spec module:
    mail sits below jobs in the component map, so the caller passes it in)."""
    cfg = cfg or from_env()
    with db.session(eng) as s:
        reg = regressions_q.get(s, regression_id)
        if reg is None:
            raise NotFoundError(f"no regression {regression_id}")
        metric = jobs_q.metric(s, reg.metric_id)
        job = jobs_q.get(s, reg.job_id)
        good = kernels_q.get(s, reg.good_build_id)
        bad = kernels_q.get(s, reg.bad_build_id)
        tree = trees_q.get(s, reg.tree_id) if reg.tree_id else None
        bis = regressions_q.latest_bisect(s, reg.id)
        culprit_sha = reg.culprit or (bis.culprit if bis else None) or bad.commit
        culprit = kernels_q.by_commit(s, culprit_sha) or bad
        patch = series_q.patch_of_commit(s, culprit_sha)
        machine = machines_q.first_of_build(s, bad.id)
        also = []
        for rid in (reg.meta or {}).get("also", []):
            other = regressions_q.get(s, rid)
            if other is not None:
                om = jobs_q.metric(s, other.metric_id)
                also.append((om.name, other.change_pct, om.higher_is_better))
    subject_line = (
        (patch.subject if patch else "") or culprit.meta.get("subject", "") or culprit.name
    )
    found = bis is None or bis.state == "found"
    parent_sha = (bis.meta.get("parent") if bis else None) or good.commit
    change = f"{reg.change_pct:+.1f}%" if reg.change_pct is not None else "?"
    tree_label = f"{tree.name if tree else 'local'}:{reg.branch or 'series'}"
    subject = (
        f"[{tree_label}] [{area_of(subject_line)}] {culprit_sha[:10]}: "
        f"{metric.name} {change} regression"
    )
    params = "\n".join(f"\t{k}: {v}" for k, v in sorted((job.params or {}).items()))
    words = _direction_words(reg.change_pct, metric.higher_is_better)
    conf = f" (confidence {reg.confidence:.0%})" if reg.confidence is not None else ""
    what = "commit" if found else "bad commit (bisect inconclusive)"
    mach = (
        f"{machine.name} ({machine.kind}, {machine.cpus or '?'} CPUs, "
        f"{machine.memory_mb or '?'} MB)"
        if machine
        else "-"
    )
    body = f"""\
Hello,

stackbench noticed {words} of {metric.name}{conf} on:

{what}: {culprit_sha} ("{subject_line}")
tree:   {tree.name if tree else "-"} {reg.branch}
good:   {good.commit} (the branch's last good baseline)
bad:    {bad.commit}

testcase: {job.suite}
test:     {job.test}
machine:  {mach}
parameters:

{params}
"""
    if also:
        body += "\nThe same commit also made these metrics of the test worse:\n\n"
        for name, pct, hib in also:
            body += f"  {name}: {_direction_words(pct, hib)}\n"
    if found:
        body += f"""
The tables compare the culprit with its parent ({parent_sha[:12]}).

{_table(eng, [parent_sha, culprit_sha], style="lkp", all_rows=True)}

{_table(eng, [parent_sha, culprit_sha], style="stackbench")}
"""
    else:
        cands = (bis.meta or {}).get("candidates") or []
        body += "\nThe bisect could not name one commit"
        msg = (bis.meta or {}).get("message") if bis else ""
        body += f" ({msg})" if msg else ""
        body += ". Candidates:\n\n" + "".join(f"  {c[:12]}\n" for c in cands)
        body += f"""
The tables compare the good and bad kernels.

{_table(eng, [good.commit, bad.commit], style="lkp", all_rows=True)}
"""
    if bis is not None:
        body += f"\nBisect: {bis.state}, {bis.kernels_built} kernel(s) built"
        if bis.confidence is not None:
            body += f", culprit confirmed against its parent with confidence {bis.confidence:.1%}"
        body += "\n"
        for step in bis.steps or []:
            pct = step.get("change_pct")
            pct_s = f" {pct:+.1f}%" if isinstance(pct, int | float) else ""
            why = f" ({step['reason']})" if step.get("reason") else ""
            body += (
                f"  {str(step.get('commit', ''))[:12]} {step.get('verdict', '')}{pct_s}"
                f", {step.get('runs', 0)} runs{why}\n"
            )
    tree_opt = f" --tree {tree.name}" if tree else ""
    spec = job_spec(job.suite, job.params or {})
    body += textwrap.dedent(f"""
        To reproduce:

          stackbench bisect{tree_opt} --good {parent_sha[:12]} --bad {culprit_sha[:12]} \\
              --job '{spec}' --metric '{metric.name}'

        Details: {cfg.public_url}/regressions/{reg.id}
        """)
    body += SIGNATURE
    to = [cfg.list_addr] if cfg.list_addr else []
    if patch and patch.author_email:
        to.insert(0, patch.author_email)
    return Mail(
        kind="regression",
        key=f"regression-report:{reg.id}",
        to=to,
        subject=subject,
        body=body,
        in_reply_to=patch.message_id if patch else None,
        references=[patch.message_id] if patch and patch.message_id else [],
    )


def nightly_summary(eng: Engine, summary: dict, cfg: MailConfig | None = None) -> Mail:
    """``summary``: date, branches [{tree, branch, head, baseline, state, message, jobs,
    regressions: [ids], known: [ids], bisects: [{regression, state, culprit, ...}]}] as
    produced by stackbench.jobs.nightly."""
    cfg = cfg or from_env()
    branches = summary.get("branches", [])
    lines = [f"stackbench nightly, {summary['date']}", ""]
    total_regs = 0
    fingerprint = []
    with db.session(eng) as s:
        for b in branches:
            regs = list(b.get("regressions", []))
            total_regs += len(regs)
            fingerprint.append(f"{b['tree']}:{b['branch']}@{b.get('head', '')}={b.get('state')}")
            head = str(b.get("head", ""))[:12]
            base = str(b.get("baseline", ""))[:12]
            lines.append(f"{b['tree']}:{b['branch']}  head {head or '-'}  baseline {base or '-'}")
            lines.append(f"  {b.get('state', '?')}: {b.get('message', '')}".rstrip(": "))
            for j in b.get("jobs", []):
                verdicts = ", ".join(f"{n} {k}" for k, n in sorted(j.get("verdicts", {}).items()))
                runs = f"{j.get('runs_base', '-')}/{j.get('runs_head', '-')} runs"
                lines.append(f"  ran {j['job']}: {runs}" + (f"; {verdicts}" if verdicts else ""))
            for rid in regs:
                lines.append("  regressed: " + _regression_line(s, rid))
                lines.append(f"    {cfg.public_url}/regressions/{rid}")
            for rid in b.get("known", []):
                lines.append("  still open: " + _regression_line(s, rid))
            for bi in b.get("bisects", []):
                lines.append("  bisected: " + _bisect_line(bi))
            if b.get("state") != "skipped":
                lines.append(
                    f"  {b.get('kernels_built', 0)} kernel(s) built, {b.get('seconds', 0)}s"
                )
            lines.append("")
    digest = hashlib.sha256("\n".join(fingerprint).encode()).hexdigest()[:12]
    return Mail(
        kind="nightly",
        key=f"nightly:{summary['date']}:{digest}",
        to=[cfg.list_addr] if cfg.list_addr else [],
        subject=f"[stackbench nightly] {summary['date']}: {total_regs} new regression(s)",
        body="\n".join(lines) + SIGNATURE,
    )


def _regression_line(s: Session, rid: int) -> str:
    reg = regressions_q.get(s, rid)
    if reg is None:
        return f"regression {rid} (gone)"
    metric = jobs_q.metric(s, reg.metric_id)
    job = jobs_q.get(s, reg.job_id)
    words = _direction_words(reg.change_pct, metric.higher_is_better)
    return f"{metric.name} ({job.suite} {job.test}): {words} [{reg.state}]"


def _bisect_line(b: dict) -> str:
    state = b.get("state", "?")
    out = f"regression {b.get('regression')}: {state}"
    if b.get("culprit"):
        out += f", culprit {str(b['culprit'])[:12]}"
        if b.get("confidence") is not None:
            out += f" (confidence {b['confidence']:.1%})"
    elif b.get("candidates"):
        out += ", candidates " + " ".join(str(c)[:12] for c in b["candidates"])
    if b.get("message"):
        out += f": {b['message']}"
    if "kernels_built" in b:
        out += f"; {b['kernels_built']} kernel(s) built"
    return out


def queue(eng: Engine, mail: Mail) -> int:
    from stackbench.mail import outbox

    if not mail.to:
        raise StackbenchError(f"{mail.kind} mail has no recipient (set STACKBENCH_MAIL_LIST)")
    return outbox.enqueue(
        eng,
        kind=mail.kind,
        key=mail.key,
        to=mail.to,
        subject=mail.subject,
        body=mail.body,
        in_reply_to=mail.in_reply_to,
        references=mail.references,
    )
