"""LKP's vm-scalability parse on our own raw outputs (every line kind of FORMATS.md §1)."""

from __future__ import annotations

import io
import math
import sys

import pytest

from stackbench import cli
from stackbench.jobs.benchmarks.parsers import vm_scalability as vms

CASE = "2024-01-02 03:04:05  ./case-anon-w-seq-mt\n"


def parsed(text: str) -> dict:
    return dict(vms.parse(text))


def test_usemem_samples_are_split_by_case_lines():
    raw = (
        CASE
        + "1073741824 bytes / 1000000 usecs = 1048576 KB/s\n"
        + "1073741824 bytes / 2000000 usecs = 524288 KB/s\n"
        + "1073741824 bytes / 1000000 usecs = 1048576 KB/s\n"
        + CASE
        + "1073741824 bytes / 1000000 usecs = 1048576 KB/s\n"
        + "1073741824 bytes / 1000000 usecs = 1048576 KB/s\n"
        + "1073741824 bytes / 1000000 usecs = 1048576 KB/s\n"
        + "1000000 usecs to free memory\n"
        + "3000000 usecs to free memory\n"
    )
    stats = vms.parse(raw)
    keys = [k for k, _ in stats]
    assert keys == ["throughput", "stddev%", "free_time", "median", "median_stddev%", "workload"]
    d = dict(stats)
    # per sample: sums 2621440 and 3145728 -> mean 2883584
    assert d["throughput"] == 2883584
    # population stddev of the two sums / mean
    assert d["stddev%"] == pytest.approx(float(f"{262144 / 2883584 * 100:g}"))
    assert d["free_time"] == 2
    # upper medians 1048576 and 1048576
    assert d["median"] == 1048576 and d["median_stddev%"] == 0
    assert d["workload"] == 6 * 1073741824 / 1024


def test_single_sample_stddev_scales_by_tasks():
    raw = CASE + "".join(f"100 bytes / 1 usecs = {k} KB/s\n" for k in (10, 20, 30, 40))
    d = parsed(raw)
    # one sample: pstddev(per-task) * N / mean(per-task) * 100
    expect = math.sqrt(125) * 4 / 25 * 100
    assert d["stddev%"] == pytest.approx(float(f"{expect:g}"))
    assert d["median"] == 30  # upper median of 4 tasks
    assert d["median_stddev%"] == 0


def test_dd_truncate_remap_lines():
    raw = (
        CASE
        + "1048576000 bytes (1.0 GB, 1000 MiB) copied, 2 s, 500 MB/s\n"
        + "2097152 bytes truncated in 11.5-11.0 seconds\n"
        + "4194304 bytes remapped, 4096 usecs, 1024 MB/s\n"
    )
    d = parsed(raw)
    # dd: (N>>10)/S = 512000; truncate: 2048/0.5 = 4096; remap: N/(U>>10) = 1048576
    assert d["throughput"] == 512000 + 4096 + 1048576
    assert d["median"] == 512000  # sorted [4096, 512000, 1048576][1]
    assert d["workload"] == (1048576000 + 2097152 + 4194304) / 1024


def test_faulted_lines_make_a_fault_series():
    raw = (
        CASE
        + "1048576 bytes truncated in 2.0-1.0 seconds\n"
        + "2097152 bytes faulted in 3.0-1.0 seconds\n"
        + CASE
        + "1048576 bytes truncated in 2.0-1.0 seconds\n"
        + "4194304 bytes faulted in 3.0-1.0 seconds\n"
    )
    stats = vms.parse(raw)
    assert [k for k, _ in stats] == [
        "throughput",
        "stddev%",
        "median",
        "median_stddev%",
        "workload",
        "throughput_fault",
        "stddev_fault%",
        "median_fault",
        "median_fault_stddev%",
    ]
    d = dict(stats)
    assert d["throughput"] == 1024 and d["stddev%"] == 0
    assert d["throughput_fault"] == 1536  # mean of 1024 and 2048
    assert d["stddev_fault%"] == pytest.approx(float(f"{512 / 1536 * 100:g}"))
    assert d["median_fault"] == 1536
    # faulted bytes are not part of the workload
    assert d["workload"] == 2 * 1048576 / 1024


def test_migrate_line_printed_where_it_appears():
    raw = CASE + "4 * 1048576 bytes migrated, 1000 usecs, 4000 MB/s\n"
    raw += "100 bytes / 1 usecs = 97 KB/s\n"
    stats = vms.parse(raw)
    assert stats[0] == ("migrate_mbps", 4000)
    # LKP adds the MB/s figure to the byte count (kept for identical output)
    assert dict(stats)["workload"] == float(f"{(4000 + 100) / 1024:.2f}")


def test_output_ending_in_a_case_line_stops_after_throughput():
    raw = CASE + "100 bytes / 1 usecs = 97 KB/s\n" + CASE
    assert vms.parse(raw) == [("throughput", 97)]


def test_nothing_recognised_gives_no_stats():
    assert vms.parse("hello\n" + CASE) == []
    assert vms.format_stats([]) == ""


def test_format_stats_spacing_and_number_forms():
    stats = [
        ("migrate_mbps", 4000),
        ("throughput", 467497),
        ("stddev%", 5.03915),
        ("free_time", 25.4235),
        ("median", 14619),
        ("median_stddev%", 0),
        ("workload", 402653184.0),
        ("stddev_fault%", 1.5),
    ]
    assert vms.format_stats(stats) == (
        "migrate_mbps: 4000\n"
        "throughput: 467497\n"
        "stddev%:   5.03915\n"
        "free_time:  25.4235\n"
        "median: 14619\n"
        "median_stddev%: 0\n"
        "workload: 402653184.00\n"
        "stddev_fault%:   1.5\n"
    )


def test_to_samples_prefixes_keys():
    assert vms.to_samples([("throughput", 5), ("migrate_mbps", 1), ("migrate_mbps", 2)]) == {
        "vm-scalability.throughput": [5.0],
        "vm-scalability.migrate_mbps": [1.0, 2.0],
    }


def test_cli_parse_file_and_stdin(tmp_path, capsys, monkeypatch):
    raw = CASE + "100 bytes / 1 usecs = 97 KB/s\n"
    f = tmp_path / "vm-scalability"
    f.write_text(raw)
    assert cli.main(["parse", "vm-scalability", str(f)]) == 0
    from_file = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(raw))
    assert cli.main(["parse", "vm-scalability", "-"]) == 0
    assert capsys.readouterr().out == from_file
    assert from_file.startswith("throughput: 97\nstddev%:   0\n")


def test_cli_parse_missing_file(tmp_path, capsys):
    assert cli.main(["parse", "vm-scalability", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stackbench: error: ") and "nope" in err
