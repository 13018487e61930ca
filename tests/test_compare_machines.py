"""Runs of one job on two machines: the table says they are pooled, and --machine keeps one
machine's runs (a QEMU guest and a bare-metal box are not comparable)."""

from __future__ import annotations

from stackbench import cli
from stackbench.resultsdb import ingest as ig

pytest_plugins = ["test_web_support"]

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


def test_pooled_machines_are_named_in_a_warning(eng, capsys):
    ig.ingest(eng, _runs())
    assert cli.main(["compare", "--style", "lkp", "--all", BASE[:8], PATCH[:8]]) == 0
    out = capsys.readouterr()
    assert (
        "warning: vm-scalability anon-w-seq: runs from 2 machines are pooled (box-1, qemu-vm)"
        in out.err
    )
    assert "tbox_group" not in out.out  # no single machine to name in the header


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


def test_comparison_page_warns_about_pooled_machines(eng, client):
    from test_web_support import add_user, login

    ig.ingest(eng, _runs())
    add_user(eng, "alice")
    login(client)
    picked = client.get("/compare/new", query_string={"k": f"{BASE[:10]} {PATCH[:10]}"})
    assert picked.status_code == 303
    page = client.get(picked.headers["Location"]).get_data(as_text=True)
    assert "runs from 2 machines are pooled (box-1, qemu-vm)" in page
    assert "stackbench compare --machine NAME" in page
