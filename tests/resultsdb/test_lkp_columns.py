"""An LKP ``--all`` table made of per-kernel columns (tables/lkp_columns): the same bytes as
the table computed stat by stat, columns kept in the database and read back, made again when
their runs or the table code change, and a table printed when they cannot be kept."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text
from test_lkp_table import make_dataset

from stackbench import cli
from stackbench.resultsdb import db, query
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.tables import (
    lkp,
    lkp_columns,
    lkp_fail,
    lkp_format,
    lkp_rule,
    lkp_unite,
    textcache,
)


def _stat_by_stat(ds: query.Dataset) -> str:
    """The ``--all`` table as lkp.py made it before the columns: every stat's row with the
    one-stat calc_stat over the group, LKP's sort and the row formatters."""
    single = len(ds.kernels) == 1
    out = []
    for g in lkp_unite.unite(lkp.build_groups(ds), ds):
        if len(g.columns) < 2 and not single:
            continue
        keys = lkp.all_stat_keys(g)
        complete = lkp_fail.complete_group(g)
        rows = [lkp.calc_stat(k, g) for k in keys if lkp_rule.is_function_stat(k)]
        rows += [lkp.calc_stat(k, complete) for k in keys if not lkp_rule.is_function_stat(k)]
        rows = lkp.sort_stats(rows)
        fails = [r for r in rows if r.failure]
        perf = [r for r in rows if not r.failure]
        n = len(g.columns) - 1
        part = [lkp.format_group_header(g)]
        if fails:
            part.append(lkp_format.failure_header(n))
            part.extend(lkp.format_failure_row(r) for r in fails)
        if perf:
            part.append(lkp_format.perf_header(n))
            part.extend(lkp.format_perf_row(r) for r in perf)
        part.append("\n")
        out.append("".join(part) if fails or perf else "")
    return "".join(out) or lkp_format.nothing_shown([k.label for k in ds.kernels], True)


def _random_columns(rnd: random.Random, kernels: int) -> list:
    names = ["vm-scalability.throughput", "vm-scalability.free_time", "vm-scalability.util%"]
    names += [f"proc-vmstat.n_{i}" for i in range(6)] + ["meminfo.Active", "time.elapsed"]
    # perf-profile shares with the same leading components: LKP's sort leaves them tied
    names += [f"perf-profile.children.cycles-pp.f{i}" for i in range(5)]
    names += ["dmesg.WARNING:at_mm/compaction.c", "last_state.is_incomplete_run"]
    cols = []
    for k in range(kernels):
        runs = rnd.choice([1, 2, 3, 5])
        stats: dict = {}
        for name in names:
            if rnd.random() < 0.15:
                stats[name] = None  # this kernel lacks the stat
            elif name.startswith("perf-profile"):
                stats[name] = [rnd.choice([0.0, 1.5, 3.0]) for _ in range(runs)]
            elif name.startswith(("dmesg", "last_state")):
                stats[name] = [rnd.choice([0, 0, 1]) for _ in range(runs)]
            else:
                level = rnd.choice([0.0, 0.5, 999.9, 54321.0, 3e8, -7.0])
                stats[name] = [level * rnd.uniform(0.9, 1.1) for _ in range(runs)]
        cols.append((f"k{k}", stats))
    return cols


@pytest.mark.parametrize("seed", range(40))
def test_columns_print_the_bytes_of_the_stat_by_stat_table(seed):
    rnd = random.Random(seed)
    ds = make_dataset(_random_columns(rnd, rnd.choice([1, 2, 3, 4])))
    assert lkp.render(ds, all_rows=True) == _stat_by_stat(ds)


def test_tied_perf_profile_rows_keep_the_order_of_the_runs():
    # equal shares everywhere: only where each stat first appears orders these rows
    stats = {f"perf-profile.children.cycles-pp.{n}": [1.0, 1.0] for n in "zyxw"}
    ds = make_dataset([("base", stats), ("new", dict(reversed(list(stats.items()))))])
    got = lkp.render(ds, all_rows=True)
    assert got == _stat_by_stat(ds)
    kept = lkp.column_summaries(ds)
    rows = [lkp_columns.from_row(**lkp_columns.to_row(c)) for c in kept.values()]
    again = lkp_columns.render([[("base", rows[0]), ("new", rows[1])]], ["base", "new"])
    assert again == got


def test_a_column_survives_its_text_form_bit_for_bit():
    ds = make_dataset([("base", {"a.x": [0.1, 0.2], "a.y": [1e-300, -0.0], "a.z": [1e150, 1.0]})])
    (col,) = lkp.column_summaries(ds).values()
    back = lkp_columns.from_row(**lkp_columns.to_row(col))
    assert [x.hex() for x in back.avgs] == [x.hex() for x in col.avgs]
    assert back._replace(avgs=[]) == col._replace(avgs=[])


