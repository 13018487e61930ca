"""thpscale, tests-timestamp/tests-sysstate and stress-highalloc parsers, and the statistics
behind the mmtests tables, on small hand-made inputs whose results are worked out by hand."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from stackbench.errors import InputError
from stackbench.jobs.benchmarks.parsers import highalloc, mmtests_logs, thpscale
from stackbench.resultsdb.tables import mmtests_stats as st

DATA = Path(__file__).parents[2] / "data" / "mmtests"

LOG3 = """\
Running with 3 threads
Using default advice

anoninit 0       1000
anoninit 1       1001
anoninit 2       1002
fileinit 0        500
fault 0 huge          100 1700000000.5 1
fault 1 base           20 1700000001.25 1
fault 2 huge          300 1700000002.125 0
fault 1 huge          200 1700000003.1 -1
fault 0 base           40 1700000004.9 0
"""


# ---------------------------------------------------------------- thpscale


def test_parse_log_series_in_file_order():
    s = thpscale.parse_log(LOG3, 3)
    assert s["fault-huge-3"] == [100, 300, 200]
    assert s["fault-base-3"] == [20, 40]
    assert s["fault-both-3"] == [100, 20, 300, 200, 40]


def test_parse_log_percentage_and_locality():
    s = thpscale.parse_log(LOG3, 3)
    assert s["Percentage huge-3"] == [60.0]  # 3 huge of 5 faults
    # per size: huge faults are local, remote, unknown -> 1/3 local, 1/3 remote
    assert s["local-huge-3"] == pytest.approx([100 / 3])
    assert s["remote-huge-3"] == pytest.approx([100 / 3])
    # base faults: one local, one remote
    assert s["local-base-3"] == [50.0]
    assert s["remote-base-3"] == [50.0]
    # unknown node: 1 of all 5 faults
    assert s["uncertain-3"] == [20.0]


def test_a_size_that_never_faulted_gets_one_zero_sample():
    s = thpscale.parse_log("fault 0 huge 7 1.2 1\nfault 0 huge 9 1.3 1\n", 1)
    assert s["fault-base-1"] == [0.0]
    assert s["fault-huge-1"] == [7, 9]
    assert s["Percentage huge-1"] == [100.0]
    assert "uncertain-1" not in s
    assert s["local-base-1"] == [0.0]


def test_a_log_without_faults_has_only_the_zero_samples():
    s = thpscale.parse_log("Running with 1 thread\nanoninit 0 5\n", 1)
    assert s == {"fault-base-1": [0.0], "fault-huge-1": [0.0]}


def test_extract_samples_numbering_counts_both_series():
    rows = thpscale.extract_samples(LOG3, 3)
    assert rows[:4] == [
        ("fault-huge-3", 1, 100.0),
        ("fault-both-3", 2, 100.0),
        ("fault-base-3", 3, 20.0),
        ("fault-both-3", 4, 20.0),
    ]
    only_huge = thpscale.extract_samples("fault 0 huge 5 1.1 1\n", 1)
    assert ("fault-base-1", 1, 0.0) in only_huge


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("fault 0 huge 100 1700000000.5", "malformed fault line"),
        ("fault 0 giant 100 1700000000.5 1", "neither 'huge' nor 'base'"),
        ("fault 0 huge 1e2 1700000000.5 1", "not a whole number"),
        ("fault 0 huge 100 1700000000 1", "not <sec>.<usec>"),
        ("fault 0 huge 100 1700000000.5 2", "is not 1, 0 or -1"),
        ("fault 3 huge 100 1700000000.5 1", "not in 0..2"),
        ("fault x huge 100 1700000000.5 1", "not in 0..2"),
    ],
)
def test_malformed_fault_lines_name_file_and_line(line, what):
    text = LOG3 + line + "\n"
    with pytest.raises(InputError) as exc:
        thpscale.parse_log(text, 3, "iter-0/thpscale/logs/threads-3.log")
    msg = str(exc.value)
    assert msg.startswith("iter-0/thpscale/logs/threads-3.log: line 13:")
    assert what in msg


def test_malformed_init_line():
    with pytest.raises(InputError, match="line 1: malformed anoninit"):
        thpscale.parse_log("anoninit 0\n", 1, "t.log")


def test_parse_dir_reads_plain_and_gzip(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "threads-1.log").write_text("fault 0 huge 10 1.1 1\n")
    (logs / "threads-12.log.gz").write_bytes(gzip.compress(b"fault 11 base 30 1.1 1\n"))
    (logs / "notes.txt").write_text("ignored")
    s = thpscale.parse_dir(logs)
    assert list(thpscale.find_logs(logs)) == [1, 12]
    assert s["fault-huge-1"] == [10]
    assert s["fault-base-12"] == [30]
    assert s["Percentage huge-12"] == [0.0]


def test_parse_dir_errors(tmp_path):
    with pytest.raises(InputError, match="missing thpscale logs directory"):
        thpscale.parse_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no threads-N.log"):
        thpscale.parse_dir(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "threads-1.log.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="threads-1.log.gz: cannot read thpscale log"):
        thpscale.parse_dir(bad)
    dup = tmp_path / "dup"
    dup.mkdir()
    (dup / "threads-1.log").write_text("")
    (dup / "threads-1.log.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(InputError, match="second log for 1 threads"):
        thpscale.parse_dir(dup)


def test_parse_dir_on_the_test_data():
    s = thpscale.parse_dir(DATA / "v6.8-rc1-base" / "iter-0" / "thpscale" / "logs")
    assert s["fault-huge-1"] == [100, 200, 300]
    assert s["fault-huge-2"] == [400, 600, 500]  # from the .gz log
    assert s["fault-base-2"] == [0.0]


# ---------------------------------------------------------------- tests-timestamp / sysstate

SYSSTATE = """\
start :: 100
version :: v1
test begin :: thpscale 101
file start :: /proc/vmstat
pgfault 10
compact_stall 1
file start :: /proc/zoneinfo
Node 0, zone   Normal
  pages free     5
