"""compare-mmtests.pl's ``Ops ...`` block of mmtests-vmstat counters (the ``--monitor vmstat``
view of :mod:`stackbench.resultsdb.tables.mmtests`): per kernel, the largest per-run value
of each row derived from a run's /proc/vmstat deltas and its elapsed time."""

from __future__ import annotations

from collections import defaultdict

from stackbench.errors import StackbenchError
from stackbench.resultsdb import query
from stackbench.resultsdb.tables.mmtests import VMSTAT_FIELD, _num, header

# /proc/vmstat counters that older kernels named differently; like mmtests, the value of
# the last name present wins (the kernel prints them in this order)
_RENAMED = {
    "allocstall": [
        "allocstall",
        "allocstall_dma",
        "allocstall_dma32",
        "allocstall_normal",
        "allocstall_highmem",
        "allocstall_movable",
    ],
    "pgmigrate_success": ["compact_pages_moved", "pgmigrate_success"],
    "thp_split_page": ["thp_split", "thp_split_page"],
    "thp_split_page_failed": ["thp_failed", "thp_split_page_failed"],
}

_KSWAPD_STEAL = [
    "kswapd_steal",
    "pgsteal_kswapd_dma",
    "pgsteal_kswapd_dma32",
    "pgsteal_kswapd_normal",
    "pgsteal_kswapd_high",
    "pgsteal_kswapd_movable",
    "pgsteal_kswapd",
]
_DIRECT_STEAL = [
    "pgsteal_dma",
    "pgsteal_dma32",
    "pgsteal_normal",
    "pgsteal_movable",
    "pgsteal_high",
    "pgsteal_direct_dma",
    "pgsteal_direct_dma32",
    "pgsteal_direct_normal",
    "pgsteal_direct_movable",
    "pgsteal_direct_high",
    "pgsteal_direct",
]
_KSWAPD_SCAN = [
    "pgscan_kswapd_dma",
    "pgscan_kswapd_dma32",
    "pgscan_kswapd_normal",
    "pgscan_kswapd_movable",
    "pgscan_kswapd_high",
    "pgscan_kswapd",
]
_DIRECT_SCAN = [
    "pgscan_direct_dma",
    "pgscan_direct_dma32",
    "pgscan_direct_normal",
    "pgscan_direct_movable",
    "pgscan_direct_high",
    "pgscan_direct",
]