# -- kept in the database ---------------------------------------------------------------------

JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "runtime": "300s"})
KERNELS = ["a" * 40, "b" * 40, "c" * 40]


def _runs(start: int = 0, level: float = 1000.0, machine: str = "qemu-vm", job=JOB) -> list:
    rnd = random.Random(start)
    out = []
    for k, commit in enumerate(KERNELS):
        for it in range(start, start + 3):
            stats = {
                "vm-scalability.throughput": [level * (1 + k / 10) + rnd.random()],
                "proc-vmstat.compact_stall": [float(rnd.randrange(0, 5000))],
                "dmesg.WARNING:at_mm": [float(rnd.randrange(0, 2))],
            }
            out.append(ig.RunData(job, ig.KernelSpec(commit), ig.MachineSpec(machine), it, stats))
    return out


def _cli(capsys, *refs: str) -> str:
    """The CLI's table; any text kept by an earlier command is forgotten first, so that the
    table is made of the columns."""
    with db.engine().begin() as conn:
        conn.execute(text("DELETE FROM kept_table"))
    assert cli.main(["compare", "--style", "lkp", "--all", *(refs or KERNELS)]) == 0
    return capsys.readouterr().out


def _in_memory(eng, *refs: str) -> str:
    with eng.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, list(refs or KERNELS)))
    return lkp.render(ds, all_rows=True)


def _kept(eng) -> list[tuple]:
    with eng.connect() as c:
        return c.execute(
            text("SELECT job_id, build_id, fingerprint FROM lkp_column ORDER BY build_id")
        ).all()


def test_the_cli_keeps_the_columns_and_reads_them_back(eng, capsys):
    ig.ingest(eng, _runs())
    assert _kept(eng) == []
    first = _cli(capsys)
    assert first == _in_memory(eng)
    assert len(_kept(eng)) == 3
    # a kept cell is what is printed: change one behind the command's back
    with eng.begin() as c:
        c.execute(text("UPDATE lkp_column SET cells = replace(cells, '1000', '7777')"))
    assert "7777" in _cli(capsys)
    with eng.begin() as c:  # columns no longer kept are made again
        c.execute(text("DELETE FROM lkp_column"))
    assert _cli(capsys) == first and len(_kept(eng)) == 3
    # made of columns, the table is kept as a text too: the next same command on unchanged
    # runs prints that text (a kept cell changed behind its back no longer shows)
    with eng.begin() as c:
        c.execute(text("UPDATE lkp_column SET cells = replace(cells, '1000', '8888')"))
    assert cli.main(["compare", "--style", "lkp", "--all", *KERNELS]) == 0
    assert capsys.readouterr().out == first
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 1
    with eng.begin() as c:
        c.execute(text("DELETE FROM lkp_column"))
    # any order and subset of the kernels is a table of the same columns
    assert _cli(capsys, KERNELS[2][:8], KERNELS[0][:8]) == _in_memory(eng, KERNELS[2], KERNELS[0])


def test_groups_of_several_jobs_come_in_the_tables_order(eng, capsys):
    # the jobs stored in the opposite of their table order, one of them on two kernels only
    jobs = [
        ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "size": "8T"}),
        ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "size": "16G"}),
        ig.JobSpec("thpscale", "thpscale", {"max_threads": 2}),
    ]
    runs = [r for n, job in enumerate(jobs) for r in _runs(start=10 * n, job=job)]
    ig.ingest(eng, [r for r in runs if not (r.job is jobs[1] and r.kernel.commit == KERNELS[1])])
    table = _cli(capsys)
    assert table == _in_memory(eng)
    heads = [line for line in table.splitlines() if line.startswith("  ") and "/" in line]
    assert heads[0].endswith("/thpscale") and "16G" in heads[1] and "8T" in heads[2], heads
    assert _cli(capsys, KERNELS[1], KERNELS[0]) == _in_memory(eng, KERNELS[1], KERNELS[0])