file end :: /proc/vmstat
pgfault 30
compact_stall 4
thp_fault_alloc 9
file end :: /proc/zoneinfo
Node 0, zone   Normal
  pages free     3
test end :: thpscale 160 0
time :: thpscale 1.25 user 2.50 system 59.00 elapsed
finish :: 161
"""


def test_parse_sysstate_blocks_and_durations():
    book = mmtests_logs.parse_sysstate(SYSSTATE)
    assert book.version == "v1" and book.start == 100 and book.finish == 161
    rec = book.tests["thpscale"]
    assert (rec.begin, rec.end, rec.rc) == (101, 160, 0)
    assert rec.durations() == {"user": 1.25, "system": 2.5, "elapsed": 59.0}
    assert rec.start_files["/proc/zoneinfo"] == "Node 0, zone   Normal\n  pages free     5\n"
    start, end = mmtests_logs.find_vmstat(rec, "s")
    assert start == {"pgfault": 10, "compact_stall": 1}
    # a counter only in the end snapshot counts from zero, as in mmtests
    assert mmtests_logs.vmstat_delta(start, end) == {
        "pgfault": 20,
        "compact_stall": 3,
        "thp_fault_alloc": 9,
    }


def test_parse_timestamp():
    text = "start :: 1\ntest begin :: thpscale 2\ntest end :: thpscale 9 0\n"
    text += "time :: thpscale 0.50 user 1.00 system 7.00 elapsed\nfinish :: 10\n"
    rec = mmtests_logs.parse_timestamp(text).tests["thpscale"]
    assert rec.durations() == {"user": 0.5, "system": 1.0, "elapsed": 7.0}


@pytest.mark.parametrize(
    ("cut", "what"),
    [
        (lambda t: t.split("file end :: /proc/vmstat")[0], "began but has no 'test end'"),
        (
            lambda t: t.replace("file end :: /proc/vmstat\n", "x_unused 1\n"),
            "has no matching 'file end :: /proc/vmstat'",
        ),
        (lambda t: t.replace("59.00 elapsed", "59.00 elapse"), "malformed time line"),
        (lambda t: t.replace("compact_stall 4", "compact_stall four"), "malformed line"),
        (lambda t: t.replace("test begin :: thpscale 101", "test begin :: thpscale"), "malformed"),
        (lambda t: t.replace("test end :: thpscale 160 0", "test end :: other 160 0"), "never"),
    ],
)
def test_truncated_or_malformed_sysstate(cut, what):
    with pytest.raises(InputError) as exc:
        book = mmtests_logs.parse_sysstate(cut(SYSSTATE), "iter-0/tests-sysstate")
        mmtests_logs.find_vmstat(book.tests["thpscale"], "iter-0/tests-sysstate")
    assert str(exc.value).startswith("iter-0/tests-sysstate: ")
    assert what in str(exc.value)


def test_empty_vmstat_snapshot_is_an_error():
    text = SYSSTATE.replace("pgfault 30\ncompact_stall 4\nthp_fault_alloc 9\n", "")
    book = mmtests_logs.parse_sysstate(text, "ss")
    with pytest.raises(InputError, match="end /proc/vmstat snapshot is empty"):
        mmtests_logs.find_vmstat(book.tests["thpscale"], "ss")


def test_snapshot_in_timestamp_file_is_an_error():
    with pytest.raises(InputError, match="snapshot in a timestamp file"):
        mmtests_logs.parse_timestamp(SYSSTATE, "ts")


# ---------------------------------------------------------------- stress-highalloc

HIGHALLOC = """\
stress-highalloc: order 9
1 success 1000
2 failure 5000
3 success 1500
4 failure 6000
% Success: 50
5 success 900
% Success: 100
6 failure 100
7 failure 200
% Success: 0
"""


def test_highalloc_passes_and_latencies():
    s = highalloc.parse(HIGHALLOC)
    assert s["pass1"] == [50.0] and s["pass2"] == [100.0] and s["pass3"] == [0.0]
    assert s["latency-pass1"] == [1000, 5000, 1500, 6000]
    assert s["latency-pass2"] == [900]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (HIGHALLOC + "8 success 10\n", "1 attempts after the last '% Success:'"),
        (HIGHALLOC.replace("2 failure 5000", "2 failure 5e3"), "line 3: attempt time"),
        (HIGHALLOC.replace("2 failure 5000", "2 failure"), "line 3: malformed attempt"),
        (HIGHALLOC.replace("% Success: 50", "% Success: 150"), "not 0..100"),
        ("nothing here\n", "no '% Success:' line"),
        ("% Success: 10\n", "pass 1 made no attempts"),
    ],
)
def test_highalloc_errors(text, what):
    with pytest.raises(InputError) as exc:
        highalloc.parse(text, "highalloc.log")
    assert str(exc.value).startswith("highalloc.log: ")
    assert what in str(exc.value)


# ---------------------------------------------------------------- statistics


def test_gain_rules_and_edge_cases():
    assert st.pndiff(80, 100) == pytest.approx(20.0)  # lower is better: 20% better
    assert st.pdiff(80, 100) == pytest.approx(-20.0)
    assert st.pndiff(5, 5) == 0 and st.pdiff(5, 5) == 0
    assert st.pndiff(0, 5) == 100 and st.pdiff(0, 5) == 0
    assert st.pndiff(5, 0) == -99 and st.pdiff(5, 0) == 100


def test_summary_stats():
    data = [176.0, 183.0, 185.0]
    assert st.amean(data) == pytest.approx(181.3333, abs=1e-4)
    # sample stddev: squares 28.44 + 2.78 + 13.44 = 44.67, /2, sqrt
    assert st.stddev(data) == pytest.approx(4.7258, abs=1e-4)
    assert math.isnan(st.stddev([1.0]))
    assert st.coeffvar([1.0]) == 0
    # best 50% of 3 is int(1.5) = 1 sample, best 95% is 2
    assert st.best_mean(data, 50, False) == 176
    assert st.best_mean(data, 95, False) == 179.5
    assert st.best_mean(data, 50, True) == 185
    assert st.hmean([1.0, 4.0, 4.0]) == pytest.approx(2.0)


def test_ttest_two_degrees_of_freedom():
    # t = 61.33/sqrt(22.33/3) = 22.48 with df 3+1-2 = 2: p = 1 - t/sqrt(t^2+2) = 0.20%
    a, b = [176.0, 183.0, 185.0], [120.0]
    assert st.ttest_pvalue(a, b) == pytest.approx(0.00197, abs=2e-5)
    assert st.ttest_significant(a, b)
    assert not st.ttest_significant([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])


@pytest.mark.parametrize("df", [1, 2, 3, 7, 30, 999, 1000, 20_000, 400_000])
def test_student_t_tail_matches_scipy(df):
    # our continued fraction replaces scipy.special's stdtr (0.4 s to import): the printed
    # p (percent, two decimals) and the p < 0.10 decision must not move
    from scipy.special import stdtr

    for t in (0.0, 1e-5, 0.3, 1.0, 1.645, 1.96, 2.5, 6.0, 40.0):
        ref = float(stdtr(df, -t))
        assert st.student_t_sf(df, t) == pytest.approx(ref, rel=1e-9, abs=1e-300)


def test_ttest_with_zero_standard_errors():
    assert st.ttest_significant([5.0, 5.0], [6.0, 6.0])
    assert not st.ttest_significant([5.0, 5.0], [5.0])
    assert st.ttest_significant([5.0], [6.0])


def test_overlap_rule():
    # means 10 and 20, stddevs 1 and 1: 10 > 1.96 + 1.96, intervals apart
    assert st.overlap_significant([9.0, 10.0, 11.0], [19.0, 20.0, 21.0])
    # stddev 5 each: 10 < 19.6, intervals overlap
    assert not st.overlap_significant([5.0, 10.0, 15.0], [15.0, 20.0, 25.0])
    # one sample has no interval
    assert not st.overlap_significant([10.0], [20.0, 21.0])
