"""stackbench compare keeps its text by content: the same command on unchanged runs prints
the stored text (warnings included), and any change to the kernels' finished runs makes it
compute again."""

from __future__ import annotations

from sqlalchemy import text

from stackbench import cli
from stackbench.resultsdb import db
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.tables import textcache

JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "runtime": "300s"})
BASE, PATCH = "d" * 40, "e" * 40


def _runs(machine: str = "qemu-vm", level: float = 1000.0, start: int = 0) -> list:
    return [
        ig.RunData(
            JOB,
            ig.KernelSpec(commit),
            ig.MachineSpec(machine),
            start + it,
            {"vm-scalability.throughput": [level * factor + it]},
        )
        for commit, factor in ((BASE, 1.0), (PATCH, 1.1))
        for it in range(3)
    ]


def _row(out: str) -> list[str]:
    (row,) = [ln for ln in out.splitlines() if ln.endswith("vm-scalability.throughput")]
    return row.split()


def _compare(capsys, *extra: str):
    # the default rows: an --all table is made of kept columns instead (test_lkp_columns)
    assert cli.main(["compare", "--style", "lkp", *extra, BASE[:8], PATCH[:8]]) == 0
    return capsys.readouterr()


def test_same_command_prints_the_stored_text(eng, capsys):
    ig.ingest(eng, _runs())
    first = _compare(capsys)
    view = textcache.View((BASE[:8], PATCH[:8]), "lkp", False)
    with db.connect() as conn:
        hit = textcache.lookup(view, conn)
    assert hit is not None and hit.text == first.out.encode()
    # the stored text is what is printed: change it behind the command's back
    with eng.begin() as c:
        c.execute(
            text("UPDATE kept_table SET text = convert_to('stored text', 'UTF8') WHERE key = :k"),
            {"k": view.key},
        )
    assert _compare(capsys).out == "stored text\n"
    # other options are another entry
    assert "vm-scalability.throughput" in _compare(capsys, "--suite", "vm-scalability").out


def test_a_kept_table_reaches_a_text_only_stdout(eng):
    # the kept bytes go to stdout's binary buffer; a caller's StringIO has none
    import contextlib
    import io

    ig.ingest(eng, _runs())
    outs = []
    for _ in range(2):  # computed, then kept
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["compare", "--style", "lkp", BASE[:8], PATCH[:8]]) == 0
        outs.append(out.getvalue())
    assert outs[1] == outs[0] and _row(outs[1])[:3] == ["1001", "+10.0%", "1101"]


def test_new_runs_make_the_stored_text_stale(eng, capsys):
    ig.ingest(eng, _runs())
    before = _compare(capsys)
    assert _row(before.out)[:3] == ["1001", "+10.0%", "1101"]
    ig.ingest(eng, _runs(level=1003.0, start=3))  # three more runs of each kernel
    after = _compare(capsys)
    assert after.out != before.out
    assert _row(after.out)[0] == "1002"


def test_evidence_stored_after_the_runs_makes_the_stored_text_stale(eng, capsys):
    """An evidence boot keeps its profile and counts on kernels whose runs are done (no
    run or kernel row is added): the stackbench table kept before them is computed again."""
    from stackbench.resultsdb import coverage_store, profile_store

    ig.ingest(eng, _runs())

    def stackbench_table() -> str:
        assert cli.main(["compare", "--style", "stackbench", BASE[:8], PATCH[:8]]) == 0
        return capsys.readouterr().out

    before = stackbench_table()
    assert "== profile" not in before and "== patched code" not in before
    assert stackbench_table() == before  # kept
    with eng.connect() as c:
        ids = dict(c.execute(text("SELECT commit, id FROM kernel_build")).all())
    job = "vm-scalability"
    with db.session(eng) as s:
        for commit, share in ((BASE, 0.30), (PATCH, 0.45)):
            prof = {"event": "cpu-clock", "samples": 1000, "self": {"compact_zone": share},
                    "children": {"compact_zone": share}}  # fmt: skip
            profile_store.save(s, ids[commit], job, prof)
    profiled = stackbench_table()
    assert "== profile" in profiled and "perf-profile.self.cycles-pp.compact_zone" in profiled
    with db.session(eng) as s:
        for commit, n in ((BASE, 12001), (PATCH, 12345)):
            coverage_store.save_counts(s, ids[commit], job, {"calls": {"compact_zone": n}})
    counted = stackbench_table()
    assert "== patched code" in counted and counted != profiled


def test_machines_are_refused_until_picked_then_kept_per_choice(eng, capsys):
    ig.ingest(eng, _runs() + _runs(machine="box-1", level=100000.0))
    # mixing two machines is refused, and the refusal is no kept table
    assert cli.main(["compare", "--style", "lkp", "--all", BASE[:8], PATCH[:8]]) == 1
    err = capsys.readouterr().err
    assert "come from 2 machines" in err and "--pool-machines" in err
    assert "Traceback" not in err
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 0
    pooled = _compare(capsys, "--pool-machines")
    assert pooled.out.startswith("# runs pooled across 2 machines (--pool-machines): box-1, ")
    assert _compare(capsys, "--pool-machines").out == pooled.out
    one = _compare(capsys, "--machine", "qemu-vm")
    assert _row(one.out)[:3] == ["1001", "+10.0%", "1101"]
    other = _compare(capsys, "--machine", "box-1")
    assert _row(other.out)[:3] == ["100001", "+10.0%", "110001"]
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 3


