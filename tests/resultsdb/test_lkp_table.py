"""The LKP ncompare table: layout, number formats, row choice and order (FORMATS.md §3)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from stackbench.resultsdb import query
from stackbench.resultsdb.tables import lkp, lkp_rule

RULER = "=" * 89


def make_dataset(
    columns: Sequence[tuple[str, dict[str, Sequence[float | Sequence[float]] | None]]],
    *,
    params: dict | None = None,
    suite: str = "vm-scalability",
    machine: str = "qemu-vm",
    config: str = "defconfig",
    compiler: str = "gcc-13",
    runs: int | None = None,
) -> query.Dataset:
    """An in-memory query.Dataset: per kernel label, stat -> one value (or sample list) per
    run; None leaves the stat out for that kernel."""
    if params is None:
        params = {"runtime": "300s", "test": "anon-w-seq-mt", "rootfs": "debian"}
    kernels = [
        query.Kernel(i + 1, f"{i + 1:040x}", label, config, compiler)
        for i, (label, _) in enumerate(columns)
    ]
    ds = query.Dataset(kernels=kernels)
    ds.jobs[1] = query.JobRow(1, suite, params.get("test", ""), params, "", "lkp")
    metric_ids: dict[str, int] = {}
    run_id = 0
    for kernel, (_, stats) in zip(kernels, columns, strict=True):
        n = runs or max((len(v) for v in stats.values() if v is not None), default=1)
        ids = []
        for it in range(n):
            run_id += 1
            ids.append(run_id)
            ds.runs[run_id] = query.RunRow(
                run_id, 1, kernel.id, machine, "qemu", it, "done", {}, {}
            )
        for stat, values in stats.items():
            if values is None:
                continue
            mid = metric_ids.setdefault(stat, len(metric_ids) + 1)
            ds.metrics[mid] = query.MetricRow(mid, stat, "", None, "")
            for rid, v in zip(ids, values, strict=False):
                samples = list(v) if isinstance(v, (list, tuple)) else [v]
                ds.values[(1, mid)][kernel.id][rid] = [float(x) for x in samples]
    return ds


def spread(mean: float, pct: float, n: int, integer: bool | None = None) -> list[float]:
    """n runs with this mean and a population stddev of ``pct`` percent of it."""
    if integer is None:
        integer = float(mean).is_integer() and abs(mean) >= 1000
    if n == 1 or pct == 0:
        return [mean] * n
    k = n - (n % 2)  # runs that alternate +d/-d; an odd run out sits on the mean
    d = abs(mean) * pct / 100 / math.sqrt(k / n)
    if integer:
        d = round(d)
    return [mean + d if i % 2 == 0 else mean - d for i in range(k)] + [mean] * (n - k)


def stat_names(text: str) -> list[str]:
    """The stats of the perf rows, in order."""
    names, inside = [], False
    for line in text.splitlines():
        if line.startswith("             \\  "):
            inside = True
        elif not line:
            inside = False
        elif inside:
            names.append(line.split()[-1])
    return names


def row_of(text: str, stat: str) -> str:
    rows = [line for line in text.splitlines() if line.endswith("  " + stat)]
    assert len(rows) == 1, text
    return rows[0]


def test_seed_row_from_runs_with_those_statistics():
    # base 6 runs: mean 6842353, stddev 0.87% (hidden); new: 4498326, 2.31% (FORMATS.md §3)
    ds = make_dataset(
        [
            ("base", {"vm-scalability.throughput": spread(6842353, 0.87, 6)}),
            ("new", {"vm-scalability.throughput": spread(4498326, 2.31, 6)}),
        ]
    )
    out = lkp.render(ds, all_rows=True)
    assert row_of(out, "vm-scalability.throughput") == (
        "   6842353           -34.3%    4498326 ±  2%  vm-scalability.throughput"
    )


def test_group_header_layout_exact():
    labels = [
        "6.6.0-rc4-mm-everything-2023-10-21-02-40+",
        "6.6.0-rc4-split-folio-in-compaction+",
        "short",
    ]
    ds = make_dataset([(label, {"vm-scalability.throughput": [100.0] * 3}) for label in labels])
    out = lkp.render(ds, all_rows=True)
    assert out == (
        f"{RULER}\n"
        "compiler/kconfig/rootfs/runtime/tbox_group/test/testcase:\n"
        "  gcc-13/defconfig/debian/300s/qemu-vm/anon-w-seq-mt/vm-scalability\n"
        "\n"
        "commit: \n"
        "  6.6.0-rc4-mm-everything-2023-10-21-02-40+\n"
        "  6.6.0-rc4-split-folio-in-compaction+\n"
        "  short\n"
        "\n"
        "6.6.0-rc4-mm-eve 6.6.0-rc4-split-folio-in-co                       short \n"
        "---------------- --------------------------- --------------------------- \n"
        "         %stddev     %change         %stddev     %change         %stddev\n"
        "             \\          |                \\          |                \\  \n"
        "    100.00            +0.0%     100.00            +0.0%     100.00        "
        "vm-scalability.throughput\n"
        "\n"
    )


def test_axes_differing_between_columns_leave_the_header():
    ds = make_dataset([("a", {"x.y": [1.0] * 3}), ("b", {"x.y": [1.0] * 3})])
    ds.kernels[1] = query.Kernel(2, "f" * 40, "b", "defconfig", "gcc-12")
    out = lkp.render(ds, all_rows=True)
    assert "kconfig/rootfs/runtime/tbox_group/test/testcase:\n" in out
    assert "compiler" not in out


def test_number_formats():
    n = 4
    ds = make_dataset(
        [
            (
                "base",
                {
                    "t.small": spread(3.97, 0, n),
                    "t.int": spread(18610, 29, n),
                    "t.big": spread(2.084e8, 2.5, n),
                    "t.percent%": spread(184.21, 0, n),
                    "perf-profile.self.cycles-pp.x": spread(3.0, 0, n),
                    "t.zero": spread(0.0, 0, n),
                },
            ),
            (
                "new",
                {
                    "t.small": spread(5.28, 2.4, n),
                    "t.int": spread(9704, 11.6, n),
                    "t.big": spread(2.1144e8, 3.5, n),
                    "t.percent%": spread(241.41, 2.3, n),
                    "perf-profile.self.cycles-pp.x": spread(1.5, 0, n),
                    "t.zero": spread(5.0, 0, n),
                },
            ),
        ]
    )
    out = lkp.render(ds, all_rows=True)
    assert row_of(out, "t.small") == "      3.97           +33.0%       5.28 ±  2%  t.small"
    assert row_of(out, "t.int") == "     18610 ± 29%     -47.9%       9704 ± 11%  t.int"
    assert row_of(out, "t.big") == " 2.084e+08 ±  2%      +1.5%  2.114e+08 ±  3%  t.big"
    # percentages and perf-profile shares change by points
    assert row_of(out, "t.percent%") == "    184.21           +57.2      241.41 ±  2%  t.percent%"
    assert row_of(out, "perf-profile.self.cycles-pp.x") == (
        "      3.00            -1.5        1.50        perf-profile.self.cycles-pp.x"
    )
    # a zero base: LKP divides by 1e-100 and prints the huge change with %.2g
    assert row_of(out, "t.zero") == "      0.00         +5e+102%       5.00        t.zero"


def test_mean_is_truncated_not_rounded():
    ds = make_dataset([("a", {"x.y": [1999.9] * 3}), ("b", {"x.y": [3000.9] * 3})])
    assert row_of(lkp.render(ds, all_rows=True), "x.y") == (
        "      1999           +50.1%       3000        x.y"
    )


def test_single_run_shows_no_stddev_and_stddev_uses_population():
    # runs 10 and 12: population stddev 1 = 9.09% of 11 (sample stddev would be 12.8%)
    ds = make_dataset([("a", {"x.y": [10.0, 12.0]}), ("b", {"x.y": [50.0]})])
    assert row_of(lkp.render(ds, all_rows=True), "x.y") == (
        "     11.00 ±  9%    +354.5%      50.00        x.y"
    )


def test_stat_missing_in_a_kernel():
    ds = make_dataset(
        [
            ("a", {"x.only_base": [3.78] * 3, "x.y": [1.0] * 3}),
            ("b", {"x.only_base": None, "x.only_new": [2.0] * 3, "x.y": [1.0] * 3}),
        ]
    )
    out = lkp.render(ds, all_rows=True)
    assert row_of(out, "x.only_base") == "      3.78          -100.0%       0.00        x.only_base"
    assert row_of(out, "x.only_new") == "      0.00         +2e+102%       2.00        x.only_new"


def test_several_samples_in_a_run_count_as_their_mean():
    # thpscale-like latencies: many samples per run, one value per run for LKP
    ds = make_dataset(
        [("a", {"lat.us": [[1.0, 3.0], [2.0, 2.0]]}), ("b", {"lat.us": [[4.0, 4.0], [5.0, 3.0]]})]
    )
    assert row_of(lkp.render(ds, all_rows=True), "lat.us") == (
        "      2.00          +100.0%       4.00        lat.us"
    )


def test_default_rows_are_lkp_changed_stats_against_the_base():
    base = {
        "vm-scalability.throughput": [100.0, 101.0, 102.0],
        "vm-scalability.median": [50.0, 50.5, 51.0],
        "proc-vmstat.pgfault": [5000.0, 5001.0, 5002.0],
        "meminfo.Active": [9000.0, 9001.0, 9002.0],
    }
    same = dict(base)
    # separated ranges, ratio > 1.01 (a benchmark stat) -> shown
    moved = dict(base, **{"vm-scalability.throughput": [110.0, 111.0, 112.0]})
    # proc-vmstat separated and above its floor (max > 1000) -> shown
    moved["proc-vmstat.pgfault"] = [7000.0, 7001.0, 7002.0]
    # meminfo +1.5%: not a perf metric, needs > 5% -> hidden
    moved["meminfo.Active"] = [9135.0, 9136.0, 9137.0]
    ds = make_dataset([("base", base), ("same", same), ("moved", moved)])
    out = lkp.render(ds)
    assert stat_names(out) == ["vm-scalability.throughput", "proc-vmstat.pgfault"]
    every = lkp.render(ds, all_rows=True)
    assert "vm-scalability.median" in every and "meminfo.Active" in every


def test_fewer_than_three_runs_on_both_sides_are_not_judged():
    ds = make_dataset([("a", {"x.y": [1.0, 1.0]}), ("b", {"x.y": [9.0, 9.0]})])
    assert lkp.render(ds).startswith("no stat changed by LKP's rule between a, b")


def test_row_order_benchmark_first_then_monitors_by_count_then_name():
    # the order of the 2020 robot report: vm-scalability.*, iostat (1), mpstat (1),
    # proc-vmstat (2)
    stats = [
        "proc-vmstat.pgpgout",
        "mpstat.cpu.all.soft%",
        "vm-scalability.throughput",
        "proc-vmstat.pgdeactivate",
        "iostat.cpu.iowait",
        "vm-scalability.free_time",
    ]
    ds = make_dataset([(k, {s: [1.0] * 3 for s in stats}) for k in ("a", "b")])
    out = lkp.render(ds, all_rows=True)
    assert stat_names(out) == [
        "vm-scalability.free_time",
        "vm-scalability.throughput",
        "iostat.cpu.iowait",
        "mpstat.cpu.all.soft%",
        "proc-vmstat.pgdeactivate",
        "proc-vmstat.pgpgout",
    ]


def test_failure_section():
    ds = make_dataset(
        [
            ("a", {"dmesg.WARNING:at_mm/x.c": [0.3, 0.3, 0.3, 0.3], "x.y": [1.0] * 4}),
            ("b", {"dmesg.WARNING:at_mm/x.c": [0.35, 0.35, 0.35, 0.35], "x.y": [1.0] * 4}),
        ]
    )
    out = lkp.render(ds, all_rows=True)
    assert (
        "       fail:runs  %reproduction    fail:runs\n"
        "           |             |             |    \n"
        "          1:4            5%           1:4     dmesg.WARNING:at_mm/x.c\n"
        "         %stddev     %change         %stddev\n"
    ) in out


def test_one_group_per_job_and_lone_kernel():
    ds = make_dataset([("only", {"x.y": [1.0, 2.0, 3.0]})])
    out = lkp.render(ds)
    assert out.count(RULER) == 1 and "commit: \n  only\n" in out
    assert row_of(out, "x.y") == "      2.00 ± 40%  x.y"


def test_job_run_by_one_kernel_only_is_left_out():
    ds = make_dataset([("a", {"x.y": [1.0] * 3}), ("b", {"x.y": [1.0] * 3})])
    # a second job that only kernel a ran
    ds.jobs[2] = query.JobRow(2, "thpscale", "", {"threads": "4"}, "", "mmtests")
    ds.runs[99] = query.RunRow(99, 2, ds.kernels[0].id, "qemu-vm", "qemu", 0, "done", {}, {})
    ds.metrics[50] = query.MetricRow(50, "thpscale.fault-huge-4", "", None, "")
    ds.values[(2, 50)] = defaultdict(dict, {ds.kernels[0].id: {99: [1.0]}})
    out = lkp.render(ds, all_rows=True)
    assert out.count(RULER) == 1 and "thpscale" not in out


def test_time_stats_of_monitors_are_performance_metrics():
    # LKP's perf-metrics-patterns make any '<...>.time.*' or 'time.*' stat a performance
    # metric: a separated +2% change is shown, as for benchmark stats; meminfo's is not
    base = {"time.voluntary_context_switches": [1000.0, 1001.0, 1002.0]}
    base["meminfo.Active"] = [9000.0, 9001.0, 9002.0]
    moved = {"time.voluntary_context_switches": [1020.0, 1021.0, 1022.0]}
    moved["meminfo.Active"] = [9180.0, 9181.0, 9182.0]
    ds = make_dataset([("base", base), ("moved", moved)])
    assert stat_names(lkp.render(ds)) == ["time.voluntary_context_switches"]
    assert lkp_rule.is_perf_metric("vm-scalability.time.elapsed_time")
    assert lkp_rule.is_perf_metric("lock_stat.zone->lock.contentions")
    assert not lkp_rule.is_perf_metric("boot-meminfo.Active")
