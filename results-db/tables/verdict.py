"""stackbench's own comparison table: the verdicts that matter, each one that can be trusted.

The first kernel is the base. One block per job (suite, test, parameters), in the same job
order as the LKP table; inside it one sub-block per later kernel. By default a block lists
its changed and undecided headline metrics (:func:`verdict.is_headline`) and its changed
THP/compaction counters, largest change first, and one line counting the rows it hides; ``all_rows`` lists every metric by name:

    metric   base   new   of boots   change   interval (its confidence)   verdict   q   boots

* The unit is the BOOT: each run is the mean of its samples, each boot the mean of its runs
  (runs of one boot share its memory layout and the host's load, so they are not
  independent; see :mod:`stackbench.resultsdb.boots`). Base and new are the verdict's own
  figures (:func:`verdict.figures`): the boots the test used, summarised as it summarises
  them, the (trimmed) mean or, for a rank-tested latency, the median; "of boots" names it.
  Every view prints these, so no row shows a mean beside a change of another estimator.
* Each kernel is judged against the base on the two kernels' boots alone
  (:func:`blocks.pair`): paired by round wherever at least three rounds hold both (a box's
  offset, or a host's drift, falls on both kernels of a round alike), unpaired otherwise;
  the other kernels of the table never enter it, so a pair reads the same here, in
  ``compare BASE K``, on the series page, in mails and in the API.
* change is the relative difference of (trimmed) means with the decision's interval at the
  confidence printed beside it (1 - the look's alpha, :meth:`verdict.Policy.look_alpha`);
  for latencies (the rank path) it is the Hodges-Lehmann ratio with its distribution-free
  interval at the same level.
* verdict: ``better`` / ``worse`` (the interval excludes 0 and the change reaches the kind's
  minimum effect; direction from the metric), ``changed`` (no preferred direction), ``~``
  (the interval lies inside +-minimum effect), ``undecided`` (needs more boots: the boots
  column says how many per side), ``n/a`` (a side with fewer than two runs). Significance is
  controlled with Benjamini-Hochberg within the pair's own family: one later kernel against
  the base in one job, its headline metrics one family, its THP/compaction counters and
  free-list summaries another (:func:`group`) and its other metrics a third
  (:func:`verdict.family`), shown or not; q is that adjusted p-value, the same in every view.
  The default view lists the changed counters too, with their interval and q.
"""

from __future__ import annotations

import math
from dataclasses import replace

from stackbench.errors import StackbenchError
from stackbench.resultsdb import blocks, boots, metrics, query, verdict


def _job_order(job: query.JobRow) -> tuple:
    return (job.suite, job.test, sorted((str(k), str(v)) for k, v in (job.params or {}).items()))


def _label(kernel: query.Kernel) -> str:
    if kernel.name and kernel.name != kernel.commit:
        return f"{kernel.name} ({kernel.commit[:12]})"
    return kernel.commit[:12]


def job_title(job: query.JobRow) -> str:
    params = " ".join(
        f"{k}={v}" for k, v in sorted((job.params or {}).items()) if not isinstance(v, dict | list)
    )
    title = job.suite + (f"/{job.test}" if job.test and job.test != job.suite else "")
    extra = [p for p in (params, job.suite_version and f"version {job.suite_version}") if p]
    return title + (f"  {'  '.join(extra)}" if extra else "")


def figure(x: float | None) -> str:
    """A row's base or new figure as every view prints it (the pages use it as a filter)."""
    if x is None:
        return "-"
    if x != 0 and (abs(x) >= 1e12 or abs(x) < 1e-3):
        return f"{x:.4g}"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.2f}"


def _pct(x: float | None) -> str:
    if x is None or math.isinf(x):
        return "-" if x is None else ("+inf" if x > 0 else "-inf")
    return f"{x:+.2f}%"


def _ci(v: verdict.Verdict) -> str:
    if v.ci_low_pct is None or v.ci_high_pct is None:
        return "-"
    lo, hi = _pct(v.ci_low_pct).rstrip("%"), _pct(v.ci_high_pct).rstrip("%")
    return f"[{lo}, {hi}] {v.level_text}".rstrip()


def _q(v: verdict.Verdict) -> str:
    if v.q_value is None:
        return "-"
    return f"{v.q_value:.2g}" if v.q_value < 0.001 else f"{v.q_value:.3f}"


