"""What a metric measures: unit and which direction is better, decided from its name.

Rules are ordered; the first match wins. Components register more precise rules for the
metrics they produce with :func:`register`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricInfo:
    unit: str
    higher_is_better: bool | None
    kind: str


_RULES: list[tuple[re.Pattern[str], MetricInfo]] = []


def register(pattern: str, unit: str, higher_is_better: bool | None, kind: str) -> None:
    """Add a rule that wins over the built-in ones (later registrations win over earlier)."""
    _RULES.insert(0, (re.compile(pattern), MetricInfo(unit, higher_is_better, kind)))


_BUILTIN: list[tuple[str, MetricInfo]] = [
    (r"stddev.*%$|_stddev%$", MetricInfo("%", False, "variability")),
    (r"^vm-scalability\.(throughput|median)(_fault)?$", MetricInfo("KB/s", True, "throughput")),
    (r"^vm-scalability\.free_time$", MetricInfo("s", False, "latency")),
    (r"^vm-scalability\.workload$", MetricInfo("KB", None, "count")),
    (r"^vm-scalability\.migrate_mbps$", MetricInfo("MB/s", True, "throughput")),
    (r"^thpscale\.fault-(huge|base|both)-\d+$", MetricInfo("usecs", False, "latency")),
    (r"^thpscale\.Percentage huge-\d+$", MetricInfo("%", True, "percent")),
    (r"^thpscale\.(local|remote)", MetricInfo("count", None, "count")),
    (r"^stress-highalloc\.", MetricInfo("%", True, "percent")),
    (r"^(time|duration)\.(user|system|elapsed)", MetricInfo("s", False, "duration")),
    (r"^time\.", MetricInfo("", None, "count")),
    (r"^(proc-)?vmstat\.", MetricInfo("count", None, "count")),
    (r"^(buddyinfo|pagetypeinfo|meminfo)\.", MetricInfo("", None, "count")),
    (r"throughput|bandwidth|_mbps$|\.ops$|per_sec", MetricInfo("", True, "throughput")),
    (r"latency|_time$|\.usecs$", MetricInfo("", False, "latency")),
]


def info(name: str) -> MetricInfo:
    for pattern, mi in _RULES:
        if pattern.search(name):
            return mi
    for pattern, mi in _BUILTIN:
        if re.search(pattern, name):
            return mi
    return MetricInfo("", None, "")
