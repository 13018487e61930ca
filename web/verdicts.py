"""Verdicts for the comparison page, from :mod:`stackbench.resultsdb.verdict` so the page
highlights exactly what the stackbench table says (:func:`stackbench.resultsdb.tables.verdict.
compare`): each later kernel against the base, one value per boot, false-discovery control
per kernel and job, headline metrics one family and the other metrics another."""

from __future__ import annotations

from typing import Any

from stackbench.resultsdb import query, verdict

HIGHLIGHT = {"better", "worse", "changed"}


def _as_dict(v: verdict.Verdict) -> dict[str, Any]:
    return {
        "verdict": v.label,
        "outcome": v.outcome,
        "direction": v.direction,
        # the pair's own figures, the ones the change is of (tables.verdict.compare)
        "base_est": v.base_est,
        "new_est": v.new_est,
        "estimator": v.estimator,
        "change_pct": v.change_pct,
        "ci": [v.ci_low_pct, v.ci_high_pct],
        "level": v.level,
        "p": v.p_value,
        "q": v.q_value,
        "test": v.test,
        "runs_wanted": v.runs_wanted,
    }


def judge_rows(ds: query.Dataset, rows: list[dict[str, Any]]) -> None:
    """Fill ``row["verdicts"]`` (one per kernel after the base) and ``row["cls"]`` for every
    (job, metric) row, from the same :func:`compare` as the stackbench table."""
    from stackbench.resultsdb.tables import verdict as table

    found: dict[tuple[int, int, str], verdict.Verdict] = {}
    if len(ds.kernels) > 1:
        for job, kernel, judged in table.compare(ds):
            for name, _base_mean, _new_mean, v in judged:
                found[(job.id, kernel.id, name)] = v
    for r in rows:
        r["verdicts"] = []
        for k in ds.kernels[1:]:
            v = found.get((r["job_id"], k.id, r["metric"]))
            r["verdicts"].append(_as_dict(v) if v else {"verdict": "n/a", "change_pct": None})
        r["cls"] = css_class(r)


def css_class(row: dict[str, Any]) -> str:
    labels = {v.get("verdict") for v in row["verdicts"]}
    for label in ("worse", "better", "changed"):
        if label in labels:
            return label
    return ""


def by_commit(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The series page's verdicts, from its comparison's stored result: per later kernel,
    its changed headline metrics (worse first, then largest change), then its undecided
    ones; a kernel with neither says how many headline metrics it has unchanged."""
    kernels = result.get("kernels") or []
    out = []
    for i, k in enumerate(kernels[1:]):
        changed, undecided, steady = [], [], 0
        for row in result.get("metrics") or []:
            if not row.get("headline") or i >= len(row["verdicts"]):
                continue
            v = row["verdicts"][i]
            item = {"job": row["job"], "subjob": row.get("subjob") or row["job"], **v}
            item["metric"] = row["metric"]
            if v.get("outcome") == "changed":
                changed.append(item)
            elif v.get("outcome") == "undecided":
                undecided.append(item)
            elif v.get("outcome") == "unchanged":
                steady += 1
        changed.sort(key=lambda v: (v["verdict"] != "worse", -abs(v.get("change_pct") or 0.0)))
        undecided.sort(key=lambda v: -abs(v.get("change_pct") or 0.0))
        out.append(
            {
                "commit": k["commit"],
                "label": k["label"],
                "changed": changed,
                "undecided": undecided,
                "unchanged": steady,
            }
        )
    return out
