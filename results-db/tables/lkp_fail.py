"""Which runs each section of LKP's ncompare table counts.

The ``fail:runs  %reproduction`` section counts every run: a failure stat (dmesg.*,
last_state.* ...) is summed over all runs of a kernel and shown over their number. The
``%stddev`` section leaves incomplete runs out: lkp-tests (lib/compare.rb
``each_changed_stat``, lib/nresult_root.rb ``complete_matrix``, lib/stats.rb
``filter_incomplete_run``) averages a performance stat over the runs whose
``last_state.is_incomplete_run`` is not 1, so a run cut short by a crash is reported as a
failure and does not drag the kernel's throughput down. Which stats are failure stats, and
which rows change, is lkp_rule's (the rows are chosen on all runs, as LKP chooses them).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # lkp calls this module; at run time it only needs the objects
    from stackbench.resultsdb.tables import lkp

INCOMPLETE = "last_state.is_incomplete_run"


def complete_group(group: lkp.Group) -> lkp.Group:
    """The group as the %stddev section sees it: each kernel without its incomplete runs
    (the same group when no run is incomplete)."""
    if not any(INCOMPLETE in c.matrix for c in group.columns):
        return group
    return dataclasses.replace(group, columns=[_complete(c) for c in group.columns])


def _complete(col: lkp.Column) -> lkp.Column:
    flags = col.matrix.get(INCOMPLETE)
    if not flags:
        return col
    keep = [i for i, f in enumerate(flags) if f != 1]
    matrix = {k: [v[i] for i in keep if i < len(v)] for k, v in col.matrix.items()}
    del matrix[INCOMPLETE]
    return dataclasses.replace(col, runs=len(keep), matrix=matrix, array=None)
