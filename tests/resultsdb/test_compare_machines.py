"""Runs of one job on two machines: the table says they are pooled, and --machine keeps one
machine's runs (a QEMU guest and a bare-metal box are not comparable)."""

from __future__ import annotations

from stackbench import cli
from stackbench.resultsdb import ingest as ig

pytest_plugins = ["helpers.web"]

JOB = ig.JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "runtime": "300s"})
BASE, PATCH = "b" * 40, "c" * 40


def _runs():
    out = []
    # the patch is 10% faster on both machines; the bare-metal box is 100x faster than QEMU
    for machine, level in (("qemu-vm", 1000.0), ("box-1", 100000.0)):
        for commit, factor in ((BASE, 1.0), (PATCH, 1.1)):
            for it in range(3):
                out.append(
                    ig.RunData(
                        JOB,
                        ig.KernelSpec(commit),
                        ig.MachineSpec(machine),
                        it,
                        {"vm-scalability.throughput": [level * factor + it]},
                    )
                )
    return out


def _throughput_row(table: str) -> str:
    (row,) = [ln for ln in table.splitlines() if ln.endswith("vm-scalability.throughput")]
    return row


def test_runs_of_several_machines_are_not_compared_without_a_choice(eng, capsys):
    ig.ingest(eng, _runs())
    for style in ("lkp", "mmtests", "stackbench"):
        assert cli.main(["compare", "--style", style, BASE[:8], PATCH[:8]]) == 1
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err == (
            "stackbench: error: runs of vm-scalability anon-w-seq come from 2 machines "
            "(box-1, qemu-vm): compare one with --machine NAME, or pool them with "
            "--pool-machines\n"
        )


def test_pooling_is_explicit_and_the_header_states_it(eng, capsys):
    ig.ingest(eng, _runs())
    argv = ["compare", "--style", "lkp", "--all", "--pool-machines", BASE[:8], PATCH[:8]]
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    first = out.out.splitlines()[0]
    assert first == "# runs pooled across 2 machines (--pool-machines): box-1, qemu-vm"
    assert "tbox_group" not in out.out  # no single machine to name in the header
    argv = ["compare", "--style", "stackbench", "--all", "--pool-machines", BASE, PATCH]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("# runs pooled across 2 machines")


def test_one_machine_needs_no_option(eng, capsys):
    ig.ingest(eng, [r for r in _runs() if r.machine.name == "qemu-vm"])
    assert cli.main(["compare", "--style", "lkp", "--all", BASE, PATCH]) == 0
    out = capsys.readouterr()
    assert "pooled" not in out.out and out.err == ""


def test_pool_option_is_refused_through_the_api(monkeypatch, capsys):
    monkeypatch.setenv("STACKBENCH_URL", "http://127.0.0.1:9")
    assert cli.main(["compare", "--pool-machines", BASE, PATCH]) == 1
    err = capsys.readouterr().err
    assert "--pool-machines" in err and "not available through STACKBENCH_URL" in err


def test_machine_option_compares_one_machine(eng, capsys):
    ig.ingest(eng, _runs())
    assert (
        cli.main(["compare", "--style", "lkp", "--all", "--machine", "qemu-vm", BASE, PATCH]) == 0
    )
    out = capsys.readouterr()
    assert out.err == ""
    assert "/qemu-vm/" in out.out  # tbox_group in the header
    assert _throughput_row(out.out).split() == [
        "1001",
        "+10.0%",
        "1101",
        "vm-scalability.throughput",
    ]
    assert cli.main(["compare", "--style", "lkp", "--all", "--machine", "box-1", BASE, PATCH]) == 0
    assert _throughput_row(capsys.readouterr().out).split()[0] == "100001"


def test_machine_without_runs_is_a_clear_error(eng, capsys):
    ig.ingest(eng, _runs())
    assert cli.main(["compare", "--machine", "nosuch", BASE, PATCH]) != 0
    assert f"no results stored for {BASE}, {PATCH} on machine nosuch" in capsys.readouterr().err


def _sign_in(eng, client):
    from helpers.web import add_user, login

    add_user(eng, "alice")  # starting a comparison needs an account
    login(client)


def _page(client, query):
    picked = client.get("/compare/new", query_string=query)
    assert picked.status_code == 303
    return picked.headers["Location"], client.get(picked.headers["Location"]).get_data(as_text=True)


def test_comparison_page_refuses_to_pool_and_offers_each_machine(eng, client):
    ig.ingest(eng, _runs())
    _sign_in(eng, client)
    _url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}"})
    assert "runs of these kernels come from 2 machines (box-1, qemu-vm)" in page
    assert "compare on box-1" in page and "pool the 2 machines" in page
    assert 'id="table-lkp"' not in page  # no table mixes the machines
    # one machine: its own table, 10% faster (the QEMU guest's level, not the pooled one)
    url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}", "machine": "qemu-vm"})
    assert "Runs of machine <b>qemu-vm</b> only." in page and "come from 2 machines" not in page
    text = client.get(url + "/lkp.txt").get_data(as_text=True)
    assert "/qemu-vm/" in text and "+10.0%" in text


def test_comparison_page_pools_on_request_and_says_so(eng, client):
    ig.ingest(eng, _runs())
    _sign_in(eng, client)
    url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}", "pool": "1"})
    assert "runs pooled across 2 machines: box-1, qemu-vm" in page
    text = client.get(url + "/stackbench.txt").get_data(as_text=True)
    # the first line of `stackbench compare --pool-machines`: the page's tables are the CLI's
    assert text.startswith("# runs pooled across 2 machines (--pool-machines): box-1, qemu-vm\n")


def test_unknown_machine_on_the_page_is_a_clear_message(eng, client):
    ig.ingest(eng, _runs())
    _sign_in(eng, client)
    _url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}", "machine": "nosuch"})
    assert "no finished runs stored for these kernels on machine nosuch yet" in page
