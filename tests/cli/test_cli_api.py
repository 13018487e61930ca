"""With STACKBENCH_URL set, the CLI goes through a running server's API instead of the
database: import uploads (idempotently) and compare prints the server's table."""

from __future__ import annotations

from pathlib import Path

from helpers.web import add_token, add_user

from stackbench import cli

pytest_plugins = ["helpers.web"]

GOOD = Path(__file__).parents[1] / "data" / "lkp" / "good"
BASE = "9e26ce95028e83a061cf35e9b09b22c90d9b94e2"


def test_import_and_compare_through_the_api(eng, server, monkeypatch, capsys):
    add_user(eng, "w1", worker=True)
    monkeypatch.setenv("STACKBENCH_URL", server)
    monkeypatch.setenv("STACKBENCH_TOKEN", add_token(eng, "w1"))
    assert cli.main(["import", "lkp", str(GOOD)]) == 0
    assert capsys.readouterr().out == f"uploaded 15 runs to {server}, 0 already present\n"
    assert cli.main(["import", "lkp", str(GOOD)]) == 0
    assert capsys.readouterr().out == f"uploaded 0 runs to {server}, 15 already present\n"

    # comparing is a person's business: a worker's token uploads runs and nothing else
    assert cli.main(["compare", "--style", "lkp", BASE[:10], "5b77236920"]) == 1
    assert "uploads runs (POST /api/runs) and nothing else" in capsys.readouterr().err
    add_user(eng, "alice")
    monkeypatch.setenv("STACKBENCH_TOKEN", add_token(eng, "alice"))
    # the server's answer is the same table the database path prints
    assert cli.main(["compare", "--style", "lkp", BASE[:10], "5b77236920"]) == 0
    via_api = capsys.readouterr().out
    monkeypatch.delenv("STACKBENCH_URL")
    assert cli.main(["compare", "--style", "lkp", BASE[:10], "5b77236920"]) == 0
    assert capsys.readouterr().out == via_api
    assert "vm-scalability.throughput" in via_api


def test_api_path_refuses_what_it_cannot_do(eng, server, monkeypatch, capsys):
    monkeypatch.setenv("STACKBENCH_URL", server)
    assert cli.main(["compare", "--style", "mmtests", "a", "b", "--table", "counts"]) == 1
    assert "not available through STACKBENCH_URL" in capsys.readouterr().err