VMSTAT_ROWS: list[tuple[str, str]] = [
    ("mmtests_minor_faults", "Minor Faults"),
    ("pgmajfault", "Major Faults"),
    ("pswpin", "Swap Ins"),
    ("pswpout", "Swap Outs"),
    ("allocstall", "Allocation stalls"),
    ("fragment_stall", "Fragmentation stalls"),
    ("pgalloc_dma", "DMA allocs"),
    ("pgalloc_dma32", "DMA32 allocs"),
    ("pgalloc_normal", "Normal allocs"),
    ("pgalloc_movable", "Movable allocs"),
    ("mmtests_direct_scan", "Direct pages scanned"),
    ("mmtests_kswapd_scan", "Kswapd pages scanned"),
    ("mmtests_kswapd_steal", "Kswapd pages reclaimed"),
    ("mmtests_direct_steal", "Direct pages reclaimed"),
    ("mmtests_kswapd_efficiency", "Kswapd efficiency %"),
    ("mmtests_kswapd_velocity", "Kswapd velocity"),
    ("mmtests_direct_efficiency", "Direct efficiency %"),
    ("mmtests_direct_velocity", "Direct velocity"),
    ("mmtests_direct_percentage", "Percentage direct scans"),
    ("nr_vmscan_write", "Page writes by reclaim"),
    ("mmtests_vmscan_write_file", "Page writes file"),
    ("mmtests_vmscan_write_anon", "Page writes anon"),
    ("nr_vmscan_immediate_reclaim", "Page reclaim immediate"),
    ("pgpgin", "Sector Reads"),
    ("pgpgout", "Sector Writes"),
    ("pgrescued", "Page rescued immediate"),
    ("slabs_scanned", "Slabs scanned"),
    ("pginodesteal", "Direct inode steals"),
    ("kswapd_inodesteal", "Kswapd inode steals"),
    ("kswapd_skip_congestion_wait", "Kswapd skipped wait"),
    ("thp_fault_alloc", "THP fault alloc"),
    ("thp_fault_fallback", "THP fault fallback"),
    ("thp_collapse_alloc", "THP collapse alloc"),
    ("thp_collapse_alloc_failed", "THP collapse fail"),
    ("thp_split_page", "THP split"),
    ("thp_split_page_failed", "THP split failed"),
    ("compact_stall", "Compaction stalls"),
    ("compact_success", "Compaction success"),
    ("compact_fail", "Compaction failures"),
    ("mmtests_compact_efficiency", "Compaction efficiency"),
    ("pgmigrate_success", "Page migrate success"),
    ("pgmigrate_fail", "Page migrate failure"),
    ("compact_isolated", "Compaction pages isolated"),
    ("compact_migrate_scanned", "Compaction migrate scanned"),
    ("compact_free_scanned", "Compaction free scanned"),
    ("mmtests_cscan_efficiency", "Compact scan efficiency"),
    ("mmtests_compaction_cost", "Compaction cost"),
    ("compact_daemon_wake", "Kcompactd wake"),
    ("compact_daemon_migrate_scanned", "Kcompactd migrate scanned"),
    ("compact_daemon_free_scanned", "Kcompactd free scanned"),
    ("numa_hit", "NUMA alloc hit"),
    ("numa_miss", "NUMA alloc miss"),
    ("numa_interleave", "NUMA interleave hit"),
    ("numa_local", "NUMA alloc local"),
    ("mmtests_numa_pte_updates", "NUMA base-page range updates"),
    ("numa_pte_updates", "NUMA PTE updates"),
    ("numa_huge_pte_updates", "NUMA PMD updates"),
    ("numa_hint_faults", "NUMA hint faults"),
    ("numa_hint_faults_local", "NUMA hint local faults %"),
    ("mmtests_hint_local", "NUMA hint local percent"),
    ("numa_pages_migrated", "NUMA pages migrated"),
    ("mmtests_autonuma_cost", "AutoNUMA cost"),
]

# mmtests' cost models, in bytes touched (x86-64 values): a struct page access, a page copy
_CA = 56 / 8
_CPAGERW = _CA + 4096 / 8
_CMC = _CPAGERW * 2
_CMF = _CA * 2
_CI = _CA + 12


