"""Comparison pages: pick kernels, then the LKP and mmtests tables, the verdict view and plots
at a permanent URL (/compare/<key>)."""

from __future__ import annotations

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    g,
    redirect,
    render_template,
    request,
    url_for,
)
from markupsafe import Markup

from stackbench.errors import NotFoundError, StackbenchError
from stackbench.resultsdb import aa, claims_check, kernels_q
from stackbench.web import comparisons, dbsession, plots
from stackbench.web.auth import login_required

bp = Blueprint("compare", __name__)
INLINE_PLOTS = 12


@bp.route("/compare")
def pick():
    s = dbsession.get()
    recent = kernels_q.listing(s, limit=40)
    return render_template("compare_pick.html", recent=recent, error=None, kernels="")


@bp.route("/compare/new")
@login_required
def create():
    # computing a comparison costs seconds: only accounts start one, within a quota
    refs = [r for k in request.args.getlist("k") for r in k.split()]
    opts = comparisons.Options(
        all_rows=request.args.get("all") in ("1", "on", "true"),
        suite=request.args.get("suite") or None,
        machine=request.args.get("machine") or None,
        pool_machines=request.args.get("pool") in ("1", "on", "true"),
    )
    s = dbsession.get()
    try:
        comp = comparisons.create_for(
            s, g.user.id, refs, opts, max_kernels=current_app.config["COMPARE_MAX_KERNELS"]
        )
    except StackbenchError as exc:
        s.rollback()
        recent = kernels_q.listing(s, limit=40)
        return (
            render_template(
                "compare_pick.html", recent=recent, error=str(exc), kernels=" ".join(refs)
            ),
            429 if isinstance(exc, comparisons.QuotaExceeded) else 400,
        )
    s.commit()
    return redirect(url_for("compare.show", key=comp.key), code=303)


def load(key: str) -> tuple[comparisons.Found, dict]:
    try:
        found = comparisons.lookup(dbsession.engine(), key)
    except NotFoundError as exc:
        abort(404, str(exc))
    return found, found.result


def _sig_key(row: dict) -> tuple:
    order = {"worse": 0, "better": 1, "changed": 2}.get(row.get("cls", ""), 3)
    best_p = min((v.get("p") for v in row["verdicts"] if v.get("p") is not None), default=1.0)
    return (order, best_p, row["metric"])


def _aa_of(result: dict) -> dict[str, list[str]]:
    """{metric: its A/A figures on each machine of the comparison}, in words."""
    found = aa.of_machines(dbsession.get(), result.get("machines") or [])
    out: dict[str, list[str]] = {}
    for (machine, metric), row in sorted(found.items()):
        out.setdefault(metric, []).append(f"{machine}: {aa.describe(row)}")
    return out


def _fragment(comp: comparisons.Found, result: dict, aa_of: dict[str, list[str]]) -> str:
    labels = [k["label"] for k in result["kernels"]]
    metrics = result.get("metrics", [])
    flagged = [m for m in metrics if m.get("cls")]
    ordered = sorted(metrics, key=_sig_key)
    inline, lazy = [], []
    counters = [m for m in metrics if m["counter"]]
    for m in ordered:
        if m["counter"]:
            continue
        if len(inline) < INLINE_PLOTS:
            svg = plots.runs_plot(f"{m['metric']}", labels, m["values"], m["unit"])
            inline.append({"m": m, "svg": svg})
        else:
            lazy.append(m)
    charts = [{"m": m, "svg": plots.bar_chart(m["metric"], labels, m["values"])} for m in counters]
    # the verdict section: changed and undecided headline metrics, and a line for the rest
    shown, rest = comparisons.verdict_section(ordered, bool((comp.params or {}).get("all_rows")))
    return render_template(
        "_compare_body.html",
        comp=comp,
        result=result,
        labels=labels,
        flagged=flagged,
        ordered=ordered,
        shown=shown,
        rest=rest,
        kernel_refs=" ".join(f"#{k['id']}" for k in result["kernels"]),
        inline=inline,
        lazy=lazy,
        charts=charts,
        aa_of=aa_of,
    )


@bp.route("/compare/<key>")
def show(key: str):
    comp, result = load(key)
    aa_of = _aa_of(result)
    # the machines' A/A figures change nightly: a page cached before tonight's is stale
    ck = (comp.key, comp.fingerprint, "page", repr(sorted(aa_of.items())))
    body = comparisons.CACHE.get(ck)
    if body is None:
        body = _fragment(comp, result, aa_of)
        comparisons.CACHE.put(ck, body)
    return render_template(
        "compare.html",
        comp=comp,
        result=result,
        body=Markup(body),
        claims=comparison_claims(comp.key),
    )


def comparison_claims(key: str) -> claims_check.ClaimsReport | None:
    """The claims of the series this comparison is the own comparison of, if any."""
    from stackbench.resultsdb import claims_store

    row = claims_store.series_of_comparison(dbsession.get(), key)
    return claims_check.check(dbsession.engine(), row) if row is not None else None


@bp.route("/compare/<key>/metrics")
def metrics(key: str):
    """Every metric's verdicts, and every plot (loaded lazily as images)."""
    comp, result = load(key)
    return render_template(
        "compare_metrics.html",
        comp=comp,
        labels=[k["label"] for k in result["kernels"]],
        tables=result.get("tables", {}),
        ordered=sorted(result.get("metrics", []), key=_sig_key),
    )


@bp.route("/compare/<key>/<style>.txt")
def text_table(key: str, style: str):
    _comp, result = load(key)
    tables = result.get("tables", {})
    if style == "mmtests":
        out = "\n".join(t["text"] for t in tables.get("mmtests", []))
    elif style in ("lkp", "stackbench"):
        out = tables.get(style) or ""
    elif style in ("alloc-latency", "order-success"):
        out = next((t["text"] for t in tables.get("seeds", []) if t["style"] == style), "")
    else:
        abort(404, f"unknown table style '{style}'")
    if not out:
        abort(404, result.get("errors", {}).get(style) or f"no {style} table for this comparison")
    return Response(out, mimetype="text/plain")


@bp.route("/compare/<key>/plot/<int:job_id>/<int:metric_id>.svg")
def plot(key: str, job_id: int, metric_id: int):
    _comp, result = load(key)
    labels = [k["label"] for k in result["kernels"]]
    for m in result.get("metrics", []):
        if m["job_id"] == job_id and m["metric_id"] == metric_id:
            draw = plots.bar_chart if m["counter"] else plots.runs_plot
            svg = (
                draw(m["metric"], labels, m["values"])
                if m["counter"]
                else draw(m["metric"], labels, m["values"], m["unit"])
            )
            return Response(
                str(svg), mimetype="image/svg+xml", headers={"Cache-Control": "public, max-age=60"}
            )
    abort(404, "no such metric in this comparison")