def _compare_args(*extra: str):
    from stackbench.cli import compare

    parser = cli.build_parser("compare")
    return compare, parser.parse_args(["compare", *extra, BASE[:8], PATCH[:8]])


def test_every_option_that_changes_the_table_is_in_the_key():
    compare, base = _compare_args()
    # every compare option but the kernels (the key's refs) and --plot (a file beside the
    # table, not the table) reaches the key
    dests = set(vars(base)) - {"kernels", "plot", "command", "verbose", "_run"}
    assert {("all_rows" if d == "all" else d) for d in dests} == set(compare.options(base))
    variants = [
        ["--style", "mmtests"],
        ["--style", "stackbench"],
        ["--style", "alloc-latency"],
        ["--style", "alloc-latency", "--pass", "2"],
        ["--style", "order-success"],
        ["--style", "per-run", "--metric", "vm-scalability.throughput"],
        ["--style", "per-run", "--metric", "vm-scalability.median"],
        ["--all"],
        ["--style", "mmtests", "--table", "counts"],
        ["--style", "mmtests", "--monitor", "vmstat"],
        ["--suite", "vm-scalability"],
        ["--machine", "box-1"],
        ["--machine", "qemu-vm"],
        ["--pool-machines"],
        ["--suite-source", "upstream"],
        ["--suite-source", "builtin"],
    ]
    keys = {}
    for extra in [[], *variants]:
        _, args = _compare_args(*extra)
        key = textcache.View(tuple(args.kernels), **compare.options(args)).key
        assert key not in keys, f"{extra} shares a kept table with {keys.get(key)}"
        keys[key] = extra
    _, plotted = _compare_args("--plot", "x.svg")
    assert textcache.View(tuple(plotted.kernels), **compare.options(plotted)).key in keys


def test_two_option_sets_do_not_share_a_kept_table(eng, capsys):
    ig.ingest(eng, _runs() + _runs(machine="box-1", level=100000.0))
    on_qemu = _compare(capsys, "--machine", "qemu-vm").out
    pooled = _compare(capsys, "--pool-machines").out
    assert pooled != on_qemu and pooled.startswith("# runs pooled")
    assert _compare(capsys, "--machine", "qemu-vm").out == on_qemu
    # the stored entries carry the options they were made with
    with eng.connect() as c:
        kept = c.execute(text("SELECT options FROM kept_table ORDER BY key")).scalars()
        options = sorted((o["machine"] or "", o["pool_machines"]) for o in kept)
    assert options == [("", True), ("qemu-vm", False)]


def test_unknown_kernel_is_an_error_and_stores_nothing(eng, capsys):
    ig.ingest(eng, _runs())
    assert cli.main(["compare", "--style", "lkp", BASE[:8], "f" * 12]) == 1
    assert "unknown kernel 'ffffffffffff'" in capsys.readouterr().err
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 0


def test_table_is_printed_when_it_cannot_be_kept(eng, capsys, refuse_writes):
    ig.ingest(eng, _runs())
    refuse_writes("comparisons are read-only here", "kept_table")
    out = _compare(capsys)
    assert _row(out.out)[:3] == ["1001", "+10.0%", "1101"]
    assert "could not keep the table for next time" in out.err
    assert "comparisons are read-only here" in out.err
    assert "Traceback" not in out.err
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM kept_table")).scalar() == 0


def test_text_kept_by_other_table_code_is_not_printed(eng, capsys, monkeypatch):
    ig.ingest(eng, _runs())
    first = _compare(capsys)
    view = textcache.View((BASE[:8], PATCH[:8]), "lkp", False)
    with eng.begin() as c:  # the kept text, as if an older stackbench had rendered it
        c.execute(
            text("UPDATE kept_table SET text = convert_to('old layout', 'UTF8') WHERE key = :k"),
            {"k": view.key},
        )
    assert _compare(capsys).out == "old layout\n"
    # an upgrade touches the table code: the text is computed again
    old_key = view.key
    monkeypatch.setattr(textcache, "_code", [textcache.code_version() + ";lkp.py:1:1"])
    assert textcache.View((BASE[:8], PATCH[:8]), "lkp", False).key != old_key
    assert _compare(capsys).out == first.out


def test_a_database_at_another_revision_is_named_not_read(eng, capsys):
    ig.ingest(eng, _runs())
    _compare(capsys)
    with eng.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = 'elsewhere'"))
    try:
        assert cli.main(["compare", "--style", "lkp", BASE[:8], PATCH[:8]]) == 1
        err = capsys.readouterr().err
        assert "revision elsewhere" in err and "stackbench migrate" in err
        assert "Traceback" not in err and len(err.splitlines()) == 1
    finally:
        with eng.begin() as c:
            c.execute(
                text("UPDATE alembic_version SET version_num = :v"), {"v": db.head_revision()}
            )
