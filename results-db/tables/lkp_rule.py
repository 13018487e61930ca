"""LKP's rule for "this stat changed" (the rows ``lkp ncompare`` and the test robot show).

Reimplemented from the behaviour of lkp-tests' ``lib/stats.rb`` and ``lib/changed_stat.rb``
(see reference/FORMATS.md section 3). ``a`` is always the kernel under test and ``b`` the
base, as in LKP. The rule in short, per stat:

- per-run values; a side with no value for the stat counts zeros (one per run);
- regular (performance) stats need at least 3 runs on one side;
- sort, drop ``n >> 5`` runs (at most 3; 1 when the base has <= 3 runs) from each end; the
  "mean" LKP uses here is the upper median ``sorted[n // 2]``;
- changed when the two ranges separate around the medians:
  ``min_b > med_a and med_b > max_a`` or the mirror (other modes: gap, variance, distance);
- failure stats (dmesg.*, kmsg.*, *.fail ...) change when their maxima differ;
- then small changes are dropped: ratio of medians <= 1.01, or <= 1.05 for stats that are
  not performance metrics, or below a per-stat floor (proc-vmstat/meminfo max <= 1000 ...).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackbench.resultsdb.tables.lkp_format import is_test_base, stat_base

MARGIN_SHIFT = 5
MAX_RATIO = 5

# etc/failure: stats that count failures (shown as fail:runs, compared by their maximum)
_FAILURE = [
    r"dmesg.*",
    r".+\.(error|warn|fail)[^_]*$",
    r".+\..+\.make_fail",
    r".+killed_by.*",
    r"kmsg.*",
    r"last_state.*",
    r"leaking-addresses\.dmesg\.(?!R).*",
    r"leaking-addresses\.proc\.(?!blacklist|netlink|vmallocinfo)(?!.*:0000000)",
    r"lkp-bug.*",
    r"stderr.*",
    r"xfstests\..+(fail|crash|crashed|timeout|warn|dmesg-warn|dmesg-fail|inconsistent_fs)$",
    r"build-pkg.*:(error|warning):.*",
]
_PASS = [r".+\.pass$"]
_FAILURE_RE = re.compile("^(?:" + "|".join(_FAILURE) + ")")
_PASS_RE = re.compile("^(?:" + "|".join(_PASS) + ")")

# etc/perf-metrics-prefixes, plus every benchmark's own stats (see is_test_base)
_PERF_PREFIXES = re.compile(
    r"^(boot-meminfo\.(DirectMap1G|DirectMap2M|DirectMap4k|KernelStack|MemFree|MemTotal"
    r"|PageTables|Slab|VmallocUsed)|boot-memory\.(bootmem|code|init)|boot-slabinfo\.|boot-time\."
    r"|energy\.|interrupts\.CAL:Function_call_interrupts|iostat\.|perf-c2c\.HITM\.total"
    r"|perf-profile\.children\.cycles-pp\.native_queued_spin_lock_slowpath|perf-stat\.|pmeter\."
    r"|proc-vmstat\.|turbostat\.(%Busy|Bzy_MHz|C1%|C1E%|CorWatt|Pk%pc10|Pkg%pc[236789]|PkgTmp"
    r"|PkgWatt|POLL%|RAMWatt|SYS%LPI)|vmstat\.(cpu|io|swap|system)\.)"
)

# etc/perf-metrics-patterns: stats that are performance metrics wherever they appear (LKP
# matches these unanchored, each with its own ^): time stats of any monitor or benchmark
_PERF_PATTERNS = re.compile(r"^(.*\.)?time..*|^lock_stat..*..contentions")

# etc/stat-denylist, the monitor part: noisy stats LKP does not report without --more
_DENYLIST = re.compile(
    r"^(boot-meminfo|boot-slabinfo|boot-time|buddyinfo|cpuidle|diskstats|interrupts|iostat"
    r"|lock_stat|max_iostat|meminfo|mpstat|numa-meminfo|numa-numastat|numa-vmstat|pagetypeinfo"
    r"|perf-stat|proc-vmstat|sched_debug|slabinfo|softirqs|time|turbostat|uptime|vmstat"
    r"|zoneinfo)\.|^perf-profile.|^dmesg\.(boot_failures|boot_successes|timestamp:|bootstage)"
    r"|^kmsg\.(timestamp:|bootstage:)|^last_state\.(exit_fail|soft_timeout|OOM|post_run)"
)


def is_function_stat(stat: str) -> bool:
    """A failure/pass counter (LKP shows these as fail:runs)."""
    if ".time." in stat or ".timestamp:" in stat or ".bootstage:" in stat:
        return False
    return bool(_FAILURE_RE.match(stat) or _PASS_RE.match(stat))


def is_perf_metric(stat: str) -> bool:
    if _PERF_PREFIXES.match(stat) or _PERF_PATTERNS.search(stat):
        return True
    base = stat_base(stat)
    return "." in stat and is_test_base(base) and base not in ("kmsg", "dmesg", "stderr")


def is_bisectable(stat: str) -> bool:
    return not _DENYLIST.search(stat)


def _memory_change(stat: str) -> bool:
    return bool(
        re.match(
            r"^(boot-meminfo|boot-memory|proc-vmstat|numa-vmstat|meminfo|memmap"
            r"|numa-meminfo)\.",
            stat,
        )
    )


def reasonable_perf_change(stat: str, delta: float, maximum: float) -> bool:
    """Per-stat floors so tiny absolute changes of big counters are not reported."""
    if stat.startswith("iostat"):
        return maximum > 1
    if stat.startswith(("pagetypeinfo", "buddyinfo", "slabinfo")):
        return delta > 100
    if stat.startswith("proc-vmstat") or "meminfo" in stat:
        return maximum > 1000
    if stat.startswith("lock_stat"):
        if stat == "waittime-total":
            return delta > 10_000
        if stat == "holdtime-total":
            return delta > 100_000
        if "time" in stat:
            return delta > 1_000
        return delta > 10_000
    if stat.startswith(("interrupts", "softirqs")):
        return maximum > 10_000
    return True


@dataclass
class Summary:
    """Sorted values without the margins, and LKP's (min, "mean" = upper median, max)."""

    sorted: list[float]
    min: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float], max_margin: int | None = None) -> Summary:
        s = sorted(values)
        margin = len(s) >> MARGIN_SHIFT
        if max_margin is not None:
            margin = min(margin, max_margin)
        s = s[margin : len(s) - margin]
        if not s:
            return cls([], 0, 0, 0)
        return cls(s, s[0], s[len(s) // 2], s[-1])

    @property
    def len(self) -> float:
        return self.max - self.min

    def __len__(self) -> int:
        return len(self.sorted)


def _separated(a: Summary, b: Summary, options: Mapping[str, Any]) -> bool:
    """The default mode (LKP's ChangedStat#change?)."""
    distance = options.get("distance")
    if distance:
        if (
            isinstance(a.max, int)
            and not isinstance(a.max, bool)
            and (a.min - b.max == 1 or b.min - a.max == 1)
        ):
            return False
        if len(a) < 3 or len(b) < 3:
            min_gap = max(a.len, b.len) * distance
            return b.min - a.max > min_gap or a.min - b.max > min_gap
        gd = options.get("gap_distance") or 2
        if b.min > a.max and (b.min - a.max) > (b.mean - a.mean) / gd:
            return True
        return a.min > b.max and (a.min - b.max) > (a.mean - b.mean) / gd
    if b.min > a.mean and b.mean > a.max:
        return True
    return a.min > b.mean and a.mean > b.max


def _gap(a: Summary, b: Summary, gap: float) -> bool:
    if b.min > a.max and (b.min - a.max) > (b.mean - a.mean) * gap:
        return True
    return a.min > b.max and (a.min - b.max) > (a.mean - b.mean) * gap


def _changed_perf(a: Summary, b: Summary, options: dict[str, Any]) -> bool:
    variance = options.get("variance")
    if variance:
        if a.len * b.mean > variance * b.len * a.mean:
            return True
        return b.len * a.mean > variance * a.len * b.mean
    if options.get("gap"):
        return _gap(a, b, options["gap"])
    options.setdefault("gap_distance", 2)
    return _separated(a, b, options)


def _same_number_kind(threshold: Any, value: Any) -> bool:
    # LKP compares the perf-profile threshold only when its Ruby class equals the median's
    return isinstance(threshold, float) == isinstance(value, float)


def _diff_metrics(high: Summary, low: Summary) -> tuple[float, float, float]:
    y = high.min - low.max
    delta = high.mean - low.mean
    ratio = float(high.mean) / low.mean if low.mean > 0 else MAX_RATIO
    return y, delta, ratio


def _interval(a: Summary, b: Summary) -> str:
    return f"[ {a.min:<10.5g} - {a.max:<10.5g} ] -- [ {b.min:<10.5g} - {b.max:<10.5g} ]"


def _skip_function_stat(
    stat: str, options: Mapping[str, Any], b_keys: Collection[str] | None
) -> bool:
    if options.get(f"force_{stat}"):
        return False
    if re.match(r"^(dmesg|kmsg|last_state|stderr)\.", stat):
        return False
    if b_keys is None:  # no base matrix to look for the pass/fail counterpart in
        return False
    base = re.sub(r"\.[^.]*$", "", stat)
    if re.search(r"\.(error|warn|fail)$", stat) and f"{base}.pass" not in b_keys:
        return True
    counterpart = re.compile(re.escape(base) + r"\.(error|warn|fail)")
    return stat.endswith(".pass") and not any(counterpart.fullmatch(k) for k in b_keys)


def _skip_regular_stat(stat: str, cols_a: int, cols_b: int, options: Mapping[str, Any]) -> bool:
    if not options.get(f"force_{stat}") and cols_a < 3 and cols_b < 3 and not options.get("whole"):
        return True
    tbox = options.get("tbox_group") or ""
    if tbox.startswith("vh-"):
        return True
    return tbox.startswith("vm-") and not options.get("is_perf_test_vm") and _memory_change(stat)


def _skip_critical_stat(stat: str, a: Summary, func: bool, options: dict[str, Any]) -> bool:
    if not ((options.get("regression-only") or options.get("all-critical")) and func):
        return False
    if a.max == 0:
        if stat.startswith("dmesg."):
            options["has_boot_fix"] = True
        if options.get("regression-only") or options.get("all-critical"):
            return True
    # a boot fix in the new kernel explains the kmsg changes that follow it
    return bool(options.get("has_boot_fix")) and stat.startswith("kmsg.")


def _skip_small_change(stat: str, ratio: float, delta: float, maximum: float, options) -> bool:
    if options.get(f"force_{stat}"):
        return False
    if options.get("perf-profile") and stat.startswith("perf-profile."):
        return False
    if not ratio > 1.01:  # time.elapsed_time only has 0.01s precision
        return True
    if not (ratio > 1.05 or is_perf_metric(stat)):
        return True
    return not reasonable_perf_change(stat, delta, maximum)


def _padded(values: Sequence[float] | None, cols: int) -> list[float]:
    out = list(values) if values is not None else [0] * cols
    while len(out) < cols:
        out.append(0)
    return out


def changed_stat(
    a: Sequence[float] | None,
    b: Sequence[float] | None,
    stat: str,
    options: dict[str, Any] | None = None,
    *,
    cols_a: int | None = None,
    cols_b: int | None = None,
    b_keys: Collection[str] | None = None,
) -> dict[str, Any] | None:
    """LKP's record for a changed stat (interval, ratio, delta, medians...), or None.

    ``a``/``b``: per-run values of the new kernel and of the base (None: stat absent, which
    LKP fills with zeros on the new side and skips on the base side). ``cols_*``: number of
    runs of each side (the matrix width), default the list lengths. ``b_keys``: every stat
    of the base matrix, for the rules that look at neighbours (None: not known). ``options`` takes LKP's
    option keys (more, gap, variance, distance, perf-profile, regression-only, force_<stat>,
    tbox_group, resize...) and is updated the way LKP updates it (gap_distance,
    has_boot_fix), so a caller walking a whole matrix passes the same dict each time.
    """
    options = {} if options is None else options
    cols_a = len(a) if cols_a is None and a is not None else (cols_a or 0)
    cols_b = len(b) if cols_b is None and b is not None else (cols_b or 0)
    a_k = _padded(a, cols_a)
    if not a_k or isinstance(a_k[-1], str):
        return None
    func = is_function_stat(stat)
    force = bool(options.get(f"force_{stat}"))
    if options.get("perf") and not is_perf_metric(stat):
        return None
    if not options.get("more") and not is_bisectable(stat):
        return None
    if func:
        if _skip_function_stat(stat, options, b_keys):
            return None
    elif _skip_regular_stat(stat, cols_a, cols_b, options):
        return None
    # newly added monitors have no values to compare in the base
    if b is None and not func:
        m = re.match(r"^(lock_stat|perf-profile)\.", stat)
        if not (m and b_keys and any(stat_base(k) == m.group(1) for k in b_keys)):
            return None

    max_margin = 0 if func else 3
    b_k = _padded(b, cols_b)
    sb = Summary.of(b_k, max_margin)
    if not sb.sorted:
        return None
    resize = options.get("resize")
    if resize and len(a_k) > resize:
        a_k = a_k[:resize]
    if len(b_k) <= 3 and max_margin > 1:
        max_margin = 1
    sa = Summary.of(a_k, max_margin)
    if not sa.sorted:
        return None

    if not force:
        pp = options.get("perf-profile")
        if pp and stat.startswith("perf-profile.") and _same_number_kind(pp, sa.mean):
            changed = sa.mean > pp or sb.mean > pp
        elif func:
            changed = sa.max != sb.max
        else:
            changed = _changed_perf(sa, sb, options)
        if not changed:
            return None
    if _skip_critical_stat(stat, sa, func, options):
        return None

    maximum = max(sb.max, sa.max)
    x, z = sa.len, sb.len
    if len(sa) <= 2 and x < z:
        x = z
    y, delta, ratio = _diff_metrics(sa, sb) if sa.mean > sb.mean else _diff_metrics(sb, sa)
    y = max(y, 0)
    ratio = min(ratio, MAX_RATIO)
    if _skip_small_change(stat, ratio, delta, maximum, options):
        return None
    record = {
        "stat": stat,
        "interval": _interval(sa, sb),
        "a": sa.sorted,
        "b": sb.sorted,
        "is_function_stat": func,
        "is_latency": False,  # LKP's latency classification is disabled upstream
        "ratio": ratio,
        "delta": delta,
        "mean_a": sa.mean,
        "mean_b": sb.mean,
        "x": x,
        "y": y,
        "z": z,
        "min_a": sa.min,
        "max_a": sa.max,
        "min_b": sb.min,
        "max_b": sb.max,
        "max": maximum,
        "nr_run": len(a_k),
    }
    record.update(options)
    return record


def matrix_cols(matrix: Mapping[str, Sequence[Any]]) -> int:
    if not matrix:
        return 0
    if "stats_source" in matrix:
        return len(matrix["stats_source"])
    values = list(matrix.values())
    return max(len(values[0]), len(values[-1]))


def changed_stats(
    matrix_a: Mapping[str, Sequence[float]],
    matrix_b: Mapping[str, Sequence[float]],
    options: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every changed stat between two LKP matrices (``a`` new, ``b`` base), LKP's way."""
    options = {} if options is None else options
    cols_a, cols_b = matrix_cols(matrix_a), matrix_cols(matrix_b)
    if options.get("variance") and (cols_a < 10 or cols_b < 10):
        return {}
    keys = [k for k in matrix_a if k != "stats_source"]
    keys += [k for k in matrix_b if k not in matrix_a and k != "stats_source"]
    out = {}
    for k in keys:
        rec = changed_stat(
            matrix_a.get(k),
            matrix_b.get(k),
            k,
            options,
            cols_a=cols_a,
            cols_b=cols_b,
            b_keys=matrix_b.keys(),
        )
        if rec is not None:
            out[k] = rec
    return out


def is_changed(
    a: list[float],
    b: list[float] | None,
    stat: str,
    *,
    cols_a: int | None = None,
    cols_b: int | None = None,
    more: bool = True,
    gap: float | None = None,
    variance: float | None = None,
    distance: float | None = None,
    perf_profile: float | int | None = 5,
    regression_only: bool = False,
    force: bool = False,
) -> bool:
    """Whether LKP reports ``stat`` as changed between the new kernel's per-run values ``a``
    and the base's ``b`` (``b=None``: the base lacks the stat).

    Defaults are ``lkp ncompare``'s with ``--more`` (as the test robot's reports): every stat
    kind is eligible, perf-profile threshold 5.
    """
    options: dict[str, Any] = {"more": more, "perf-profile": perf_profile}
    if gap:
        options["gap"] = gap
    if variance:
        options["variance"] = variance
    if distance:
        options["distance"] = distance
    if regression_only:
        options["regression-only"] = True
    if force:
        options[f"force_{stat}"] = True
    if variance and ((cols_a or len(a)) < 10 or (cols_b or len(b or [])) < 10):
        return False
    return changed_stat(a, b, stat, options, cols_a=cols_a, cols_b=cols_b) is not None


# -- the same rule over whole matrices at once ----------------------------------------------


@dataclass
class NameRules:
    """What the rule needs to know about each stat name, worked out once per group."""

    func: np.ndarray  # failure/pass counters
    perf_profile: np.ndarray
    perf_metric: np.ndarray
    bisectable: np.ndarray
    new_monitor_ok: np.ndarray  # a base without the stat still compares it (lock_stat...)
    skip_func: np.ndarray  # failure counters without their pass/fail counterpart in the base
    floor_kind: np.ndarray  # 0 none, 1 on the maximum, 2 on the delta (reasonable_perf_change)
    floor: np.ndarray

    @classmethod
    def of(cls, names: Sequence[str], b_keys: Collection[str]) -> NameRules:
        n = len(names)
        func = np.fromiter(map(is_function_stat, names), bool, n)
        bases = {stat_base(k) for k in b_keys}
        kinds, floors = np.zeros(n, np.int8), np.zeros(n)
        new_ok, skip_func = np.zeros(n, bool), np.zeros(n, bool)
        for i, stat in enumerate(names):
            kinds[i], floors[i] = _floor_of(stat)
            m = re.match(r"^(lock_stat|perf-profile)\.", stat)
            new_ok[i] = bool(m and m.group(1) in bases)
            if func[i]:
                skip_func[i] = _skip_function_stat(stat, {}, b_keys)
        return cls(
            func=func,
            perf_profile=np.fromiter((s.startswith("perf-profile.") for s in names), bool, n),
            perf_metric=np.fromiter(map(is_perf_metric, names), bool, n),
            bisectable=np.fromiter(map(is_bisectable, names), bool, n),
            new_monitor_ok=new_ok,
            skip_func=skip_func,
            floor_kind=kinds,
            floor=floors,
        )


def _floor_of(stat: str) -> tuple[int, float]:
    """reasonable_perf_change as (kind, threshold): 1 needs maximum > t, 2 needs delta > t."""
    if stat.startswith("iostat"):
        return 1, 1
    if stat.startswith(("pagetypeinfo", "buddyinfo", "slabinfo")):
        return 2, 100
    if stat.startswith("proc-vmstat") or "meminfo" in stat:
        return 1, 1000
    if stat.startswith("lock_stat"):
        return 2, (1_000 if "time" in stat else 10_000)
    if stat.startswith(("interrupts", "softirqs")):
        return 1, 10_000
    return 0, 0.0


def _summaries(sorted_rows: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, ...]:
    """Summary.of over rows already sorted: (min, upper median, max, length) per row."""
    cols = sorted_rows.shape[1]
    length = cols - 2 * margin
    rows = np.arange(len(sorted_rows))
    lo = np.minimum(margin, cols - 1)
    hi = np.clip(margin + length - 1, 0, cols - 1)
    mid = np.clip(margin + length // 2, 0, cols - 1)
    return sorted_rows[rows, lo], sorted_rows[rows, mid], sorted_rows[rows, hi], length


def changed_mask(
    a: np.ndarray,
    a_present: np.ndarray,
    b: np.ndarray,
    b_present: np.ndarray,
    rules: NameRules,
    *,
    more: bool = True,
    perf_profile: float | int | None = 5,
) -> np.ndarray:
    """:func:`changed_stats` with LKP's default options (``more``, a perf-profile threshold)
    for every stat at once: ``a``/``b`` are stats x runs matrices of the new kernel and of
    the base, rows where ``*_present`` is False being stats that side lacks (LKP counts
    zeros there). True where LKP reports the stat."""
    cols_a, cols_b = a.shape[1], b.shape[1]
    n = len(a)
    a = np.where(a_present[:, None], a, 0.0)
    b = np.where(b_present[:, None], b, 0.0)
    func = rules.func
    ok = np.ones(n, bool)
    if not more:
        ok &= rules.bisectable
    ok &= ~(func & rules.skip_func)
    if cols_a < 3 and cols_b < 3:
        ok &= func
    ok &= func | b_present | rules.new_monitor_ok
    if cols_a == 0 or cols_b == 0:
        return np.zeros(n, bool)
    max_margin = np.where(func, 0, 3)
    margin_b = np.minimum(cols_b >> MARGIN_SHIFT, max_margin)
    if cols_b <= 3:
        max_margin = np.where(max_margin > 1, 1, max_margin)
    margin_a = np.minimum(cols_a >> MARGIN_SHIFT, max_margin)
    a_min, a_mean, a_max, a_len = _summaries(np.sort(a, axis=1), margin_a)
    b_min, b_mean, b_max, b_len = _summaries(np.sort(b, axis=1), margin_b)
    ok &= (a_len > 0) & (b_len > 0)

    # perf-profile shares against the threshold: LKP compares only when the threshold and
    # the new side's median are the same kind of number; medians of stored values are
    # floats, and a side without the stat has LKP's integer zeros
    if perf_profile:
        same_kind = a_present if isinstance(perf_profile, float) else ~a_present
        pp = rules.perf_profile & same_kind
    else:
        pp = np.zeros(n, bool)
    threshold = perf_profile or 0
    sep = ((b_min > a_mean) & (b_mean > a_max)) | ((a_min > b_mean) & (a_mean > b_max))
    changed = np.where(
        pp, (a_mean > threshold) | (b_mean > threshold), np.where(func, a_max != b_max, sep)
    )
    ok &= changed

    maximum = np.maximum(a_max, b_max)
    a_high = a_mean > b_mean
    high = np.where(a_high, a_mean, b_mean)
    low = np.where(a_high, b_mean, a_mean)
    delta = high - low
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(low > 0, high / np.where(low > 0, low, 1), MAX_RATIO)
    ratio = np.minimum(ratio, MAX_RATIO)
    small = ~(ratio > 1.01) | ~((ratio > 1.05) | rules.perf_metric)
    kind = rules.floor_kind
    small |= (kind == 1) & ~(maximum > rules.floor)
    small |= (kind == 2) & ~(delta > rules.floor)
    if perf_profile:
        small &= ~rules.perf_profile
    return ok & ~small
