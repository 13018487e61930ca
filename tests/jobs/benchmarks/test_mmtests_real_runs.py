"""mmtests runs as run-mmtests.sh really leaves them: more bookkeeping lines than stackbench
reads (``arch :: x86_64``, the ``ip addr``/``mount`` output after them, ``status :: RC``),
tests-sysstate gzipped with a stub beside it, monitor logs, dmesg.gz, a benchmark stackbench
does not know. The run is turned into that shape following run-mmtests.sh and
shellpacks/common.sh (sysstate_log_basic_info, the per-iteration ``gzip -f
$SHELLPACK_SYSSTATEFILE``, ``teststate_log "status :: $EXIT_CODE"`` after the last
iteration); it must import, keep the unknown lines as run metadata and compare exactly like
the plain run. Malformed values are still refused with the file and the line.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from conftest import shared_fixtures
from helpers.cli import cli
from sqlalchemy import text
from test_mmtests_conformance import CASES, GOLDEN, _lines

DATA = Path(__file__).parents[2] / "data" / "mmtests"
BASIC_INFO = """\
arch :: x86_64
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    inet6 ::1/128 scope host
       valid_lft forever preferred_lft forever
mount :: start
sysfs on /sys type sysfs (rw,nosuid,nodev,noexec,relatime)
/proc/mounts :: start
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
"""
LOCK_STAT = """\
file end :: /proc/lock_stat
lock_stat version 0.4
-----------------------------------------------------------------------------
"""


def as_run_mmtests_writes(run: Path) -> None:
    iters = sorted(run.glob("iter-*"))
    for it in iters:
        ss = it / "tests-sysstate"
        lines = ss.read_text().splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.startswith("version :: ")) + 1
        text_ = "".join(lines[:at]) + BASIC_INFO + "".join(lines[at:])
        # on a CONFIG_LOCK_STAT kernel /proc/lock_stat is zeroed at test begin and logged
        # only at the end
        at = next(i for i, x in enumerate(text_.splitlines(True)) if x.startswith("test end"))
        parts = text_.splitlines(True)
        text_ = "".join(parts[:at] + [LOCK_STAT] + parts[at:])
        (it / "tests-sysstate.gz").write_bytes(gzip.compress(text_.encode()))
        ss.unlink()
        for name in ("vmstat-thpscale.gz", "proc-vmstat-thpscale.gz", "dmesg.gz"):
            (it / name).write_bytes(gzip.compress(b"monitor output\n"))
        (it / "vmstat-thpscale.start").write_text("1700000001\n12.34 45.67\n")
        (it / "stream" / "logs").mkdir(parents=True)
        (it / "stream" / "logs" / "stream.log").write_text("a benchmark stackbench skips\n")
    # lines logged after the last iteration's gzip: a new tests-sysstate, and the timestamp
    (iters[-1] / "tests-sysstate").write_text("status :: 0\n")
    ts = iters[-1] / "tests-timestamp"
    ts.write_text(ts.read_text() + "status :: 0\n")


@pytest.fixture
def real_run(tmp_path: Path) -> Path:
    run = tmp_path / "v6.8-rc1-base"
    shutil.copytree(DATA / "v6.8-rc1-base", run)
    as_run_mmtests_writes(run)
    return run


def test_real_shaped_run_imports_and_compares_like_the_plain_one(eng, real_run, tmp_path):
    rc, out, err = cli("import", "mmtests", "--verbose", str(real_run))
    assert rc == 0, err
    assert out.startswith("mmtests run v6.8-rc1-base: 2 iteration(s) of thpscale, 2 run(s)")
    # what is skipped is said under --verbose, and only then
    it1 = real_run / "iter-1"
    assert (
        f"stackbench: note: skipped in {it1}: dmesg.gz, proc-vmstat-thpscale.gz, stream/, "
        "vmstat-thpscale.gz, vmstat-thpscale.start\n"
    ) in err
    assert f"stackbench: note: {it1}: kept as run metadata (mmtests_sysstate): " in err
    with eng.connect() as conn:
        metas = conn.execute(text("SELECT meta FROM run ORDER BY iteration")).scalars().all()
    assert metas[0]["mmtests_sysstate"] == {
        "arch": "x86_64",
        "mount": "start",
        "/proc/mounts": "start",
    }
    assert metas[1]["mmtests_sysstate"]["status"] == "0"
    assert metas[0]["mmtests_version"] == "stackbench-test-data"

    # the same run as the test data holds it, under a name of the same width
    assert cli("import", "mmtests", "--name", "v6.8-rc1-flat", str(DATA / "v6.8-rc1-base"))[0] == 0
    assert cli("import", "mmtests", str(DATA / "v6.8-rc1-patched"))[0] == 0
    for how in (["--table", "latency"], ["--table", "counts"], ["--monitor", "vmstat"]):
        tables = []
        for base in ("v6.8-rc1-base", "v6.8-rc1-flat"):
            rc, got, err = cli("compare", "--style", "mmtests", *how, base, "v6.8-rc1-patched")
            assert rc == 0, err
            tables.append(got.replace(base, "BASE").replace(base[-4:], "base"))
        assert tables[0] == tables[1] and "base" in tables[0], how


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("test begin :: thpscale 17000x", "begin time '17000x' is not an epoch"),
        ("time :: thpscale 1.00 user ten system 20.00 elapsed", "malformed time line"),
    ],
)
def test_malformed_known_lines_are_refused_with_file_and_line(eng, real_run, line, message):
    ts = real_run / "iter-0" / "tests-timestamp"
    lines = ts.read_text().splitlines()
    key = line.split(" :: ")[0]
    n = next(i for i, x in enumerate(lines) if x.startswith(key + " :: "))
    lines[n] = line
    ts.write_text("\n".join(lines) + "\n")
    rc, out, err = cli("import", "mmtests", str(real_run))
    assert (rc, out) == (1, "")
    assert err.startswith(f"stackbench: error: {ts}: line {n + 1}: ")
    assert message in err and err.count("\n") == 1
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_malformed_vmstat_number_names_the_line(eng, real_run):
    gz = real_run / "iter-1" / "tests-sysstate.gz"
    body = gzip.decompress(gz.read_bytes()).decode().replace("pgfault 4000", "pgfault 4O00")
    gz.write_bytes(gzip.compress(body.encode()))
    n = body.splitlines().index("pgfault 4O00") + 1
    rc, out, err = cli("import", "mmtests", str(real_run))
    assert rc == 1
    assert err == (
        f"stackbench: error: {gz}: line {n}: end /proc/vmstat snapshot: malformed line "
        "'pgfault 4O00'\n"
    )


def test_stray_text_outside_any_record_is_refused(eng, real_run):
    ts = real_run / "iter-0" / "tests-timestamp"
    ts.write_text("start :: 1700000000\nsome text\n" + ts.read_text().split("\n", 1)[1])
    rc, _, err = cli("import", "mmtests", str(real_run))
    assert rc == 1 and f"{ts}: line 2: unexpected line 'some text'" in err


def test_no_notes_without_verbose(eng, real_run):
    rc, out, err = cli("import", "mmtests", str(real_run))
    assert (rc, err) == (0, "") and out.startswith("mmtests run v6.8-rc1-base")


@pytest.mark.parametrize("golden", sorted(CASES))
def test_golden_runs_in_real_shape_match_compare_mmtests(eng, tmp_path, golden):
    """The golden work-log (its tables printed by the real compare-mmtests.pl) reshaped as
    run-mmtests.sh writes a run: the same tables."""
    root = shared_fixtures(*GOLDEN)
    for run in ("baseline", "patches"):
        dst = tmp_path / run
        shutil.copytree(root / "work-log" / run, dst)
        dst.chmod(0o755)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        as_run_mmtests_writes(dst)
        rc, out, err = cli("import", "mmtests", str(dst))
        assert rc == 0, err
    if "significance" in golden:
        from stackbench.resultsdb.tables import render

        out = render.render(eng, ["baseline", "patches"], style="mmtests", table="significance")
    else:
        rc, out, err = cli("compare", "--style", "mmtests", "baseline", "patches", *CASES[golden])
        assert rc == 0, err
    assert _lines(out) == _lines((root / golden).read_text())


def test_failed_benchmark_gnu_time_status_line(eng, real_run):
    """thpscale-era mmtests logs no exit code on 'test end'; GNU time's status line, copied
    from its output file after 'test end', says the benchmark failed."""
    ts = real_run / "iter-1" / "tests-timestamp"
    lines = ts.read_text().splitlines(True)
    at = next(i for i, x in enumerate(lines) if x.startswith("test end"))
    lines[at] = " ".join(lines[at].split()[:-1]) + "\n"  # no exit code
    lines.insert(at + 1, "Command exited with non-zero status 3\n")
    ts.write_text("".join(lines))
    rc, out, err = cli("import", "mmtests", str(real_run))
    assert rc == 0, err
    with eng.connect() as conn:
        rows = conn.execute(text("SELECT iteration, status, error FROM run ORDER BY 1")).all()
    assert [tuple(r) for r in rows] == [(0, "done", ""), (1, "failed", "thpscale exited with 3")]


def test_corrupt_compressed_sysstate_is_refused(eng, real_run):
    gz = real_run / "iter-0" / "tests-sysstate.gz"
    gz.write_bytes(gz.read_bytes()[:40])
    rc, out, err = cli("import", "mmtests", str(real_run))
    assert (rc, out) == (1, "")
    assert err.startswith(f"stackbench: error: {gz}: cannot read tests-sysstate")
    assert err.count("\n") == 1


def test_unreadable_stub_is_skipped_with_a_note(eng, real_run):
    """The data is in tests-sysstate.gz; a stub beside it that is not bookkeeping is noted,
    not refused."""
    stub = real_run / "iter-1" / "tests-sysstate"
    stub.write_text("not a bookkeeping line\n")
    rc, out, err = cli("import", "mmtests", "--verbose", str(real_run))
    assert rc == 0, err
    assert f"stackbench: note: skipped {stub}: line 1: unexpected line" in err
