"""The three report mails, rendered from the same data and tables as the web pages."""

from __future__ import annotations

import hashlib
import math
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
    aa,
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
    # (file name, text) of files sent with the mail: a report's reproducer
    attachments: list[tuple[str, str]] = field(default_factory=list)
    # the commit the report is about (a regression's, else None): its reproducer's kernel
    commit: str | None = None


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


def recipients(s: Session, series: Series | None, list_addr: str) -> list[str]:
    """Who a report on SERIES goes to, the one rule of every report mail (``[]``: nobody).

    A series posted to a mailing list: the report addresses of the list's configuration,
    and its author only where that configuration says ``cc_author``. Any other: the
    submitting account's address once verified, and LIST_ADDR (``STACKBENCH_MAIL_LIST``).
    Never an unverified address and never the From: of the mbox otherwise, since anyone can
    write any address there. No series (a tracked branch's commit): LIST_ADDR alone."""
    posted = (series.meta or {}).get("list") if series is not None else None
    if isinstance(posted, dict):
        out = list(posted.get("report_to") or [])
        if posted.get("cc_author") and is_mail_address(series.submitter_email or ""):
            out.append(series.submitter_email)
        return list(dict.fromkeys(out))
    owner = accounts_q.user(s, series.owner_id) if series and series.owner_id else None
    mine = owner.email if owner is not None and owner.email_verified else ""
    out = [mine] if is_mail_address(mine) else []
    if list_addr:
        out.append(list_addr)
    return list(dict.fromkeys(out))


def series_report(eng: Engine, series_id: int, cfg: MailConfig | None = None) -> Mail:
    cfg = cfg or from_env()
    with db.session(eng) as s:
        series = series_q.get(s, series_id)
        if series is None:
            raise NotFoundError(f"no series {series_id}")
        patches = list(series.patches)
        to = recipients(s, series, cfg.list_addr)
        refs = _commit_refs(s, series)
    total = len(patches)
    version = f"v{series.version} " if series.version and series.version > 1 else ""
    subject = f"Re: [PATCH {version}0/{total}] {series.title}" if total else series.title
    posted = (series.meta or {}).get("list")
    posted = posted if isinstance(posted, dict) else None
    url = f"{cfg.public_url}/series/{series.id}"
    ds = _dataset(eng, refs) if len(refs) >= 2 else None
    worst = worst_change(ds) if posted else None
    if posted:
        # a reply in the list's own thread: LKP's subject for a regression, else Re:
        subject = f"Re: {posted.get('subject') or subject.removeprefix('Re: ')}"
        if worst:
            sha, metric, change = worst
            culprit = next((p.subject for p in patches if p.commit_sha == sha), series.title)
            subject = (
                f"[{posted.get('tree') or 'tree'}] [{area_of(culprit)}] {sha[:10]}: "
                f"{metric} {change:+.1f}% regression"
            )
    lines = [
        f"stackbench ran {series.title!s} ({total} patches) on {series.base_ref or 'its base'}.",
        f"State: {series.state}.  Details: {url}",
        "",
    ]
    if series.state in ("apply-failed", "failed") and series.error:
        lines[2:2] = [f"Why: {series.error.splitlines()[0][:500]}", ""]
    for p in patches:
        sha = (p.commit_sha or "")[:12] or "-" * 12
        lines.append(f"  {sha} {p.idx}/{p.total} {p.subject}  [{p.state}]")
    lines.append("")
    if len(refs) >= 2:
        lines += ["Verdicts (stackbench: change, the decision's interval, FDR-controlled):", ""]
        lines.append(_table(eng, refs, style="stackbench"))
        lines += ["", "LKP comparison (lkp ncompare):", ""]
        lines.append(_table(eng, refs, style="lkp"))
        lines += ["", "mmtests comparison (thpscale):", ""]
        lines.append(_table(eng, refs, style="mmtests", suite="thpscale"))
        lines += seed_tables(eng, refs)
        if ds is not None:
            with db.session(eng) as s:
                aa_rows = aa.of_machines(s, {r.machine for r in ds.runs.values()})
            lines += evidence_lines(ds, aa_rows)
    else:
        lines.append("No results to compare yet.")
    lines.append("")
    lines += claims_section(eng, series.id)
    previous = (series.meta or {}).get("previous_version")
    if posted and previous:
        lines += _against_previous(eng, previous, refs)
    if posted:
        lines += _tags(cfg, url, worst is not None)
    refs_hdr = [r for r in (series.in_reply_to, series.message_id) if r]
    return Mail(
        kind="series",
        key=f"series-report:{series.id}:{series.state}",
        to=to,
        subject=subject,
        body="\n".join(lines) + SIGNATURE,
        in_reply_to=series.message_id,
        references=refs_hdr,
        commit=worst[0] if worst else None,
    )


