"""The CLI computes cold tables over libpq alone (pgsession): the same text as over
psycopg, for every style, and psycopg's placeholders and parameters as libpq's."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from stackbench.cli import main
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb import libpq, pgsession, pgwire
from stackbench.resultsdb.tables import render, textcache

DATA = Path(__file__).parent / "data" / "mmtests"
MM = ["v6.8-rc1-base", "v6.8-rc1-patched", "mm-next"]


def test_placeholders_and_parameters():
    sql, params = pgsession.convert(
        "SELECT %(a)s, 10%%, %(a)s, %(b)s", {"a": [1, 2], "b": ['x"\\y', None]}
    )
    assert sql == "SELECT $1, 10%, $1, $2"
    assert params == ["{1,2}", '{"x\\"\\\\y",NULL}']
    sql, params = pgsession.convert("x = %s AND y = %s", (True, float("nan")))
    assert (sql, params) == ("x = $1 AND y = $2", ["t", "NaN"])
    assert pgsession.convert("SELECT 1", None) == ("SELECT 1", [])
    assert pgsession.convert("SELECT %s", [1.5e-300]) == ("SELECT $1", ["1.5e-300"])
    with pytest.raises(pgsession.Unsupported):
        pgsession.convert("SELECT %s", [{"a": 1}])
    with pytest.raises(pgsession.Unsupported):
        pgsession.convert("SELECT %s, %s", [1])


def _cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(list(argv)) == 0, err.getvalue()
    return out.getvalue()


def _lkp_runs() -> list:
    job = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "size": "8T"})
    names = ["vm-scalability.throughput", "proc-vmstat.pgfault", "vm-scalability.stddev%"]
    return [
        ig.RunData(
            job,
            ig.KernelSpec(commit),
            ig.MachineSpec("qemu-vm"),
            it,
            {n: [1000.0 * (k + 1) * (1 + 0.3 * j) + it * 7.25 + 0.1] for j, n in enumerate(names)},
        )
        for k, commit in enumerate(("a" * 40, "b" * 40, "c" * 40))
        for it in range(4)
    ]


@pytest.mark.parametrize(
    ("refs", "opts"),
    [
        (["a" * 8, "b" * 8, "c" * 8], {"style": "lkp", "all_rows": True}),
        (["a" * 8, "b" * 8, "c" * 8], {"style": "lkp"}),
        (["a" * 8, "c" * 8], {"style": "stackbench", "all_rows": True}),
        (MM, {"style": "mmtests", "table": "latency"}),
        (MM, {"style": "mmtests", "monitor": "vmstat"}),
        (MM, {"style": "mmtests", "monitor": "duration"}),
        (MM, {"style": "mmtests", "table": "counts"}),
    ],
)
@pytest.mark.parametrize("client", ["libpq", "pgwire"])
def test_small_client_sessions_render_what_psycopg_renders(eng, wire, refs, opts, client):
    ig.ingest(eng, _lkp_runs())
    for run in MM:
        _cli("import", "mmtests", str(DATA / run))
    with textcache.connect_for_lookup() as conn:
        want = render.render_on(conn, refs, **opts)
    conn = textcache.quick_connect() if client == "libpq" else wire
    assert isinstance(conn, libpq.Connection if client == "libpq" else pgwire.Connection)
    with pgsession.Session(conn) as session:
        assert render.render_on(session, refs, **opts) == want


def test_cli_cold_table_goes_through_libpq_and_is_kept(eng, monkeypatch):
    ig.ingest(eng, _lkp_runs())
    refs = ["a" * 8, "b" * 8]
    used = []
    real = render.render_on
    monkeypatch.setattr(
        render, "render_on", lambda conn, *a, **k: used.append(type(conn)) or real(conn, *a, **k)
    )
    # the default rows (an --all table is made of kept columns: test_lkp_columns)
    first = _cli("compare", "--style", "lkp", *refs)
    assert used == [pgsession.Session]
    view = textcache.View(tuple(refs), "lkp", False)
    hit = textcache.quick_lookup(view)
    assert hit is not None and hit.text == first
    # a result type the small client does not read: the psycopg path serves instead
    monkeypatch.setattr(pgsession, "_READERS", {})
    with textcache.connect_for_lookup() as conn:
        conn.execute("DELETE FROM comparison")
    assert _cli("compare", "--style", "lkp", *refs) == first
    assert used[-1] is not pgsession.Session
    with pytest.raises(libpq.Error):
        pgsession.Session(textcache.quick_connect()).execute("SELECT 1")
