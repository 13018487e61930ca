"""Claims read from the seeds' cover letters, the robot-report excerpts and mmtests' real
outputs: every row of their tables, with the kernel column, the printed value and the
relative change it implies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SHARED, shared_fixtures

from stackbench.patches import claims


def seed(n: str) -> str:
    found = sorted((SHARED / "seeds").glob(f"{n}_*.txt"))
    if not found:
        pytest.skip(f"seed {n} not present under {SHARED / 'seeds'}")
    return found[0].read_text(errors="replace")


def rows(cs: list[claims.Claim]) -> list[tuple[str, str, float]]:
    return [(c.metric, c.kernel, c.printed_pct) for c in cs]


SEED000_CASES = [
    ("mmap-xread-seq-mt", [2.7, -4.0, 1.1, -0.4]),
    ("mmap-pread-seq", [-5.5, -1.7, -1.9, -2.0]),
    ("mmap-pread-seq-mt", [-18.3, -7.7, -8.8, -10.8]),
    ("lru-file-readtwice", [41.5, 30.4, 30.0, 32.3]),
    ("lru-file-mmap-read", [35.1, 32.3, 27.0, 25.9]),
    ("lru-file-mmap-read-rand", [0.3, 1.8, 0.1, -0.2]),
    ("anon-wx-seq-mt", [1.4, 1.4, 1.0, 1.2]),
    ("anon-w-seq-mt", [0.2, 0.4, 1.0, 0.3]),
    ("anon-wx-rand-mt", [3.3, 3.3, 1.0, 3.4]),
    ("anon-w-rand", [4.3, 2.4, 0.4, 3.5]),
    ("anon-w-rand-mt", [4.0, 4.0, 1.4, 3.2]),
    ("anon-cow-rand", [3.3, 2.6, 0.3, 3.0]),
    ("anon-cow-rand-mt", [0.8, 1.4, 1.1, 2.1]),
    ("shm-xread-seq", [1.4, 0.4, 1.7, 1.4]),
    ("shm-xread-seq-mt", [1.0, 0.6, 0.7, 0.1]),
    ("shm-pread-seq", [1.5, -0.4, 0.4, 0.8]),
    ("msync", [3.8, 7.2, 7.4, 14.2]),
    ("msync-mt", [2.0, -1.5, -3.1, -1.0]),
    ("truncate", [1.5, 6.5, -2.3, -2.1]),
]
SEED000_KERNELS = [
    "6.6.0-rc4-split-folio-in-compaction+",
    "6.6.0-rc4-folio-migration-in-compaction+",
    "6.6.0-rc4-folio-migration-free-page-split+",
    "6.6.0-rc4-folio-migration-free-page-split-sort-src+",
]
SEED000_BASE = "6.6.0-rc4-mm-everything-2023-10-21-02-40+"


def test_seed_000_every_lkp_row_and_the_highlights():
    cs = claims.parse(seed("000"))
    lkp = [c for c in cs if c.style == "lkp"]
    want = [
        ("vm-scalability.throughput", k, p, test)
        for test, pcts in SEED000_CASES
        for k, p in zip(SEED000_KERNELS, pcts, strict=True)
    ]
    assert [(c.metric, c.kernel, c.printed_pct, c.job["test"]) for c in lkp] == want
    assert {c.base for c in lkp} == {SEED000_BASE}
    assert all(c.job["suite"] == "vm-scalability" and c.job["runtime"] == "300s" for c in lkp)
    sized = {c.job["test"]: c.job.get("size") for c in lkp}
    assert sized["anon-w-seq-mt"] == "8T" and sized["truncate"] == "128G"
    assert sized["mmap-pread-seq"] is None
    first = lkp[8]  # mmap-pread-seq-mt, split folios: 14314960 -> 11691969 ± 2%
    assert (first.base_value, first.value, first.stddev_pct) == (14314960, 11691969, 2.0)
    assert first.change_pct == -18.3 and first.significant is None
    truncate = lkp[-4]
    assert truncate.base_value == 2.084e08 and truncate.stddev_pct == 3.0
    short = [c for c in cs if c.style == "short"]
    # each highlight is the table's figure for one column: it takes that column
    split, migrate = SEED000_KERNELS[:2]
    assert rows(short) == [
        ("mmap-pread-seq-mt", split, -18.3),
        ("mmap-pread-seq-mt", migrate, -7.7),
        ("lru-file-readtwice", split, 41.5),
        ("lru-file-readtwice", migrate, 30.4),
        ("lru-file-mmap-read", split, 35.1),
        ("lru-file-mmap-read", migrate, 32.3),
    ]
    assert all(c.base == SEED000_BASE and c.job["test"] == c.metric for c in short)
    assert short[0].value == 11691969 and short[0].stddev_pct == 2.0
    assert len(cs) == 82


SEED004_LATENCY = [
    (3, 3832.09, 2748.56, 28.28, True), (5, 4933.06, 4255.52, 13.73, False),
    (7, 7017.75, 6586.93, 6.14, False), (12, 11610.51, 9162.34, 21.09, True),
    (18, 17055.85, 11530.06, 32.40, True), (24, 19306.27, 17956.13, 6.99, False),
    (30, 22516.49, 15686.47, 30.33, True), (32, 23442.93, 16564.83, 29.34, True),
]  # fmt: skip
SEED004_HUGE = [
    (3, 85.99, 97.96, 13.92), (5, 88.27, 96.87, 9.74), (7, 85.87, 94.53, 10.09),
    (12, 82.38, 98.44, 19.49), (18, 83.29, 99.14, 19.04), (24, 81.41, 97.35, 19.57),
    (30, 80.98, 98.05, 21.08), (32, 80.53, 97.06, 20.53),
]  # fmt: skip


def test_seed_004_gains_stars_and_scan_rates():
    cs = claims.parse(seed("004"))
    assert {(c.style, c.kernel, c.base, c.job["suite"]) for c in cs} == {
        ("mmtests", "patches", "baseline", "thpscale")
    }
    lat = [c for c in cs if c.statistic == "Amean"]
    assert [(c.metric, c.base_value, c.value, c.printed_pct, c.significant) for c in lat] == [
        (f"Amean fault-both-{n}", b, v, g, s) for n, b, v, g, s in SEED004_LATENCY
    ]
    # a gain of latency (lower is better) is a fall of the value
    assert lat[0].change_pct == pytest.approx(-28.28, abs=0.01)
    huge = [c for c in cs if c.metric.startswith("Percentage")]
    assert [(c.metric, c.base_value, c.value, c.printed_pct) for c in huge] == [
        (f"Percentage huge-{n}", b, v, g) for n, b, v, g in SEED004_HUGE
    ]
    assert all(c.significant is None for c in huge)
    assert huge[0].change_pct == pytest.approx(13.92, abs=0.01)
    scans = [c for c in cs if c.metric.startswith("Compaction")]
    assert [(c.metric, c.base_value, c.value) for c in scans] == [
        ("Compaction migrate scanned", 55893379, 19341254),
        ("Compaction free scanned", 474739990, 11903963),
    ]
    # the cover letter's own words: "reduced by 65% ... reduced by 97.5%"
    assert [round(c.change_pct, 1) for c in scans] == [-65.4, -97.5]
    assert len(cs) == 18


SEED003_TESTS = {
    "hogger-frag-unmovable": {
        "compact_free_scanned": [2800710, 5615427, 6441095, 2235764],
        "compact_isolated": [58323, 114183, 2711081, 647701],
        "compact_migrate_scanned": [1078970, 2437597, 4175464, 1697292],
        "compact_stall": [341, 1066, 2059, 2092],
        "compact_success": [80, 123, 207, 210],
        "pgmigrate_success": [27034, 53832, 1348113, 318395],
        "Success:": [22, 29, 44, 40],
        "Success(N):": [46, 61, 90, 83],
    },
    "hogger-frag-movable": {
        "compact_free_scanned": [5240676, 5883401, 8103231, 1860428],
        "compact_isolated": [75048, 83201, 3108978, 427602],
        "compact_migrate_scanned": [2468387, 2755690, 4316163, 1474287],
        "compact_stall": [710, 664, 2117, 1964],
        "compact_success": [98, 102, 234, 183],
        "pgmigrate_success": [34869, 38663, 1547318, 208629],
        "Success:": [25, 26, 45, 44],
        "Success(N):": [53, 56, 94, 92],
    },
    "build-frag-unmovable": {
        "compact_free_scanned": [5032378, 4110920, 2538420, 1891170],
        "compact_isolated": [53368, 330762, 1020908, 534680],
        "compact_migrate_scanned": [1456516, 6164677, 4809150, 2667823],
        "compact_stall": [538, 746, 2609, 2500],
        "compact_success": [93, 350, 438, 403],
        "pgmigrate_success": [19926, 152754, 491609, 251977],
        "Success:": [15, 31, 39, 40],
        "Success(N):": [33, 65, 80, 81],
    },
    "build-frag-movable": {
        "compact_free_scanned": [3059086, 3852269, 2359553, 1461131],
        "compact_isolated": [129085, 238856, 907515, 387373],
        "compact_migrate_scanned": [5029856, 5051868, 3785605, 2177090],
        "compact_stall": [388, 540, 2195, 2157],
        "compact_success": [99, 218, 247, 225],
        "pgmigrate_success": [52898, 110021, 439739, 182366],
        "Success:": [38, 37, 43, 43],
        "Success(N):": [82, 77, 89, 90],
    },
}
SEED003_KERNELS = ["base", "nonmovable", "redesign", "threshold"]
SEED003_HIGHALLOC = {
    "Ops 1": [30.00, 8.33, 84.67, 78.00],
    "Ops 2": [32.33, 26.67, 84.33, 79.00],
    "Ops 3": [91.67, 92.00, 95.00, 94.00],
    "Compaction stalls": [5110, 5581, 10296, 10475],
    "Compaction success": [1787, 1807, 5173, 4744],
    "Compaction failures": [3323, 3774, 5123, 5731],
    "Compaction pages isolated": [6370911, 15421622, 30534650, 11825921],
    "Compaction migrate scanned": [52681405, 83721428, 150444732, 53517273],
    "Compaction free scanned": [418049611, 579768237, 310629538, 139433577],
    "Compaction cost": [3745, 8822, 17324, 6628],
}


def _expected_columns(table: dict[str, list[float]]) -> list[tuple[str, str, float, float]]:
    return [
        (metric, SEED003_KERNELS[i], vals[0], vals[i])
        for metric, vals in table.items()
        for i in range(1, 4)
    ]


def test_seed_003_value_tables_success_rows_and_the_hogger_variation():
    cs = claims.parse(seed("003"))
    for test, table in SEED003_TESTS.items():
        got = [c for c in cs if c.job.get("test") == test and "hogger" not in c.job]
        assert [(c.metric, c.kernel, c.base_value, c.value) for c in got] == _expected_columns(
            table
        ), test
        assert {c.base for c in got} == {"base"}
    ha = [c for c in cs if c.job["suite"] == "stress-highalloc"]
    assert [(c.metric, c.kernel, c.base_value, c.value) for c in ha] == _expected_columns(
        SEED003_HIGHALLOC
    )
    assert ha[0].style == "mmtests" and ha[0].change_pct == pytest.approx(-72.23, abs=0.01)
    # the free memory variation: one block per kernel, a hogger size per column
    var = [c for c in cs if "hogger" in c.job]
    assert [(c.metric, c.job["hogger"], c.base_value, c.value) for c in var] == [
        ("Success:", "150MB", 41, 44), ("Success:", "200MB", 25, 44),
        ("Success:", "250MB", 17, 42), ("Success:", "300MB", 9, 37),
        ("Success(N):", "150MB", 87, 94), ("Success(N):", "200MB", 53, 92),
        ("Success(N):", "250MB", 37, 91), ("Success(N):", "300MB", 22, 80),
    ]  # fmt: skip
    assert {(c.kernel, c.base, c.job.get("test")) for c in var} == {
        ("bzImage-improve-threshold", "bzImage-improve-base", "hogger-frag-movable")
    }
    # single-kernel tables (the limitations section) claim nothing
    assert len(cs) == 4 * 8 * 3 + 10 * 3 + 8


SEED001_BASE = [7894, 9496, 12561, 15295, 18244, 21229, 27556, 30147, 31047, 32859, 33799]
SEED001_NEW = [2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 429]
PCTS = [5, 10, 25, 30, 40, 50, 60, 75, 80, 90, 95]


def test_seed_001_percentiles_before_and_after():
    cs = claims.parse(seed("001"))
    assert [(c.metric, c.base_value, c.value) for c in cs] == [
        (f"latency p{p}", b, n) for p, b, n in zip(PCTS, SEED001_BASE, SEED001_NEW, strict=True)
    ] + [("Total 2M hugepages allocated", 383859, 384105)]
    assert {(c.kernel, c.base) for c in cs} == {
        ("5.6.0-rc3 + this patch, with proactiveness=20", "vanilla 5.6.0-rc3")
    }
    assert cs[5].change_pct == pytest.approx((4 - 21229) * 100 / 21229, abs=1e-3)


def test_robot_reports_skip_absolute_rows_and_failures():
    path = shared_fixtures("lkp", "reports")
    old = claims.parse(next(path.glob("lkml-2020-*")).read_text())
    assert [(c.metric, c.printed_pct, c.stddev_pct) for c in old][:4] == [
        ("vm-scalability.free_time", 33.0, 2.0),
        ("vm-scalability.median", -2.4, None),
        ("vm-scalability.throughput", -2.7, None),
        ("vm-scalability.time.elapsed_time", 6.4, None),
    ]
    names = [c.metric for c in old]
    # "+57.2" of stddev% is an absolute difference, the fail:runs rows are failures
    assert "vm-scalability.stddev%" not in names and "mpstat.cpu.all.soft%" not in names
    assert not any(n.startswith("perf-profile") for n in names)
    assert ("proc-vmstat.pgdeactivate", 7663.4) in [(c.metric, c.printed_pct) for c in old]
    assert {(c.kernel, c.base) for c in old} == {("aae466b005", "3852f6768e")}
    assert old[0].job["test"] == "swap-w-rand-mt" and old[0].job["thp_enabled"] == "never"
    new = claims.parse(next(path.glob("lkml-2025-*")).read_text())
    assert len(new) == 17 and new[7].metric == "vm-scalability.throughput"
    assert (new[7].base_value, new[7].value, new[7].printed_pct) == (36255698, 33421568, -7.8)
    assert new[1].base_value == 1.457e10 and new[1].stddev_pct == 3.0


def test_a_quoted_reply_reads_like_the_report():
    path = shared_fixtures("lkp", "reports")
    text = next(path.glob("lkml-2025-*")).read_text()
    quoted = "On Tue, the robot wrote:\n" + "".join(f"> {ln}\n" for ln in text.splitlines())
    assert rows(claims.parse(quoted)) == rows(claims.parse(text))


def test_mmtests_goldens_every_row():
    base = shared_fixtures("mmtests")
    for name in ("golden-thpscale-b0b1d143", "golden-thpchallenge-638401e0"):
        text = (base / name / "compare-latency.txt").read_text()
        cs = claims.parse(text)
        body = [ln for ln in text.splitlines()[2:] if ln.strip()]
        assert len(cs) == len(body), name
        for c, ln in zip(cs, body, strict=True):
            assert ln.split()[:2] == c.metric.split()
            assert (c.kernel, c.base) == ("patches", "baseline")
        means = [c for c in cs if c.statistic == "Amean"]
        assert means and all(c.stddev_pct is not None for c in means)
    cs = claims.parse((base / "golden-thpscale-b0b1d143" / "compare-latency.txt").read_text())
    amean = next(c for c in cs if c.metric == "Amean fault-base-1")
    assert (amean.printed_pct, amean.significant) == (33.82, True)
    assert amean.change_pct == pytest.approx((120 - 181.33) * 100 / 181.33, abs=1e-3)
    # a ratio table is not a gain table
    ratio = base / "golden-thpchallenge-638401e0" / "compare-latency-print-ratio.txt"
    assert claims.parse(ratio.read_text()) == []
    stream = claims.parse((base / "real-outputs" / "example_html_report-tables.txt").read_text())
    assert [(c.metric, c.kernel, c.base, c.printed_pct) for c in stream][:2] == [
        ("MB/sec copy", "TEST_RUN_BUSY", "TEST_RUN", -20.07),
        ("MB/sec scale", "TEST_RUN_BUSY", "TEST_RUN", -20.03),
    ]


def test_mmtests_without_stars_and_statistic_last():
    text = (
        "              vanilla           patched\n"
        "sys-time% Amean      10.00 (  0.00%)       8.00 ( 20.00%)\n"
        "sys-time% Stddev      1.00 (  0.00%)       2.00 (-100.00%)\n"
    )
    cs = claims.parse(text)
    assert [(c.metric, c.statistic, c.kernel, c.base, c.printed_pct) for c in cs] == [
        ("sys-time% Amean", "Amean", "patched", "vanilla", 20.0),
        ("sys-time% Stddev", "Stddev", "patched", "vanilla", -100.0),
    ]
    assert cs[0].significant is None and cs[0].stddev_pct == 25.0
    assert cs[0].change_pct == -20.0


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stackbench", "claims", *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_cli_json_table_empty_and_unreadable(tmp_path):
    empty = tmp_path / "plain.txt"
    empty.write_text("Hi,\n\nthis series makes things 12 times nicer.\n\nThanks\n")
    r = _cli(str(empty), "--json")
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "[]", "")
    # mapped to kernels, still nothing
    r = _cli(str(empty), "--json", "--kernel", "v6.1", "--kernel", "mm-patch")
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "[]", "")
    r = _cli(str(tmp_path / "missing.txt"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "missing.txt" in r.stderr and "Traceback" not in r.stderr
    r = _cli("-", "--json", stdin=seed("004"))
    assert r.returncode == 0
    got = json.loads(r.stdout)
    assert len(got) == 18
    first = got[0]
    assert {k: first[k] for k in ("style", "job", "kernel", "metric", "printed_pct")} == {
        "style": "mmtests", "job": {"suite": "thpscale"}, "kernel": "patches",
        "metric": "Amean fault-both-3", "printed_pct": 28.28,
    }  # fmt: skip
    assert first["stddev_pct"] is None and first["significant"] is True
    assert isinstance(first["change_pct"], float)
    r = _cli("-", stdin=seed("004"))
    assert r.returncode == 0 and "Amean fault-both-3" in r.stdout and "+28.28%" in r.stdout


HOSTILE = [
    "",
    "=" * 89,
    "compiler/testcase:\n  gcc/vm-scalability\n\ncommit: \n  a\n",
    "compiler/testcase:\n  gcc/vm-scalability\n\ncommit: \n  a\n  b\n\n"
    "a b\n---------------- --------------------------- \n",
    "baseline patches Amean fault-both-3 1e999 ( 0.00%) 2.0 (  1.00%)",
    "Amean fault-both-3 1.0 (   0.00%) 2.0 ( " + "9" * 400 + "%)",
    "x: +" + "9" * 400 + "% if something",
    "percentile latency\n5 \u00b2\n10 3\n",
    "Total 2M hugepages allocated = \u00b2\n",
    "compact_stall 0 5\nSuccess: 0 0\n",
    "Ops 1 30 40\nOps 2",
    "Hogger: 1MB 2MB\nk1 Success: 1 2\nk2 Success: 3 4",
    "> " * 500 + "Amean a 1.0 ( 0.00%) 2.0 ( -100.00%)",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_gives_finite_claims_or_none(text):
    cs = claims.parse(text)
    json.dumps([c.as_json() for c in cs], allow_nan=False)
    claims.format_table(cs)
    # a base of 0 to anything else has no relative change: no claim
    assert all(c.base_value != 0 or c.value == 0 for c in cs if c.base_value is not None)


def test_a_highlight_no_table_confirms_keeps_its_words():
    text = "mmap-pread-seq-mt: -18.3% if split folios during compaction.\n"
    (c,) = claims.parse(text)
    assert (c.kernel, c.base, c.job, c.columns) == (
        "split folios during compaction", None, {"suite": ""}, (),
    )  # fmt: skip


def test_short_before_after_list_and_arrows():
    text = (
        "Before:\n  - pgfault: 1200\n  - elapsed: 35.5 s\n  - thp_fault_alloc: 300\n\n"
        "After (with this series):\n  - pgfault: 1000\n  - elapsed: 30.1 s\n"
        "  - thp_fault_alloc: 330\n\nAnd compact_stall: 710 -> 355 on the big box.\n"
    )
    cs = claims.parse(text)
    assert [(c.metric, c.kernel, c.base, c.base_value, c.value) for c in cs] == [
        ("pgfault", "After (with this series)", "Before", 1200, 1000),
        ("elapsed", "After (with this series)", "Before", 35.5, 30.1),
        ("thp_fault_alloc", "After (with this series)", "Before", 300, 330),
        ("compact_stall", "after", "before", 710, 355),
    ]
    assert all(c.style == "short" and c.printed_pct == c.change_pct for c in cs)
    assert cs[0].change_pct == pytest.approx(-16.6667, abs=1e-3)
    assert cs[3].change_pct == -50.0


def test_cli_maps_to_the_kernels_given():
    r = _cli("-", "--kernel", "v6.1", "--kernel", "mm-new", "--json", stdin=seed("004"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    first = got[0]
    assert (first["job"], first["metric"], first["base_index"], first["kernel_index"]) == (
        "thpscale", "thpscale.fault-both-3", 0, 1,
    )  # fmt: skip
    assert first["claim"]["metric"] == "Amean fault-both-3" and first["reason"] is None
    r = _cli("-", "--kernel", "v6.1", "--kernel", "mm-new", stdin=seed("004"))
    assert "not mapped: 12 threads is beyond thpscale's 4 x CPUs on the 2-vCPU guest" in r.stdout
    r = _cli("-", "--kernel", "v6.1", "--cpus", "0", stdin=seed("004"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "too small" in r.stderr


def test_a_mail_is_read_through_its_encoding():
    import email.message

    table = shared_fixtures("lkp", "reports")
    text = next(table.glob("lkml-2025-*")).read_text()
    msg = email.message.EmailMessage()
    msg["From"] = "kernel test robot <oliver.sang@intel.com>"
    msg["Subject"] = "[linux-next:master] 6af8cb80d3: vm-scalability.throughput -7.8% regression"
    msg.set_content("Hello,\n\n" + text, cte="quoted-printable")
    raw = b"From mboxrd@z Thu Jan  1 00:00:00 1970\n" + msg.as_bytes()
    assert b"=C2=B1" in raw or b"=B1" in raw  # the "±" is encoded in the mail
    assert rows(claims.parse(claims.mail_text(raw))) == rows(claims.parse(text))
    # "Key: value" lines at the top of a text are not a mail's headers
    plain = "Highlights: a list\nmmap-pread-seq-mt: -18.3% if split\n"
    assert claims.mail_text(plain.encode()) == plain
    r = _cli("-", "--json", stdin=raw.decode())
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 17


def test_seed_002_an_authors_signed_table_without_line_breaks():
    cs = claims.parse(seed("002"))
    assert len(cs) == 32
    assert {(c.style, c.kernel, c.base) for c in cs} == {("short", "PATCHED", "VANILLA")}
    first, second = cs[0], cs[1]
    assert (first.metric, first.base_value, first.value, first.printed_pct) == (
        "Hugealloc Time mean", 165843.93, 113025.88, -31.85,
    )  # fmt: skip
    assert second.metric == "Hugealloc Time stddev"
    # its percentages are changes, new against base: the values agree
    assert all(abs(c.printed_pct - c.change_pct) < 3.0 for c in cs)