def _program(*refs: str) -> dict:
    """Popen's arguments for the program's table of ``refs``, its output buffered as a
    user's is (PYTHONUNBUFFERED, set here, would hide what the buffers keep)."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    cmd = [sys.executable, "-m", "stackbench", "compare", "--style", "lkp", "--all", *refs]
    return {"args": cmd, "env": env}


def test_the_program_prints_the_whole_table_before_it_ends(eng, capsys):
    # what print() buffered (a table of a few KB, less than the buffer) is flushed before
    # the program exits
    import subprocess

    ig.ingest(eng, _runs())
    want = _cli(capsys)
    got = subprocess.run(**_program(*KERNELS), capture_output=True, text=True, timeout=120)
    assert (got.returncode, got.stdout, got.stderr) == (0, want, "")


def test_a_reader_that_stops_early_gets_no_error(eng, capsys):
    import subprocess

    stats = {f"proc-vmstat.n_{i}": [float(i)] for i in range(3000)}
    ig.ingest(eng, [ig.RunData(JOB, ig.KernelSpec(k), ig.MachineSpec("qemu-vm"), 0, stats)
                    for k in KERNELS])  # fmt: skip
    assert len(_cli(capsys)) > 4 * 65536  # more than a pipe holds
    proc = subprocess.Popen(**_program(*KERNELS), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # as `| head -c 10` does
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read() == b""


@pytest.mark.parametrize("buffered", [True, False])
def test_a_reader_gone_before_the_output_is_written_gets_no_error(buffered):
    import os
    import subprocess

    # buffered, the output (help text) reaches the pipe at the final flush; unbuffered,
    # as it is printed: either way after the reader has gone
    program = _program()
    if not buffered:
        program["env"]["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        got = subprocess.run(
            [*program["args"][:3], "--help"],
            env=program["env"],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (got.returncode, got.stderr) == (0, b"")


def test_new_runs_or_new_table_code_make_a_column_again(eng, capsys, monkeypatch):
    ig.ingest(eng, _runs())
    _cli(capsys)
    before = dict(((j, b), fp) for j, b, fp in _kept(eng))
    ig.ingest(eng, _runs(start=3, level=2000.0))
    after = _cli(capsys)
    assert after == _in_memory(eng)
    assert "1500" in after.split("vm-scalability.throughput")[0].splitlines()[-1]
    now = dict(((j, b), fp) for j, b, fp in _kept(eng))
    assert now.keys() == before.keys() and all(now[k] != before[k] for k in now)
    with eng.begin() as c:  # kept by this code: read back, so a changed cell shows
        c.execute(text("UPDATE lkp_column SET cells = replace(cells, '1500', '7777')"))
    assert "7777" in _cli(capsys)
    monkeypatch.setattr(textcache, "_code", [textcache.code_version() + ";lkp.py:1:1"])
    assert _cli(capsys) == after


def test_import_keeps_the_columns_of_the_kernels_it_imported(eng, tmp_path):
    from helpers import lkp_tree

    from stackbench.jobs.benchmarks.importers import lkp as lkp_import

    runs = [{"vm-scalability.throughput": 5.0 + n} for n in range(3)]
    lkp_tree.build(tmp_path, {commit: runs for commit in KERNELS[:2]})
    lkp_import.import_paths(eng, [str(tmp_path)])
    assert len(_kept(eng)) == 2


def test_the_table_is_printed_when_columns_cannot_be_kept(eng, capsys, refuse_writes):
    ig.ingest(eng, _runs())
    refuse_writes("read-only here", "lkp_column", "kept_table")
    with db.engine().begin() as conn:
        conn.execute(text("DELETE FROM kept_table"))
    assert cli.main(["compare", "--style", "lkp", "--all", *KERNELS]) == 0
    out = capsys.readouterr()
    assert out.out == _in_memory(eng)
    assert (
        out.err == "stackbench: warning: could not keep the table for next time: read-only here\n"
    )
    assert _kept(eng) == []
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 0


def test_runs_of_two_machines_are_still_refused(eng, capsys):
    ig.ingest(eng, _runs() + _runs(start=3, machine="box-1"))
    assert cli.main(["compare", "--style", "lkp", "--all", *KERNELS]) == 1
    err = capsys.readouterr().err
    assert "come from 2 machines" in err and "Traceback" not in err
    assert _kept(eng) == []


def test_unknown_and_ambiguous_kernels_are_the_full_paths_errors(eng, capsys):
    ig.ingest(eng, _runs())
    assert cli.main(["compare", "--style", "lkp", "--all", KERNELS[0][:8], "f" * 12]) == 1
    assert "unknown kernel 'ffffffffffff'" in capsys.readouterr().err
    other = "aaaa" + "f" * 36  # shares its first four characters with KERNELS[0]
    ig.ingest(eng, [ig.RunData(JOB, ig.KernelSpec(other), ig.MachineSpec("qemu-vm"), 0, {})])
    assert cli.main(["compare", "--style", "lkp", "--all", "aaaa", KERNELS[1][:8]]) == 1
    err = capsys.readouterr().err
    assert "kernel 'aaaa' is ambiguous: aaaaaaaaaaaa, aaaaffffffff" in err
    assert "Traceback" not in err
    # an exact commit is not a prefix of the other: it names one kernel
    assert cli.main(["compare", "--style", "lkp", "--all", KERNELS[0], KERNELS[1]]) == 0
