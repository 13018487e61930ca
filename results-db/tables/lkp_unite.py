"""What LKP's ``unite-stats`` leaves out of a kernel's matrix, for runs it never saw.

LKP's table reads each commit's matrix.json, from which unite-stats (lkp-tests lib/matrix.rb
``unite_remove_empty_stats``) removed every stat that is the integer 0 in all the commit's
runs; such a stat is no row, never a ``0.00 -100.0% 0.00`` one. LKP trees are imported that
way already (importers/lkp.py drops them, and keeps float zeros as LKP keeps them). Runs
stackbench made itself store counters (``mmtests-vmstat.*`` deltas, durations) as numbers
without a JSON type, so here a stat that is 0 in every run of such a kernel is left out of
that kernel's matrix, as unite-stats leaves out an integer counter.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # lkp calls this module; at run time it only needs the objects
    from stackbench.resultsdb import query
    from stackbench.resultsdb.tables import lkp

# run.meta key every run imported from an LKP tree has (importers/lkp.py)
LKP_IMPORT = "lkp_result_root"


def unite(groups: list[lkp.Group], ds: query.Dataset) -> list[lkp.Group]:
    """The groups with all-zero stats dropped from the columns of kernels whose runs did not
    come from an LKP tree."""
    imported = {(r.job_id, r.build_id) for r in ds.runs.values() if LKP_IMPORT in (r.meta or {})}
    out = []
    for g in groups:
        cols = [
            c if (g.job.id, c.kernel.id) in imported else _without_zero_stats(c) for c in g.columns
        ]
        out.append(dataclasses.replace(g, columns=cols))
    return out


def _without_zero_stats(col: lkp.Column) -> lkp.Column:
    if all(any(v) for v in col.matrix.values()):
        return col
    matrix = {k: v for k, v in col.matrix.items() if any(v)}
    return dataclasses.replace(col, matrix=matrix, array=None)
