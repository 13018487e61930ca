"""Mailing lists as sources: each archive, its last fetch (and error), the posted series it
made or why not, and every message it skipped with the reason."""

from __future__ import annotations

from flask import Blueprint, render_template

from stackbench.errors import StackbenchError
from stackbench.resultsdb import lists_q
from stackbench.web import dbsession

bp = Blueprint("lists", __name__)


@bp.route("/lists")
def index():
    from stackbench.jobs.lists.list_watch import declared as declared_lists

    s = dbsession.get()
    try:
        declared, problem = {x.name: x for x in declared_lists(dbsession.engine())}, ""
    except StackbenchError as exc:
        declared, problem = {}, str(exc).splitlines()[0]
    rows = {r.name: r for r in lists_q.all_lists(s)}
    shown = []
    for name in sorted(set(declared) | set(rows)):
        row, lst = rows.get(name), declared.get(name)
        shown.append(
            {
                "name": name,
                "decl": lst,
                "row": row,
                "counts": lists_q.counts(s, row.id) if row else {},
                "threads": lists_q.threads_of(s, row.id) if row else [],
                "skipped": lists_q.skipped_of(s, row.id) if row else [],
            }
        )
    return render_template("lists.html", lists=shown, problem=problem)