def claims_section(eng: Engine, series_id: int) -> list[str]:
    """The cover letter's claims and what was measured for each ([] when it kept none)."""
    from stackbench.resultsdb import claims_check
    from stackbench.resultsdb.tables import claims as claims_text

    report = claims_check.check_series(eng, series_id)
    return [*claims_text.lines(report), ""] if report is not None else []


def _dataset(eng: Engine, refs: list[str]) -> Any:
    from stackbench.resultsdb import query

    try:
        with eng.connect() as conn:
            ds = query.load(conn, query.resolve_kernels(conn, refs))
    except StackbenchError:
        return None
    return ds if len(ds.kernels) >= 2 and ds.runs else None


def evidence_lines(ds: Any, aa_rows: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The machine's noise beside each headline metric, with its nightly A/A figures
    (``aa_rows``: :func:`aa.of_machines`), and the counters that show the patched code ran
    (:mod:`stackbench.resultsdb.evidence`)."""
    from stackbench.resultsdb import evidence, verdict
    from stackbench.resultsdb.tables.verdict import figure

    out = ["", "Noise of each machine (the base kernel, boot to boot) and the smallest change"]
    out += [f"the verdict calls with {100 * verdict.POWER:.0f}% power at that many boots:", ""]
    for n in evidence.noise(ds):
        unit = " points" if n.absolute else "%"
        scale = 1 if n.absolute else 100
        shown = "n/a (one boot)" if n.cov is None else f"{n.cov * scale:.1f}{unit}"
        det = "n/a" if n.detectable is None else f"{n.detectable * scale:.1f}{unit}"
        if n.detectable == math.inf:
            det = f"none at {n.boots} boots (the look's alpha needs more)"
        units = "rounds paired" if n.design == evidence.PAIRED else "boots"
        out.append(
            f"  {n.metric} ({n.job}) on {n.machine}: {n.boots} {units}, noise {shown}, "
            f"smallest detectable change {det}"
        )
        if (n.machine, n.metric) in aa_rows:
            out.append(f"    {aa.describe(aa_rows[(n.machine, n.metric)])}")
    found = evidence.counters(ds)
    out.append("")
    if not found:
        return [*out, "The runs recorded no compaction or THP counter.", ""]
    changed = [c for c in found if c.verdict.outcome == "changed"]
    if not changed:
        out.append(f"None of the {len(found)} compaction and THP counters judged changed against")
        out.append("the base: the patched paths may not have run in this benchmark.")
        return [*out, ""]
    out.append("Compaction and THP counters that changed (boots as units, the counters one")
    out.append("false-discovery family per kernel and job):")
    out.append("")
    for c in changed:
        v = c.verdict
        interval = ""
        if v.ci_low_pct is not None and v.ci_high_pct is not None:
            interval = f" [{v.ci_low_pct:+.1f}%, {v.ci_high_pct:+.1f}%] at {v.level_text}"
        # the figures the stackbench table prints for the row, named
        shown = f"{figure(c.base_est)} -> {figure(c.new_est)} ({v.estimator}s)"
        change = "" if v.change_pct is None else f" {v.change_pct:+.1f}%"
        out.append(f"  {c.kernel} {c.name} ({c.job}): {shown}{change}{interval}, q={v.q_value:.3g}")
    return [*out, ""]


def worst_change(ds: Any) -> tuple[str, str, float] | None:
    """(commit, metric, change %) of the first commit after the base with a headline metric
    judged worse (its largest change), by the same verdicts as the stackbench table."""
    from stackbench.resultsdb import verdict
    from stackbench.resultsdb.tables import verdict as judged_table

    if ds is None:
        return None
    found: dict[str, tuple[str, float]] = {}
    for _job, kernel, rows in judged_table.compare(ds):
        for name, _base, _new, v in rows:
            metric = ds_metric(ds, name)
            headline = metric is None or verdict.is_headline(
                name, metric.kind, metric.higher_is_better
            )
            if v.label != "worse" or v.change_pct is None or not headline:
                continue
            best = found.get(kernel.commit)
            if best is None or abs(v.change_pct) > abs(best[1]):
                found[kernel.commit] = (name, v.change_pct)
    for k in ds.kernels[1:]:
        if k.commit in found:
            return (k.commit, *found[k.commit])
    return None


def ds_metric(ds: Any, name: str) -> Any:
    return next((m for m in ds.metrics.values() if m.name == name), None)


def _against_previous(eng: Engine, previous_id: int, refs: list[str]) -> list[str]:
    """What changed against the previous version's measurements: its top commit beside
    this version's."""
    with db.session(eng) as s:
        prev = series_q.get(s, previous_id)
        prev_refs = _commit_refs(s, prev) if prev is not None else []
    if prev is None or len(prev_refs) < 2 or len(refs) < 2:
        return [f"No measurements of the previous version (series #{previous_id}) to compare.", ""]
    return [
        f"Against v{prev.version} (series #{prev.id}), its top commit then this version's:",
        "",
        _table(eng, [prev_refs[-1], refs[-1]], style="stackbench"),
        "",
    ]


def _tags(cfg: MailConfig, url: str, regression: bool) -> list[str]:
    robot = cfg.sender
    if not regression:
        return [f"Link: {url}", ""]
    return [
        "If you fix the issue in a separate patch/commit (i.e. not just a new version of",
        "the same patch/commit), kindly add following tags",
        f"| Reported-by: {robot}",
        f"| Closes: {url}",
        "",
    ]


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


def _began(s: Session, reg: Any) -> tuple[str, int | None, bool] | None:
    """The "began:" line of a nightly regression (the night its change began, that night's
    date and the commit range), the tracked branch's id for the history link, and whether a
    change point dated it; None for a regression that no night dates."""
    night = (reg.meta or {}).get("change_night")
    if night is None:
        return None
    row = next(
        (b for b in trees_q.branches(s) if b.tree_id == reg.tree_id and b.branch == reg.branch),
        None,
    )
    nights = ((row.meta or {}).get("nights") or []) if row else []
    when = nights[night].get("at", "")[:10] if night < len(nights) else ""
    first = nights[night]["head"] if night < len(nights) else ""
    last = nights[night - 1]["head"] if 0 < night <= len(nights) else ""
    dated = bool((reg.meta or {}).get("changepoint"))
    how = "a change point over the branch's nights" if dated else "the first look"
    line = f"began:  night {night + 1} of the branch's history"
    line += f" ({when})" if when else ""
    line += f", commits {last[:12]}..{first[:12]}" if last and first else ""
    return f"{line}, dated by {how}\n", row.id if row else None, dated


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
        # a commit of a submitted series: that series' recipients; a tracked branch's: the list
        to = recipients(s, patch.series if patch else None, cfg.list_addr)
        machine = machines_q.first_of_build(s, bad.id)
        # the machine's own noise on this metric, from its nightly A/A
        noise = aa.of_machines(s, [machine.name] if machine else []).get(
            (machine.name if machine else "", metric.name)
        )
        began = _began(s, reg)
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
    noise_line = f"\nnoise:    {aa.describe(noise)}" if noise else ""
    body = f"""\
Hello,

stackbench noticed {words} of {metric.name}{conf} on:

{what}: {culprit_sha} ("{subject_line}")
tree:   {tree.name if tree else "-"} {reg.branch}
good:   {good.commit} ({"the last night before the change" if began and began[2] else "the branch's last good baseline"})
bad:    {bad.commit}
{began[0] if began else ""}
testcase: {job.suite}
test:     {job.test}
machine:  {mach}{noise_line}
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
    if began and began[1] is not None:
        body += f"History: {cfg.public_url}/branches/{began[1]}/history\n"
    body += SIGNATURE
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
    produced by stackbench.jobs.tracking.nightly."""
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
        # a machine its A/A put in quarantine takes no rounds until a healthy A/A
        for m in machines_q.listing(s):
            q = (m.meta or {}).get("quarantine")
            if q:
                lines.append(
                    f"quarantined: {m.name} since {q['since'][:16]}: {'; '.join(q['why'])}"
                )
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
        attachments=mail.attachments,
    )
