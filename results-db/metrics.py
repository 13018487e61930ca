"""What a metric measures: unit and which direction is better, decided from its name.

One declared table, first match wins. It lives here, not in the components that produce the
metrics, because a metric's row is created by whichever door stores its first run (`worker
upload`, ``POST /api/runs``, an importer, the in-process collector): a rule that only some of
those doors loaded would give the same metric opposite directions depending on the door.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricInfo:
    unit: str
    higher_is_better: bool | None
    kind: str


# Precise rules for the metrics stackbench's collectors and importers produce come first, so
# they win over the generic name patterns at the end.
RULES: tuple[tuple[re.Pattern[str], MetricInfo], ...] = tuple(
    (re.compile(pattern), mi)
    for pattern, mi in (
        # mmtests' extraction (jobs/benchmarks/importers and jobs/benchmarks/collect.py use the same names)
        (r"^mmtests-vmstat\.", MetricInfo("count", None, "count")),
        (r"^scenario-vmstat\.", MetricInfo("count", None, "count")),
        (r"^fragmentation\.", MetricInfo("score", False, "score")),
        # kcompactd's CPU time over a run (jobs/benchmarks/collect.py): more work is not better or worse
        (r"^(scenario-)?kcompactd\.cpu_s$", MetricInfo("s", None, "duration")),
        (
            r"^(thpscale|thpchallenge|thpcompact)\.(local|remote)-(base|huge)-\d+$",
            MetricInfo("%", None, "percent"),
        ),
        (r"^(thpscale|thpchallenge|thpcompact)\.uncertain-\d+$", MetricInfo("%", False, "percent")),
        (
            r"^(thpscale|thpchallenge|thpcompact)\.Percentage huge-\d+$",
            MetricInfo("%", True, "percent"),
        ),
        (
            r"^(thpscale|thpchallenge|thpcompact)\.fault-(huge|base|both)-\d+$",
            MetricInfo("usecs", False, "latency"),
        ),
        (r"^stress-highalloc\.pass\d+$", MetricInfo("%", True, "percent")),
        (r"^stress-highalloc\.latency-pass\d+$", MetricInfo("ns", False, "latency")),
        (r"^stress-highalloc\.allocated-pass\d+$", MetricInfo("count", True, "count")),
        # generic rules, by suite and then by the words in a name
        (r"stddev.*%$|_stddev%$", MetricInfo("%", False, "variability")),
        (r"^vm-scalability\.(throughput|median)(_fault)?$", MetricInfo("KB/s", True, "throughput")),
        (r"^vm-scalability\.free_time$", MetricInfo("s", False, "latency")),
        (r"^vm-scalability\.workload$", MetricInfo("KB", None, "count")),
        (r"^vm-scalability\.migrate_mbps$", MetricInfo("MB/s", True, "throughput")),
        (r"^thpscale\.(local|remote)", MetricInfo("count", None, "count")),
        (r"^stress-highalloc\.", MetricInfo("%", True, "percent")),
        (r"^(time|duration)\.(user|system|elapsed)", MetricInfo("s", False, "duration")),
        (r"^time\.", MetricInfo("", None, "count")),
        (r"^(proc-)?vmstat\.", MetricInfo("count", None, "count")),
        (r"^(buddyinfo|pagetypeinfo|meminfo)\.", MetricInfo("", None, "count")),
        (r"throughput|bandwidth|_mbps$|\.ops$|per_sec", MetricInfo("", True, "throughput")),
        (r"latency|_time$|\.usecs$", MetricInfo("", False, "latency")),
    )
)

UNKNOWN = MetricInfo("", None, "")


def info(name: str) -> MetricInfo:
    """The unit, direction and kind of metric NAME (UNKNOWN when no rule matches)."""
    for pattern, mi in RULES:
        if pattern.search(name):
            return mi
    return UNKNOWN


# The counters that show compaction and THP code ran: /proc/vmstat deltas (a run's, or its
# scenario stage's) named for that code, and the free-list summaries the scenarios take
# (buddyinfo/pagetypeinfo, the fragmentation score). Their verdicts are a false-discovery
# family of their own (verdict.family), so the report can say which of them changed.
COUNTER_PREFIXES = ("proc-vmstat.", "vmstat.", "mmtests-vmstat.", "scenario-vmstat.")
COUNTER_WORDS = (
    "thp_",
    "compact_",
    "pgmigrate_",
    "THP ",
    "Compaction",
    "Page migrate",
    "Kcompactd",
)
FREE_LIST_PREFIXES = ("buddyinfo.", "pagetypeinfo.", "fragmentation.")


def is_counter(name: str) -> bool:
    """Is metric NAME a THP/compaction counter or a free-list summary?"""
    if name.startswith(FREE_LIST_PREFIXES):
        return True
    return name.startswith(COUNTER_PREFIXES) and any(w in name for w in COUNTER_WORDS)
