"""Verdicts for the comparison page, from :mod:`stackbench.resultsdb.verdict` so the page
highlights exactly what the stackbench table says: each later kernel against the base, one
value per run, false-discovery control across the metrics of the comparison."""

from __future__ import annotations

from typing import Any

from stackbench.resultsdb import verdict

HIGHLIGHT = {"better", "worse", "changed"}


def _as_dict(v: verdict.Verdict) -> dict[str, Any]:
    return {
        "verdict": v.label,
        "outcome": v.outcome,
        "direction": v.direction,
        "change_pct": v.change_pct,
        "ci": [v.ci_low_pct, v.ci_high_pct],
        "p": v.p_value,
        "q": v.q_value,
        "test": v.test,
        "runs_wanted": v.runs_wanted,
    }


def judge_rows(rows: list[dict[str, Any]]) -> None:
    """Fill ``row["verdicts"]`` (one per kernel after the base) for every metric row; rows
    carry ``values`` (per kernel, one value per run), ``higher_is_better`` and ``kind``."""
    if not rows:
        return
    nk = max(len(r["values"]) for r in rows)
    for r in rows:
        r["verdicts"] = []
    for k in range(1, nk):
        pairs = {
            str(i): (r["values"][0], r["values"][k], r["higher_is_better"], r.get("kind", ""))
            for i, r in enumerate(rows)
            if len(r["values"]) > k
        }
        judged = verdict.judge_many(pairs)
        for i, r in enumerate(rows):
            v = judged.get(str(i))
            r["verdicts"].append(_as_dict(v) if v else {"verdict": "n/a", "change_pct": None})
    for r in rows:
        r["cls"] = css_class(r)


def css_class(row: dict[str, Any]) -> str:
    labels = {v.get("verdict") for v in row["verdicts"]}
    for label in ("worse", "better", "changed"):
        if label in labels:
            return label
    return ""