def _runs(v: verdict.Verdict) -> str:
    have = f"{v.n_base}/{v.n_new}" + ("w" if v.warmup_dropped else "")
    return f"{have}>{v.runs_wanted}" if v.runs_wanted else have


HEAD = (
    "metric",
    "base",
    "new",
    "of boots",
    "change",
    "interval, confidence",
    "verdict",
    "q",
    "boots",
)
RIGHT = (False, True, True, False, True, True, False, True, True)


def _format(rows: list[tuple[str, ...]], widths: list[int]) -> list[str]:
    out = []
    for row in rows:
        cells = [
            f"{c:>{w}}" if right else f"{c:<{w}}"
            for c, w, right in zip(row, widths, RIGHT, strict=True)
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def compare(
    ds: query.Dataset, policy: verdict.Policy = verdict.DEFAULT
) -> list[tuple[query.JobRow, query.Kernel, list[tuple[str, float | None, float | None, verdict.Verdict]]]]:  # fmt: skip
    """Verdicts of every (job, later kernel, metric) of the dataset against the first kernel,
    with Benjamini-Hochberg across all of them: [(job, kernel, [(metric, base, new,
    verdict)])] in table order, base and new the verdict's own figures
    (``Verdict.base_est``/``new_est``, :func:`verdict.figures`). Shared with the web pages,
    the API and mails, so every view prints the same figures. Computed once per
    dataset and policy: the comparison page asks for its table and its rows' verdicts, and
    judging every metric is most of that page's first view."""
    state = (policy, len(ds.runs), len(ds.kernels), id(ds._samples))
    kept = ds.__dict__.get("_verdict_blocks")
    if kept is None or kept[0] != state or kept[0][0] is not policy:
        kept = (state, _compare(ds, policy))
        ds.__dict__["_verdict_blocks"] = kept
    return [(job, kernel, list(rows)) for job, kernel, rows in kept[1]]


def _compare(ds: query.Dataset, policy: verdict.Policy) -> list:
    base = ds.kernels[0]
    boot_of = {rid: boots.boot_key(r) for rid, r in ds.runs.items()}
    rounds: dict = {}  # each round numbered once: an int is cheaper to look up per metric
    block_of = {
        boot_of[rid]: rounds.setdefault(blk, len(rounds))
        for rid, r in ds.runs.items()
        if (blk := blocks.round_of(r))
    }
    box = {i: blocks.box_of(blk) for blk, i in rounds.items()}
    designs: dict[tuple[int, int, str], blocks.Pair] = {}
    pairs: dict[tuple[int, int, str], tuple] = {}
    groups: list[tuple[query.JobRow, int, list[str]]] = []
    by_job: dict[int, list[tuple[int, query.MetricRow]]] = {}
    for job_id, metric_id in ds.values:
        by_job.setdefault(job_id, []).append((metric_id, ds.metrics[metric_id]))
    coarse = ds.coarse_clocks()
    untested: dict[tuple[int, int, str], verdict.Verdict] = {}
    for job_id in sorted(by_job, key=lambda j: _job_order(ds.jobs[j])):
        job = ds.jobs[job_id]
        metrics = sorted(by_job[job_id], key=lambda m: m[1].name)
        base_side: dict[int, dict] = {}
        for idx, kernel in enumerate(ds.kernels[1:], start=1):
            names = []
            for metric_id, m in metrics:
                per_build = ds.values[(job_id, metric_id)]
                if metric_id not in base_side:
                    base_side[metric_id] = boots.per_boot(per_build.get(base.id, {}), boot_of)
                b = base_side[metric_id]
                n = boots.per_boot(per_build.get(kernel.id, {}), boot_of)
                if not b and not n:
                    continue
                key = (job_id, idx, m.name)
                names.append(m.name)
                if m.kind == "latency" and (
                    (job_id, base.id) in coarse or (job_id, kernel.id) in coarse
                ):
                    untested[key] = verdict.coarse_clock(m.name, b, n)
                    continue
                pairs[key] = (b, n, m.higher_is_better, m.kind)
                if block_of and m.kind not in policy.rank_kinds:
                    # the pair's own rounds and boxes decide how it is compared: nothing of
                    # the other kernels on the page enters its verdict
                    designs[key] = pr = blocks.pair(b, n, block_of, box)
                    pairs[key] = (pr.base, pr.new, m.higher_is_better, m.kind, pr.paired)
            if names:
                groups.append((job, idx, names))
    flat = {f"{j}\0{i}\0{name}": p for (j, i, name), p in pairs.items()}
    families = {
        f"{j}\0{i}\0{name}": verdict.family(j, i, group(name, p[3], p[2]))
        for (j, i, name), p in pairs.items()
    }
    judged = verdict.judge_many(flat, policy, families)
    out = []
    for job, idx, names in groups:
        rows = []
        for name in names:
            key = (job.id, idx, name)
            v = untested.get(key) or judged[f"{job.id}\0{idx}\0{name}"]
            if key in designs:
                v = _designed(v, designs[key])
            v.metric = name
            rows.append((name, v.base_est, v.new_est, v))
        out.append((job, ds.kernels[idx], rows))
    return out


HEADLINE, COUNTER, OTHER = "headline", "counter", "other"


def group(name: str, kind: str, higher_is_better: bool | None) -> str:
    """The metric's false-discovery group within its pair and job: a headline metric
    (:func:`verdict.is_headline`), a THP/compaction counter or free-list summary
    (:func:`metrics.is_counter`), or any other metric."""
    if verdict.is_headline(name, kind, higher_is_better):
        return HEADLINE
    return COUNTER if metrics.is_counter(name) else OTHER


def _designed(v: verdict.Verdict, p: blocks.Pair) -> verdict.Verdict:
    """The verdict of a pair whose runs carry rounds, saying how it was compared: paired by
    round (its boots and runs those of the rounds holding both kernels) or unpaired, and why."""
    if v.outcome == "n/a" or v.test == "one boot per side":
        return v
    if not p.paired:
        return replace(v, test=p.test(v.test))
    return replace(
        v, test=p.test(v.test), runs_base=p.runs_base, runs_new=p.runs_new,
        warmup_dropped=p.warmup_dropped,
    )  # fmt: skip


def blocking(ds: query.Dataset, judged: list | None = None) -> str:
    """One line saying how many boxes contributed and how the verdicts treated the rounds:
    paired by round where at least three rounds hold the pair (each round ran whole on one
    box, so the box's offset and the host's drift fall on both kernels of it alike),
    unpaired with fewer; "" when no run carries a round (imports: every boot stands
    alone)."""
    if not any(blocks.round_of(r) for r in ds.runs.values()):
        return ""
    found = [v for _j, _k, rows in (judged or compare(ds)) for *_x, v in rows]
    n_paired = sum(v.test.startswith(blocks.PAIRED) for v in found)
    n_few = sum("rounds hold both kernels)" in v.test for v in found)
    boxes = ds.boxes()
    where = f"{len(boxes)} box{'' if len(boxes) == 1 else 'es'} ({', '.join(boxes)})"
    out = f"pairs: {n_paired} of {len(found)} rows paired by round, on {where}"
    if n_few:
        out += f"; {n_few} unpaired: fewer than {blocks.MIN_ROUNDS} rounds hold both kernels"
    return out


Row = tuple[str, float | None, float | None, verdict.Verdict]


def _shown(rows: list[Row], headline: set[str], all_rows: bool) -> tuple[list[Row], str]:
    """The rows of one block the default view shows (changed and undecided headline metrics
    and changed THP/compaction counters, largest change first) and the line that counts the
    others ("" when none is hidden)."""
    if all_rows:
        return rows, ""
    keep = [
        r
        for r in rows
        if (r[0] in headline and r[3].outcome in ("changed", "undecided"))
        or (metrics.is_counter(r[0]) and r[3].outcome == "changed")
    ]
    keep.sort(key=lambda r: (-abs(r[3].change_pct) if r[3].change_pct is not None else 1, r[0]))
    hidden = [r for r in rows if r not in keep]
    if not hidden:
        return keep, ""
    parts = []
    for title, group in (
        ("headline", [r for r in hidden if r[0] in headline]),
        ("other metrics", [r for r in hidden if r[0] not in headline]),
    ):
        counts: dict[str, int] = {}
        for r in group:
            counts[r[3].label] = counts.get(r[3].label, 0) + 1
        if counts:
            inner = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
            parts.append(f"{title}: {inner}")
    return keep, f"  {len(hidden)} more rows not shown ({'; '.join(parts)}); --all lists them"


def render(
    ds: query.Dataset,
    policy: verdict.Policy = verdict.DEFAULT,
    *,
    all_rows: bool = False,
    flags: dict[int, str] | None = None,
) -> str:
    """The table. By default each block lists its changed and undecided headline metrics
    (:func:`verdict.is_headline`), largest change first, and one line counting the rest;
    ``all_rows`` lists every metric by name. ``flags``: a note for a kernel's line (build
    id -> text), e.g. that the benchmarks did not run its patch's code."""
    if len(ds.kernels) < 2:
        raise StackbenchError(
            "the stackbench table compares kernels: give a base and at least one more"
        )
    judged = compare(ds, policy)
    if not judged:
        raise StackbenchError("no metric has results for the base and a later kernel")
    headline = {
        m.name
        for m in ds.metrics.values()
        if verdict.is_headline(m.name, m.kind, m.higher_is_better)
    }
    base = ds.kernels[0]
    n_rows = sum(len(rows) for _j, _k, rows in judged)
    shown = [_shown(rows, headline, all_rows) for _j, _k, rows in judged]
    table_rows: list[list[tuple[str, ...]]] = []
    for rows, _rest in shown:
        table_rows.append(
            [
                (
                    name,
                    figure(mb),
                    figure(mn),
                    v.estimator or "-",
                    _pct(v.change_pct),
                    _ci(v),
                    v.label,
                    _q(v),
                    _runs(v),
                )
                for name, mb, mn, v in rows
            ]
        )
    widths = [len(h) for h in HEAD]
    for rows in table_rows:
        for row in rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines: list[str] = []
    undecided = 0
    last_job = None
    for (job, kernel, _rows), (rows, rest), formatted in zip(
        judged, shown, table_rows, strict=True
    ):
        if job.id != last_job:
            if lines:
                lines.append("")
            lines.append(f"== {job_title(job)}")
            lines.append(f"   base: {_label(base)}")
            last_job = job.id
        flag = (flags or {}).get(kernel.id)
        lines.append(f"   new:  {_label(kernel)}" + (f"  [{flag}]" if flag else ""))
        if formatted:
            lines.extend(_format([HEAD], widths))
            lines.extend(_format(formatted, widths))
        else:
            lines.append("  no headline metric changed or undecided")
        if rest:
            lines.append(rest)
        undecided = max(undecided, verdict.runs_needed([r[3] for r in rows], policy))
    lines.append("")
    lines.append(
        "base, new: the boots the verdict used, summarised as its test does (of boots: the "
        "mean, 5%-trimmed from 20 boots; the median for a rank-tested latency)"
    )
    lines.append(
        "change: difference of boot means (5%-trimmed: one per end from 20 boots) relative to "
        "the base, with the decision's interval at the confidence shown (paired by round: "
        "the paired t on the rounds' differences; without rounds, Welch's test; latency: "
        "Hodges-Lehmann ratio, rank test)"
    )
    lines.append(
        "boots: base/new boots, the unit of the test (the runs of a boot are averaged first; "
        "w: the first run of each boot differed measurably and was dropped)"
    )
    lines.append(
        f"verdict: Benjamini-Hochberg at q={policy.fdr_q:g} per kernel and job, headline "
        "metrics one family, THP/compaction counters another (listed when changed) and the "
        f"other metrics a third ({n_rows} rows), "
        f"alpha={policy.alpha:g} per metric spent over the looks "
        f"{'/'.join(map(str, policy.schedule()))} (O'Brien-Fleming); changed = the interval "
        "excludes 0 and the change reaches the kind's minimum effect, ~ = the interval lies "
        "inside +-minimum effect"
    )
    note = blocking(ds, judged)
    if note:
        lines.append(note + " (latencies: rank test, unpaired)")
    coarse = sorted(set(ds.coarse_clocks().values()))
    if coarse:
        lines.append(
            "undecided (coarse clock): latencies timed with a clock too coarse to compare "
            f"({'; '.join(coarse)}), no verdict on them"
        )
    if undecided:
        what = "undecided rows" if all_rows else "undecided headline metrics"
        lines.append(f"{what} need {undecided} boots per side to decide.")
    return "\n".join(lines) + "\n"
