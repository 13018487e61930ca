"""``stackbench import mmtests`` on the small run directories in tests/data/mmtests/: what is
stored, idempotence, and every bad-input path (exit 1, one line naming the file, nothing
written)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from helpers.cli import cli
from sqlalchemy import text

from stackbench.resultsdb.ingest import count

DATA = Path(__file__).parents[2] / "data" / "mmtests"
TABLES = ("kernel_build", "job", "run", "run_log", "sample", "metric")


def counts(eng) -> dict[str, int]:
    return {t: count(eng, t) for t in TABLES}


def _samples(eng, metric: str, iteration: int, kernel: str = "v6.8-rc1-base") -> list[float]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT s.value FROM sample s JOIN run r ON r.id = s.run_id "
                "JOIN metric m ON m.id = s.metric_id JOIN kernel_build k ON k.id = r.build_id "
                "WHERE m.name = :m AND r.iteration = :i AND k.name = :k ORDER BY s.seq"
            ),
            {"m": metric, "i": iteration, "k": kernel},
        )
        return [r[0] for r in rows]


def test_import_stores_every_iteration(eng):
    rc, out, err = cli("import", "mmtests", str(DATA / "v6.8-rc1-base"))
    assert rc == 0, err
    assert out.startswith("mmtests run v6.8-rc1-base: 2 iteration(s) of thpscale, 2 run(s)")
    with eng.connect() as conn:
        k = conn.execute(text("SELECT commit, name FROM kernel_build")).one()
        assert tuple(k) == ("v6.8-rc1-base", "v6.8-rc1-base")
        job = conn.execute(text("SELECT suite, suite_version, runner FROM job")).one()
        assert tuple(job) == ("thpscale", "mmtests-b0b1d143", "mmtests")
        runs = conn.execute(
            text("SELECT iteration, status, duration_s, sysstate, meta FROM run ORDER BY iteration")
        ).all()
    assert [r.iteration for r in runs] == [0, 1]
    assert [r.duration_s for r in runs] == [20.0, 25.0]
    state = runs[0].sysstate
    assert state["vmstat_start"]["pgfault"] == 1000 and state["vmstat_end"]["pgfault"] == 3000
    assert state["start"]["/proc/meminfo"] == "MemTotal: 1024 kB\n"
    assert runs[0].meta["mmtests_version"] == "stackbench-test-data"

    assert _samples(eng, "thpscale.fault-huge-1", 0) == [100, 200, 300]
    assert _samples(eng, "thpscale.fault-both-1", 0) == [100, 200, 10, 300]
    assert _samples(eng, "thpscale.fault-base-2", 0) == [0.0]
    assert _samples(eng, "thpscale.fault-huge-2", 1) == [500, 700]
    assert _samples(eng, "thpscale.Percentage huge-1", 0) == [75.0]
    assert _samples(eng, "thpscale.local-base-1", 0) == [0.0]
    assert _samples(eng, "thpscale.remote-base-1", 0) == [100.0]
    assert _samples(eng, "thpscale.uncertain-1", 1) == [25.0]
    assert _samples(eng, "mmtests-vmstat.compact_stall", 1) == [50.0]
    assert _samples(eng, "mmtests-vmstat.pgfault", 0) == [2000.0]
    assert _samples(eng, "duration.user", 1) == [2.0]
    assert _samples(eng, "duration.elapsed", 0) == [20.0]

    with eng.connect() as conn:
        names = {r[0] for r in conn.execute(text("SELECT name FROM run_log"))}
        log = conn.execute(
            text("SELECT content FROM run_log WHERE name = 'thpscale/logs/threads-2.log' LIMIT 1")
        ).scalar_one()
        unit, hib = conn.execute(
            text("SELECT unit, higher_is_better FROM metric WHERE name = 'thpscale.fault-huge-1'")
        ).one()
    assert names == {
        "tests-timestamp",
        "tests-sysstate",
        "thpscale/logs/threads-1.log",
        "thpscale/logs/threads-2.log",
    }
    assert b"fault 1 huge" in log  # stored gunzipped
    assert (unit, hib) == ("usecs", False)


def test_reimport_changes_nothing(eng):
    assert cli("import", "mmtests", str(DATA / "v6.8-rc1-base"))[0] == 0
    before = counts(eng)
    rc, out, _ = cli("import", "mmtests", str(DATA / "v6.8-rc1-base"))
    assert rc == 0
    assert "0 run(s) and 0 samples stored, 2 already stored" in out
    assert counts(eng) == before


def test_name_option_and_highalloc(eng):
    rc, out, err = cli("import", "mmtests", str(DATA / "ha-base"), "--name", "v6.9")
    assert rc == 0, err
    assert "stress-highalloc" in out
    assert _samples(eng, "stress-highalloc.pass2", 0, "v6.9") == [25.0]
    assert _samples(eng, "stress-highalloc.latency-pass1", 0, "v6.9") == [1000, 5000, 1500, 6000]
    with eng.connect() as conn:
        assert conn.execute(text("SELECT commit FROM kernel_build")).scalar_one() == "v6.9"


def _copy(tmp_path: Path, name: str = "v6.8-rc1-base") -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def _replace(path: Path, old: str, new: str) -> None:
    if path.name.endswith(".gz"):
        body = gzip.decompress(path.read_bytes()).decode()
        assert old in body
        path.write_bytes(gzip.compress(body.replace(old, new).encode()))
    else:
        body = path.read_text()
        assert old in body
        path.write_text(body.replace(old, new))


def _break_missing_iter(run: Path) -> str:
    for it in run.glob("iter-*"):
        shutil.rmtree(it)
    return f"{run}: no iter-N directories"


def _break_iter_gap(run: Path) -> str:
    (run / "iter-1").rename(run / "iter-3")
    return f"{run}: iterations are not iter-0..iter-1"


def _break_fault_line(run: Path) -> str:
    # the second iteration is bad: the first must not be stored either
    log = run / "iter-1" / "thpscale" / "logs" / "threads-2.log.gz"
    _replace(log, "fault 0 base", "fault 0 bass")
    return f"{log}: line 9: fault size 'bass'"


def _break_truncated_sysstate(run: Path) -> str:
    path = run / "iter-1" / "tests-sysstate"
    body = path.read_text()
    path.write_text(body[: body.index("file end :: /proc/vmstat")])
    return f"{path}: test 'thpscale' began but has no 'test end' line"


def _break_unmatched_snapshot(run: Path) -> str:
    path = run / "iter-0" / "tests-sysstate"
    _replace(path, "file end :: /proc/vmstat\n", "")
    return f"{path}: test 'thpscale': 'file start :: /proc/vmstat' has no matching"


def _break_missing_sysstate(run: Path) -> str:
    path = run / "iter-1" / "tests-sysstate"
    path.unlink()
    return f"{path}: missing file"


def _break_missing_logs(run: Path) -> str:
    shutil.rmtree(run / "iter-0" / "thpscale" / "logs")
    return f"{run / 'iter-0' / 'thpscale' / 'logs'}: missing thpscale logs directory"


def _break_no_benchmark(run: Path) -> str:
    shutil.rmtree(run / "iter-0" / "thpscale")
    return f"{run / 'iter-0'}: no benchmark results"


def _break_time_line(run: Path) -> str:
    path = run / "iter-0" / "tests-timestamp"
    _replace(path, "20.00 elapsed", "twenty elapsed")
    return f"{path}: line 4: malformed time line"


def _break_gzip(run: Path) -> str:
    log = run / "iter-0" / "thpscale" / "logs" / "threads-2.log.gz"
    log.write_bytes(log.read_bytes()[:20])
    return f"{log}: cannot read thpscale log"


BREAKS = [
    _break_missing_iter,
    _break_iter_gap,
    _break_fault_line,
    _break_truncated_sysstate,
    _break_unmatched_snapshot,
    _break_missing_sysstate,
    _break_missing_logs,
    _break_no_benchmark,
    _break_time_line,
    _break_gzip,
]


@pytest.mark.parametrize("breaker", BREAKS, ids=lambda f: f.__name__.removeprefix("_break_"))
def test_bad_input_writes_nothing(eng, tmp_path, breaker):
    assert cli("import", "mmtests", str(DATA / "v6.8-rc1-patched"))[0] == 0
    before = counts(eng)
    run = _copy(tmp_path)
    expected = breaker(run)
    rc, out, err = cli("import", "mmtests", str(run))
    assert rc == 1
    assert out == ""
    lines = err.strip().split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith(f"stackbench: error: {expected}"), lines[0]
    assert counts(eng) == before


def test_not_a_directory(eng, tmp_path):
    rc, _, err = cli("import", "mmtests", str(tmp_path / "absent"))
    assert rc == 1
    assert err.strip() == f"stackbench: error: {tmp_path / 'absent'}: no such directory"
    assert counts(eng)["run"] == 0


def test_compressed_sysstate_is_preferred(eng, tmp_path):
    """Later mmtests keep the snapshots in tests-sysstate.gz beside a small stub."""
    run = _copy(tmp_path)
    for it in ("iter-0", "iter-1"):
        plain = run / it / "tests-sysstate"
        (run / it / "tests-sysstate.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.write_text("stub\n")
    rc, _, err = cli("import", "mmtests", str(run))
    assert rc == 0, err
    assert _samples(eng, "mmtests-vmstat.compact_stall", 1) == [50.0]
