"""LKP trees as unite-stats leaves them (tests/lkp_tree.py builds them the way lib/matrix.rb
does): they import, sparse stats keep which runs have them, and ``compare --style lkp``
prints what the real ``lkp ncompare`` printed for the same tree, ``fail:runs`` section
included.

The expected tables below are the output of the real lkp-tests ``sbin/ncompare`` (bundle
../shared/upstream/lkp-tests.bundle, ref ``pinned``) on this tree after the real
``sbin/unite-stats`` per run and ``bin/merge-remote-result``; the real unite-stats wrote
the same matrix.json files as tests/lkp_tree.py, byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import lkp_tree
from helpers.cli import cli
from sqlalchemy import text

from stackbench.errors import InputError
from stackbench.jobs.benchmarks.importers import lkp

A = "1405df66cbe219b0bf6355bc3d60361a8376b6b4"
B = "5b77236920ce1f89b9f6b0ad44a3220b49fe7b1d"
WARN = "dmesg.WARNING:at_mm/compaction.c:#isolate_migratepages_block"


def runs_a() -> list[dict]:
    out = []
    for i, t in enumerate([6842353, 6850000, 6830000, 6845000, 6849000]):
        s = {
            "vm-scalability.throughput": t,
            "vm-scalability.median": 6800 + i,
            "vm-scalability.workload": 1000000 + i,
            "proc-vmstat.compact_stall": 0,  # integer 0 everywhere: unite-stats drops it
            "proc-vmstat.thp_split_page": 0,
            "meminfo.Unevictable": 0.0,  # a float 0: kept, as LKP keeps it
            "sched_debug.cpu.nr_running.0": 1,  # per-CPU: never in a matrix
            "time.elapsed_time": 300.5 + i,
        }
        if i == 0:
            s["kmsg.xxx_timeout"] = 1
        out.append(s)
    return out


def runs_b() -> list[dict]:
    out = []
    for i, t in enumerate([4498326, 4400000, 4600000, 4500000, 4490000]):
        s = {
            "vm-scalability.throughput": t,
            "vm-scalability.median": 4400 + i,
            "proc-vmstat.compact_stall": 0,
            "proc-vmstat.thp_split_page": 1200 + 10 * i,
            "meminfo.Unevictable": 0.0,
            "sched_debug.cpu.nr_running.0": 2,
            "time.elapsed_time": 300.5 + i,
        }
        if i != 4:  # a performance stat the last run lacks
            s["vm-scalability.workload"] = 700000 + i
        if i in (1, 3):  # failures seen in two runs of five
            s[WARN] = 1
            s["dmesg.boot_failures"] = 1
        out.append(s)
    return out


# sbin/ncompare -a A B
NCOMPARE_ALL = "".join(
    [
        "=========================================================================================\n",
        "compiler/cpufreq_governor/kconfig/rootfs/runtime/size/tbox_group/test/testcase:\n",
        "  gcc-12/performance/x86_64-rhel-9.4/debian-12-x86_64/300s/8T/qemu-vm/anon-w-seq-mt/vm-scalability\n",
        "\n",
        "commit: \n",
        f"  {A}\n",
        f"  {B}\n",
        "\n",
        "1405df66cbe219b0 5b77236920ce1f89b9f6b0ad44a \n",
        "---------------- --------------------------- \n",
        "       fail:runs  %reproduction    fail:runs\n",
        "           |             |             |    \n",
        "          1:5          -20%            :5     kmsg.xxx_timeout\n",
        f"           :5           40%           2:5     {WARN}\n",
        "           :5           40%           2:5     dmesg.boot_failures\n",
        "         %stddev     %change         %stddev\n",
        "             \\          |                \\  \n",
        "      6802           -35.3%       4402        vm-scalability.median\n",
        "   6843270           -34.3%    4497665        vm-scalability.throughput\n",
        "   1000002           -44.0%     560001 ± 50%  vm-scalability.workload\n",
        "      0.00          -100.0%       0.00        meminfo.Unevictable\n",
        "      0.00       +1.2e+105%       1220        proc-vmstat.thp_split_page\n",
        "    302.50            +0.0%     302.50        time.elapsed_time\n",
        "\n",
    ]
)
# sbin/ncompare -m A B (the test robot's choice of rows, stackbench's default)
NCOMPARE_MORE = "".join(
    [
        "=========================================================================================\n",
        "compiler/cpufreq_governor/kconfig/rootfs/runtime/size/tbox_group/test/testcase:\n",
        "  gcc-12/performance/x86_64-rhel-9.4/debian-12-x86_64/300s/8T/qemu-vm/anon-w-seq-mt/vm-scalability\n",
        "\n",
        "commit: \n",
        f"  {A}\n",
        f"  {B}\n",
        "\n",
        "1405df66cbe219b0 5b77236920ce1f89b9f6b0ad44a \n",
        "---------------- --------------------------- \n",
        "       fail:runs  %reproduction    fail:runs\n",
        "           |             |             |    \n",
        "          1:5          -20%            :5     kmsg.xxx_timeout\n",
        f"           :5           40%           2:5     {WARN}\n",
        "           :5           40%           2:5     dmesg.boot_failures\n",
        "         %stddev     %change         %stddev\n",
        "             \\          |                \\  \n",
        "      6802           -35.3%       4402        vm-scalability.median\n",
        "   6843270           -34.3%    4497665        vm-scalability.throughput\n",
        "   1000002           -44.0%     560001 ± 50%  vm-scalability.workload\n",
        "\n",
    ]
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    lkp_tree.build(tmp_path / "result", {A: runs_a(), B: runs_b()})
    return tmp_path / "result"


def _runs_with(eng, stat: str, commit: str) -> dict[int, float]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.iteration, s.value FROM sample s JOIN run r ON r.id = s.run_id "
                "JOIN metric m ON m.id = s.metric_id JOIN kernel_build k ON k.id = r.build_id "
                "WHERE m.name = :m AND k.commit = :c ORDER BY r.iteration"
            ),
            {"m": stat, "c": commit},
        )
        return {r[0]: r[1] for r in rows}


def test_tree_as_unite_stats_leaves_it_imports_and_compares_like_ncompare(eng, tree):
    rc, out, err = cli("import", "lkp", "--verbose", str(tree))
    assert rc == 0, err
    assert out == "imported 10 runs (2 kernels, 1 job), 0 already present\n"
    # what unite-stats derives is skipped, and said so under --verbose
    compiler = lkp_tree.compiler_dir(tree)
    assert f"stackbench: note: skipped {compiler / 'matrix.json'}: the cross-commit" in err
    assert f"skipped {compiler / 'avg.json'}: a summary" in err
    assert f"skipped {compiler / A / 'stddev.json'}: a summary" in err
    # sparse stats: only the runs that have them
    assert _runs_with(eng, WARN, B) == {1: 1.0, 3: 1.0}
    assert _runs_with(eng, WARN, A) == {}
    assert _runs_with(eng, "vm-scalability.workload", B) == {i: 700000.0 + i for i in range(4)}
    # what unite-stats drops from the commit's matrix is not stored
    assert _runs_with(eng, "proc-vmstat.compact_stall", A) == {}
    assert _runs_with(eng, "proc-vmstat.thp_split_page", A) == {}
    assert _runs_with(eng, "sched_debug.cpu.nr_running.0", B) == {}
    assert _runs_with(eng, "meminfo.Unevictable", A) == dict.fromkeys(range(5), 0.0)

    rc, table, err = cli("compare", "--style", "lkp", "--all", A, B)
    assert rc == 0, err
    assert table == NCOMPARE_ALL
    rc, table, err = cli("compare", "--style", "lkp", A, B)
    assert rc == 0, err
    assert table == NCOMPARE_MORE
    # without --verbose nothing is said about the skipped files
    rc, out, err = cli("import", "lkp", str(tree))
    assert (rc, err) == (0, "") and out.endswith("10 already present\n")


def test_matrix_only_tree_gives_the_same_table(eng, tree):
    """Without the run directories' stats.json, each commit's matrix.json (sparse lists and
    all) is read instead, and the table is the same."""
    for stats in tree.rglob("stats.json"):
        stats.unlink()
    rc, out, err = cli("import", "lkp", str(tree))
    assert rc == 0, err
    assert out == "imported 10 runs (2 kernels, 1 job), 0 already present\n"
    # the list stops at run 3: run 4 has no sample; the 0s before are LKP's padding
    assert _runs_with(eng, WARN, B) == {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}
    assert _runs_with(eng, "vm-scalability.workload", B) == {i: 700000.0 + i for i in range(4)}
    rc, table, err = cli("compare", "--style", "lkp", "--all", A, B)
    assert rc == 0, err
    assert table == NCOMPARE_ALL


def test_a_stat_zero_everywhere_is_no_row(eng, tree):
    """unite-stats drops an all-integer-zero stat; stackbench reading stats.json used to
    print ``0.00 -100.0% 0.00`` for it."""
    rc, _, err = cli("import", "lkp", str(tree))
    assert rc == 0, err
    rc, table, err = cli("compare", "--style", "lkp", "--all", A, B)
    assert "compact_stall" not in table and "sched_debug" not in table


def test_a_stat_zero_in_some_runs_only_is_kept(eng, tmp_path):
    runs = runs_a()
    runs[2]["proc-vmstat.compact_stall"] = 3
    lkp_tree.write_runs(tmp_path, A, runs)
    lkp.import_paths(eng, [str(tmp_path)])
    assert _runs_with(eng, "proc-vmstat.compact_stall", A) == {0: 0, 1: 0, 2: 3.0, 3: 0, 4: 0}


def incomplete_runs() -> dict[str, list[dict]]:
    """Run 2 of B was cut short (LKP marks it last_state.is_incomplete_run = 1)."""
    a = [
        {
            "vm-scalability.throughput": t,
            "vm-scalability.median": 6800 + i,
            "last_state.is_incomplete_run": 0,
        }
        for i, t in enumerate([6842353, 6850000, 6830000, 6845000])
    ]
    b = [
        {"vm-scalability.throughput": t, "vm-scalability.median": 4400 + i}
        for i, t in enumerate([4498326, 4400000, 1000000, 4500000])
    ]
    b[2].update({"last_state.is_incomplete_run": 1, "last_state.exit_fail": 1})
    b[2]["dmesg.BUG:soft_lockup"] = 1
    return {A: a, B: b}


# sbin/ncompare -a A B and sbin/ncompare -m A B (the same here)
NCOMPARE_INCOMPLETE = "".join(
    [
        "=========================================================================================\n",
        "compiler/cpufreq_governor/kconfig/rootfs/runtime/size/tbox_group/test/testcase:\n",
        "  gcc-12/performance/x86_64-rhel-9.4/debian-12-x86_64/300s/8T/qemu-vm/anon-w-seq-mt/vm-scalability\n",
        "\n",
        "commit: \n",
        f"  {A}\n",
        f"  {B}\n",
        "\n",
        "1405df66cbe219b0 5b77236920ce1f89b9f6b0ad44a \n",
        "---------------- --------------------------- \n",
        "       fail:runs  %reproduction    fail:runs\n",
        "           |             |             |    \n",
        "           :4           25%           1:4     dmesg.BUG:soft_lockup\n",
        "           :4           25%           1:4     last_state.exit_fail\n",
        "           :4           25%           1:4     last_state.is_incomplete_run\n",
        "         %stddev     %change         %stddev\n",
        "             \\          |                \\  \n",
        "      6801           -35.3%       4401        vm-scalability.median\n",
        "   6841838           -34.7%    4466108        vm-scalability.throughput\n",
        "\n",
    ]
)


def test_incomplete_run_counts_in_fail_runs_not_in_stddev(eng, tmp_path):
    """The fail:runs section counts every run (1:4); the %stddev section averages the
    complete runs only (4466108 is the mean of B's three complete runs)."""
    lkp_tree.build(tmp_path, incomplete_runs())
    assert lkp.import_paths(eng, [str(tmp_path)]).startswith("imported 8 runs")
    for flag in ([], ["--all"]):
        rc, table, err = cli("compare", "--style", "lkp", *flag, A, B)
        assert rc == 0, err
        assert table == NCOMPARE_INCOMPLETE


@pytest.mark.parametrize(
    ("edit", "stat", "message"),
    [
        # longer than the runs stats_source names: not a sparse stat, a broken file
        (
            lambda m: m["vm-scalability.median"].append(1),
            "vm-scalability.median",
            "stat 'vm-scalability.median' has 6 values, more than the 5 runs in stats_source"
            " (one value per run)",
        ),
        (
            lambda m: m[WARN].__setitem__(1, "1"),
            WARN,
            f"stat '{WARN}' has a non-numeric value \"1\"",
        ),
        (
            lambda m: m.__setitem__("vm-scalability.median", 3),
            "vm-scalability.median",
            "stat 'vm-scalability.median' is not a list (one value per run)",
        ),
    ],
)
def test_matrix_values_are_checked(eng, tree, edit, stat, message):
    """Strict in values: a bad value is one line naming file:line, and nothing is stored."""
    for stats in tree.rglob("stats.json"):
        stats.unlink()
    path = lkp_tree.compiler_dir(tree) / B / "matrix.json"
    matrix = json.loads(path.read_text())
    edit(matrix)
    lkp_tree.save_json(matrix, path)
    line = next(
        n for n, text in enumerate(path.read_text().splitlines(), 1) if f'"{stat}":' in text
    )
    rc, out, err = cli("import", "lkp", str(tree))
    assert (rc, out) == (1, "")
    assert err == f"stackbench: error: {path}:{line}: {message}\n"
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_stats_value_error_names_file_and_line(eng, tree):
    path = lkp_tree.compiler_dir(tree) / A / "2" / "stats.json"
    stats = json.loads(path.read_text())
    stats["vm-scalability.median"] = "6802x"
    lkp_tree.save_json(stats, path)
    with pytest.raises(InputError) as exc:
        lkp.import_paths(eng, [str(tree)])
    assert str(exc.value).startswith(f"{path}:3: stat 'vm-scalability.median' has a non-numeric")


def test_stray_matrix_is_refused(eng, tmp_path):
    """A matrix.json neither in a commit directory nor above commit directories is not at
    an LKP result depth."""
    d = tmp_path / "vm-scalability" / "somewhere"
    d.mkdir(parents=True)
    lkp_tree.save_json({"x.y": [1], "stats_source": ["/r/0/stats.json"]}, d / "matrix.json")
    with pytest.raises(InputError, match="not at LKP result depth: 'somewhere' is not a 40-hex"):
        lkp.import_paths(eng, [str(tmp_path)])


def test_run_monitor_matrix_is_skipped(eng, tree):
    """LKP also keeps each run's monitor samples as <run>/matrix.json.gz."""
    run = lkp_tree.compiler_dir(tree) / A / "0"
    (run / "matrix.json.gz").write_bytes(b"\x1f\x8b not even gzip")
    (run / "vmstat.json.gz").write_bytes(b"")
    notes: list[str] = []
    assert lkp.import_paths(eng, [str(tree)], notes).startswith("imported 10 runs")
    assert f"skipped {run / 'matrix.json.gz'}: a run's monitor samples" in "\n".join(notes)
    assert any("other file" in n for n in notes)


def test_job_yaml_rootfs_given_as_a_path(eng, tmp_path):
    """A job's rootfs may be a path or URL; its result path holds the file's name."""
    runs = runs_a()[:1]
    commit_dir = lkp_tree.write_runs(tmp_path, A, runs)
    job = commit_dir / "0" / "job.yaml"
    job.write_text(
        job.read_text().replace(
            "rootfs: debian-12-x86_64", "rootfs: /osimage/debian/debian-12-x86_64"
        )
    )
    assert "rootfs: /osimage/" in job.read_text()
    assert lkp.import_paths(eng, [str(tmp_path)]).startswith("imported 1 run")


def test_gzipped_commit_matrix_is_read_and_a_corrupt_one_refused(eng, tree):
    import gzip

    for stats in tree.rglob("stats.json"):
        stats.unlink()
    path = lkp_tree.compiler_dir(tree) / A / "matrix.json"
    gz = path.with_name("matrix.json.gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    notes: list[str] = []
    assert lkp.import_paths(eng, [str(tree)], notes).startswith("imported 10 runs")
    gz.write_bytes(gz.read_bytes()[:20])
    with pytest.raises(InputError, match=r"matrix.json.gz: cannot read"):
        lkp.import_paths(eng, [str(tree)])


def test_global_verbose_flag_also_lists_what_was_skipped(eng, tree):
    rc, _, err = cli("-v", "import", "lkp", str(tree))
    assert rc == 0, err
    assert f"stackbench: note: skipped {lkp_tree.compiler_dir(tree) / 'matrix.json'}" in err


def test_native_runs_zero_everywhere_is_no_row():
    """Runs stackbench made itself (no LKP tree): a counter that is 0 in every run is left
    out as unite-stats leaves out an integer counter; 0 in one kernel only stays a row."""
    from test_lkp_table import make_dataset

    from stackbench.resultsdb.tables import lkp as lkp_table

    ds = make_dataset(
        [
            ("a", {"x.y": [1.0, 2.0, 3.0], "mmtests-vmstat.pswpin": [0, 0, 0], "z.w": [0, 0, 0]}),
            ("b", {"x.y": [1.0, 2.0, 3.0], "mmtests-vmstat.pswpin": [0, 0, 0], "z.w": [5, 5, 5]}),
        ]
    )
    out = lkp_table.render(ds, all_rows=True)
    assert "pswpin" not in out and "-100.0%" not in out
    assert "      0.00         +5e+102%       5.00        z.w\n" in out
    # an imported LKP run keeps its stored zeros: LKP itself shows float zeros
    for r in ds.runs.values():
        r.meta["lkp_result_root"] = "/lkp/result/..."
    assert "      0.00          -100.0%       0.00        mmtests-vmstat.pswpin\n" in (
        lkp_table.render(ds, all_rows=True)
    )


def test_stats_source_must_be_paths(eng, tree):
    for stats in tree.rglob("stats.json"):
        stats.unlink()
    path = lkp_tree.compiler_dir(tree) / A / "matrix.json"
    matrix = json.loads(path.read_text())
    matrix["stats_source"] = 5
    lkp_tree.save_json(matrix, path)
    line = path.read_text().splitlines().index('  "stats_source": 5') + 1
    with pytest.raises(InputError) as exc:
        lkp.import_paths(eng, [str(tree)])
    assert str(exc.value) == f"{path}:{line}: stats_source must be a list of paths"


def test_non_finite_stat_names_file_and_line(eng, tree):
    path = lkp_tree.compiler_dir(tree) / B / "1" / "stats.json"
    path.write_text(
        path.read_text().replace('"vm-scalability.median": 4401', '"vm-scalability.median": NaN')
    )
    line = path.read_text().splitlines().index('  "vm-scalability.median": NaN,') + 1
    with pytest.raises(InputError) as exc:
        lkp.import_paths(eng, [str(tree)])
    assert str(exc.value) == f"{path}:{line}: stat 'vm-scalability.median' is not a finite number"


def test_only_summaries_is_no_result(eng, tree):
    """avg.json and stddev.json alone hold no runs: nothing to import, and it says so."""
    only = tree.parent / "only"
    only.mkdir()
    shutil.copy(lkp_tree.compiler_dir(tree) / "avg.json", only / "avg.json")
    notes: list[str] = []
    with pytest.raises(InputError, match="no LKP results found"):
        lkp.import_paths(eng, [str(only)], notes)
    assert notes == [f"skipped {only / 'avg.json'}: a summary unite-stats derives from matrix.json"]
