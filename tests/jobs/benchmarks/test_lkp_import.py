"""LKP result trees into the database: layout, job parameters, idempotence, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from stackbench import cli
from stackbench.errors import InputError
from stackbench.jobs.benchmarks.importers import lkp
from stackbench.resultsdb import ingest

DATA = Path(__file__).resolve().parents[2] / "data" / "lkp"
GOOD = DATA / "good"
BAD = DATA / "bad"
BASE = "1405df66cbe219b0bf6355bc3d60361a8376b6b4"
PATCH1 = "5b77236920ce1f89b9f6b0ad44a3220b49fe7b1d"
PATCH2 = "9e26ce95028e83a061cf35e9b09b22c90d9b94e2"
TABLES = ("run", "sample", "kernel_build", "job", "machine", "metric", "run_log")


def counts(eng) -> dict[str, int]:
    return {t: ingest.count(eng, t) for t in TABLES}


def test_import_summary_and_layout(eng):
    summary = lkp.import_paths(eng, [str(GOOD)])
    # 2 commits x 3 runs x 2 jobs from stats.json, plus 3 runs of PATCH2 from its matrix.json
    assert summary == "imported 15 runs (3 kernels, 2 jobs), 0 already present"
    with eng.connect() as conn:
        kernels = conn.execute(
            text("SELECT commit, config_name, compiler FROM kernel_build ORDER BY commit")
        ).all()
        machines = conn.execute(text("SELECT name, kind FROM machine")).all()
        jobs = conn.execute(text("SELECT suite, test, params, runner FROM job ORDER BY test")).all()
    assert [tuple(k) for k in kernels] == [
        (BASE, "defconfig", "gcc-13"),
        (PATCH1, "defconfig", "gcc-13"),
        (PATCH2, "defconfig", "gcc-13"),
    ]
    assert [tuple(m) for m in machines] == [("qemu-vm", "import")]
    # the job with a job.yaml gets LKP's real parameter names; the other keeps path_params
    assert jobs[1].params == {
        "cpufreq_governor": "performance",
        "runtime": "300s",
        "size": "8T",
        "test": "anon-w-seq-mt",
        "rootfs": "debian-12-x86_64",
    }
    assert jobs[1].test == "anon-w-seq-mt" and jobs[1].suite == "vm-scalability"
    assert jobs[0].params == {
        "path_params": "performance-300s-512G-anon-w-rand",
        "rootfs": "debian-12-x86_64",
    }
    assert {j.runner for j in jobs} == {"lkp"}


def test_runs_keep_their_numbers_and_stats_are_samples(eng):
    lkp.import_paths(eng, [str(GOOD)])
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT k.commit, r.iteration, s.value FROM sample s "
                "JOIN metric m ON m.id = s.metric_id JOIN run r ON r.id = s.run_id "
                "JOIN job j ON j.id = r.job_id JOIN kernel_build k ON k.id = r.build_id "
                "WHERE m.name = 'vm-scalability.throughput' AND j.test = 'anon-w-seq-mt' "
                "ORDER BY k.commit, r.iteration"
            )
        ).all()
    got = [(c[:7], i, v) for c, i, v in rows]
    assert got == [
        (BASE[:7], 0, 6900000.0),
        (BASE[:7], 1, 6800000.0),
        (BASE[:7], 2, 6850000.0),
        # PATCH1 has a matrix.json of [1, 2, 3] too: its runs' stats.json win
        (PATCH1[:7], 0, 4500000.0),
        (PATCH1[:7], 1, 4480000.0),
        (PATCH1[:7], 2, 4520000.0),
        # PATCH2 exists only as matrix.json: each list element is a run
        (PATCH2[:7], 0, 7000000.0),
        (PATCH2[:7], 1, 7010000.0),
        (PATCH2[:7], 2, 6990000.0),
    ]


def test_job_yaml_is_kept_as_run_log(eng):
    lkp.import_paths(eng, [str(GOOD / "vm-scalability" / "performance-300s-8T-anon-w-seq-mt")])
    with eng.connect() as conn:
        names = conn.execute(text("SELECT DISTINCT name FROM run_log")).scalars().all()
    assert names == ["job.yaml"]


def test_reimport_changes_nothing(eng):
    lkp.import_paths(eng, [str(GOOD)])
    before = counts(eng)
    assert lkp.import_paths(eng, [str(GOOD)]) == (
        "imported 0 runs (3 kernels, 2 jobs), 15 already present"
    )
    assert counts(eng) == before


def test_import_of_a_single_run_dir_and_file(eng):
    run = GOOD / "vm-scalability" / "performance-300s-8T-anon-w-seq-mt" / "qemu-vm"
    run = run / "debian-12-x86_64" / "defconfig" / "gcc-13" / BASE / "1"
    assert lkp.import_paths(eng, [str(run)]).startswith("imported 1 run (1 kernel, 1 job)")
    assert lkp.import_paths(eng, [str(run / "stats.json")]).endswith("1 already present")


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ("malformed-json", "stats.json:2: malformed JSON"),
        ("non-numeric", "stats.json:1: stat 'vm-scalability.throughput' has a non-numeric value"),
        (
            "unequal-matrix",
            "matrix.json:6: stat 'proc-vmstat.pgfault' has 3 values, more than the 2 runs",
        ),
        ("wrong-depth", "stats.json: not at LKP result depth"),
        ("job-mismatch", "job.yaml: job.yaml has testcase 'will-it-scale'"),
        ("empty", "empty: no LKP results found"),
    ],
)
def test_bad_input_names_the_file_and_writes_nothing(eng, tree, message):
    # the good tree comes first: nothing of it may be written when a later file is bad
    with pytest.raises(InputError) as exc:
        lkp.import_paths(eng, [str(GOOD), str(BAD / tree)])
    assert message in str(exc.value)
    assert str(BAD / tree) in str(exc.value)
    assert all(n == 0 for n in counts(eng).values())


def test_missing_path(eng, tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        lkp.import_paths(eng, [str(tmp_path / "nope")])


def _tree(tmp_path: Path, stats: dict) -> Path:
    axes = "vm-scalability/defaults/box/rootfs/kconfig/gcc-12/" + "a" * 40 + "/0"
    run = tmp_path / axes
    run.mkdir(parents=True)
    (run / "stats.json").write_text(json.dumps(stats))
    return tmp_path


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        ({}, "no stats"),
        ([1, 2], "expected a JSON object"),
        ({"x.y": True}, "non-numeric"),
        ({"x.y": []}, "empty list"),
        ({"x.y": float("nan")}, "not a finite number"),
    ],
)
def test_bad_stats_values(eng, tmp_path, stats, message):
    with pytest.raises(InputError, match=message):
        lkp.import_paths(eng, [str(_tree(tmp_path, stats))])


def test_path_params_resolved_from_job_yaml():
    job = {
        "testcase": "vm-scalability",
        "runtime": "300s",
        "nr_task": 8,
        "vm-scalability": {"test": "anon-w-seq-mt", "size": "8T"},
        "cpufreq_governor": "performance",
        "tbox_group": "qemu-vm",
    }
    assert lkp.params_from_job(job, "performance-8-300s-8T-anon-w-seq-mt") == {
        "cpufreq_governor": "performance",
        "nr_task": "8",
        "runtime": "300s",
        "size": "8T",
        "test": "anon-w-seq-mt",
    }
    # a subset: only the keys the path actually uses
    assert lkp.params_from_job(job, "300s-anon-w-seq-mt") == {
        "runtime": "300s",
        "test": "anon-w-seq-mt",
    }
    assert lkp.params_from_job(job, "something-else") is None
    assert lkp.params_from_job(job, "defaults") == {}


def test_cli_import_then_compare(eng, capsys):
    assert cli.main(["import", "lkp", str(GOOD)]) == 0
    out = capsys.readouterr().out
    assert out == "imported 15 runs (3 kernels, 2 jobs), 0 already present\n"
    assert cli.main(["compare", "--style", "lkp", BASE[:10], PATCH1[:10]]) == 0
    table = capsys.readouterr().out
    assert "compiler/cpufreq_governor/kconfig/rootfs/runtime/size/tbox_group/test/testcase:\n" in (
        table
    )
    assert "  gcc-13/performance/defconfig/debian-12-x86_64/300s/8T/qemu-vm/anon-w-seq-mt/" in table
    assert f"commit: \n  {BASE}\n  {PATCH1}\n" in table
    rows = [line for line in table.splitlines() if line.endswith("  vm-scalability.throughput")]
    assert rows == [
        "    481000            +4.2%     501000        vm-scalability.throughput",
        "   6850000           -34.3%    4500000        vm-scalability.throughput",
    ]
    # unchanged stats are left out by LKP's rule; the changed monitor follows the suite's own
    assert "vm-scalability.stddev%" not in table and "meminfo.MemFree" not in table
    assert table.index("vm-scalability.median") < table.index("proc-vmstat.pgfault")


def test_cli_bad_input_exits_1_with_one_line(eng, capsys):
    rc = cli.main(["import", "lkp", str(GOOD), str(BAD / "non-numeric")])
    err = capsys.readouterr().err
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("stackbench: error: ")
    assert str(BAD / "non-numeric") in lines[0] and "non-numeric value" in lines[0]
    assert all(n == 0 for n in counts(eng).values())


def test_import_from_a_copy_outside_the_repo(eng, tmp_path):
    # the layout is read from the path, wherever the tree lives
    dst = tmp_path / "results"
    shutil.copytree(GOOD, dst)
    assert lkp.import_paths(eng, [str(dst)]).startswith("imported 15 runs")