def vmstat_rows(delta: dict[str, float], elapsed: float | None) -> dict[str, float]:
    """mmtests-vmstat's rows for one iteration from its /proc/vmstat deltas."""
    v: dict[str, float] = {}
    d = dict(delta)
    for target, names in _RENAMED.items():
        present = [n for n in names if n in delta]
        if present:
            d[target] = delta[present[-1]]
    elapsed = elapsed or 1.0

    def get(key: str) -> float:
        return d.get(key, 0.0)

    v["mmtests_kswapd_steal"] = sum(get(k) for k in _KSWAPD_STEAL)
    v["mmtests_direct_steal"] = sum(get(k) for k in _DIRECT_STEAL)
    if "kswapd_steal" in d:
        v["mmtests_direct_steal"] -= v["mmtests_kswapd_steal"]
    v["mmtests_kswapd_scan"] = sum(get(k) for k in _KSWAPD_SCAN)
    v["mmtests_direct_scan"] = sum(get(k) for k in _DIRECT_SCAN)
    v["mmtests_kswapd_velocity"] = v["mmtests_kswapd_scan"] / elapsed
    v["mmtests_direct_velocity"] = v["mmtests_direct_scan"] / elapsed
    v["mmtests_direct_efficiency"] = (
        v["mmtests_direct_steal"] * 100 / v["mmtests_direct_scan"]
        if v["mmtests_direct_scan"]
        else 100.0
    )
    v["mmtests_kswapd_efficiency"] = (
        v["mmtests_kswapd_steal"] * 100 / v["mmtests_kswapd_scan"]
        if v["mmtests_kswapd_scan"]
        else 100.0
    )
    scanned = v["mmtests_kswapd_scan"] + v["mmtests_direct_scan"]
    v["mmtests_direct_percentage"] = v["mmtests_direct_scan"] * 100 / scanned if scanned else 0.0
    for key, _ in VMSTAT_ROWS:
        if not key.startswith("mmtests_"):
            v[key] = get(key)
    v["mmtests_vmscan_write_file"] = get("nr_vmscan_write") - get("pswpout")
    v["mmtests_vmscan_write_anon"] = get("pswpout")
    v["mmtests_minor_faults"] = get("pgfault") - get("pgmajfault")
    v["mmtests_hint_local"] = (
        get("numa_hint_faults_local") * 100 / get("numa_hint_faults")
        if get("numa_hint_faults")
        else 100.0
    )
    v["mmtests_numa_pte_updates"] = get("numa_pte_updates") + get("numa_huge_pte_updates") * 512
    cost = -1.0  # mmtests' "no compaction counters" marker, divided like a cost
    if "compact_migrate_scanned" in d:
        cost = (
            _CA * get("compact_migrate_scanned")
            + _CI * get("compact_isolated")
            + _CMC * get("pgmigrate_success")
            + _CMF * get("pgmigrate_fail")
        )
    if "compact_blocks_moved" in d:
        cost = (
            _CA * get("compact_blocks_moved") * 16384
            + _CMC * get("compact_pages_moved")
            + _CMF * get("compact_pagemigrate_failed")
        )
    v["mmtests_compaction_cost"] = cost / 1_000_000
    v["mmtests_autonuma_cost"] = (
        _CA * get("numa_pte_updates")
        + 5000 * get("numa_hint_faults")
        + _CI * get("numa_pages_migrated")
    ) / 1_000_000
    v["mmtests_compact_efficiency"] = (
        get("compact_success") * 100 / get("compact_stall") if get("compact_stall") else 0.0
    )
    free = get("compact_free_scanned")
    v["mmtests_cscan_efficiency"] = (
        get("compact_migrate_scanned") * 100 / free
        if get("compact_migrate_scanned") and free
        else 0.0
    )
    return v


def _iteration_deltas(ds: query.Dataset, suite: str, build_id: int) -> list[dict[str, float]]:
    """Per run of a kernel: its vmstat deltas plus ``duration.elapsed`` (for velocities)."""
    job_ids = {j.id for j in ds.jobs.values() if j.suite == suite}
    per_run: dict[int, dict[str, float]] = defaultdict(dict)
    smp = ds.samples()
    last = smp.last().tolist()
    for i, (run_id, metric_id) in enumerate(
        zip(smp.seg_run.tolist(), smp.seg_metric.tolist(), strict=True)
    ):
        run = ds.runs[run_id]
        if run.build_id != build_id or run.job_id not in job_ids:
            continue
        name = ds.metrics[metric_id].name
        if name.startswith("mmtests-vmstat.") or name == "duration.elapsed":
            per_run[run_id][name] = last[i]
    order = sorted(per_run, key=lambda r: (ds.runs[r].iteration, r))
    return [per_run[r] for r in order if any(k.startswith("mmtests-vmstat.") for k in per_run[r])]


def render_vmstat(ds: query.Dataset, suite: str) -> str:
    per_kernel: list[dict[str, float] | None] = []
    for k in ds.kernels:
        runs = _iteration_deltas(ds, suite, k.id)
        if not runs:
            per_kernel.append(None)
            continue
        rows = []
        for run in runs:
            delta = {
                n[len("mmtests-vmstat.") :]: x
                for n, x in run.items()
                if n.startswith("mmtests-vmstat.")
            }
            rows.append(vmstat_rows(delta, run.get("duration.elapsed")))
        per_kernel.append({key: max(r[key] for r in rows) for key, _ in VMSTAT_ROWS})
    if all(p is None for p in per_kernel):
        raise StackbenchError(f"no mmtests-vmstat deltas stored for the {suite} runs")
    label, op_w = "Ops", max(len(t) for _, t in VMSTAT_ROWS)
    lines = header(ds, len(label) + 1 + op_w, VMSTAT_FIELD)
    for key, title in VMSTAT_ROWS:
        lines.append(
            f"{label} {title:<{op_w}}"
            + "".join(f"{_num(p[key] if p else None):{VMSTAT_FIELD}.2f}" for p in per_kernel)
        )
    return "\n".join(lines) + "\n"
