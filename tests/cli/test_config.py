"""Every setting declared once: the source reads STACKBENCH_* variables only through
stackbench.config, every name it uses is declared there, and docs/configuration.md's table
is the declarations'. ``stackbench config`` shows what is in effect without showing secrets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stackbench import config
from stackbench.errors import StackbenchError

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ["stackbench", "results-db", "patches", "kernels", "mail", "jobs", "web"]
NAME = re.compile(r"STACKBENCH_[A-Z0-9_]+")
# a read of the environment that names a setting: os.environ.get("STACKBENCH_..."),
# os.environ["STACKBENCH_..."] (not an assignment), os.getenv("STACKBENCH_...")
READ = re.compile(
    r"(environ\.get|getenv)\(\s*f?\"STACKBENCH_|environ\[\"STACKBENCH_[A-Z_]+\"\](?!\s*=)"
)


def sources() -> list[Path]:
    return [p for d in SOURCE for p in sorted((ROOT / d).rglob("*")) if p.suffix in (".py", ".cfg")]


def test_every_setting_the_source_names_is_declared():
    undeclared = set()
    for path in sources():
        for name in NAME.findall(path.read_text()):
            try:
                config.declared(name)
            except KeyError:
                undeclared.add(f"{name} ({path.relative_to(ROOT)})")
    assert not undeclared, sorted(undeclared)


def test_only_the_config_module_reads_settings_from_the_environment():
    readers = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sources()
        if p != ROOT / "stackbench" / "config.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if READ.search(line)
    ]
    assert not readers, readers


def test_the_checks_catch_a_stray_read_and_an_undeclared_name():
    assert READ.search('x = os.environ.get("STACKBENCH_WEB_PORT", "8080")')
    assert not READ.search('env["STACKBENCH_DATABASE_URL"] = url')
    with pytest.raises(KeyError, match="not a declared"):
        config.declared("STACKBENCH_NO_SUCH_SETTING")
    assert config.declared("STACKBENCH_SUITE_URL_MMTESTS").name == "STACKBENCH_SUITE_URL_"


def test_the_documented_table_is_the_declarations():
    readme = (ROOT / "docs" / "configuration.md").read_text()
    start = readme.index("<!-- config table: generated from stackbench.config.VARIABLES -->\n")
    end = readme.index("<!-- end of config table -->")
    body = readme[start:end].split("\n", 1)[1]
    assert body == config.table(), (
        "docs/configuration.md's table is stale: stackbench config --table"
    )


def test_defaults_and_values(monkeypatch):
    monkeypatch.delenv("STACKBENCH_WEB_PORT", raising=False)
    assert config.get_int("STACKBENCH_WEB_PORT") == 8080
    monkeypatch.setenv("STACKBENCH_WEB_PORT", "")  # empty is unset
    assert config.get("STACKBENCH_WEB_PORT") == "8080"
    monkeypatch.setenv("STACKBENCH_WEB_PORT", "eighty")
    with pytest.raises(ValueError, match="STACKBENCH_WEB_PORT must be a whole number") as err:
        config.get_int("STACKBENCH_WEB_PORT")
    assert isinstance(err.value, StackbenchError)  # the CLI's one-line error, not a "bug"
    monkeypatch.setenv("STACKBENCH_TRACKED", "")
    assert config.raw("STACKBENCH_TRACKED") == ""  # set but empty: tracks nothing


def test_stackbench_config_masks_secrets(tmp_path):
    env = {**os.environ, "STACKBENCH_HOME": str(tmp_path), "STACKBENCH_SMTP_PASSWORD": "hunter2",
           "STACKBENCH_BB_WORKER_PASSWORD_QEMU1": "s3cret", "STACKBENCH_SMTP_HOST": "mx.example"}  # fmt: skip
    env.pop("STACKBENCH_WEB_PORT", None)
    out = subprocess.run(
        [sys.executable, "-m", "stackbench", "config"], env=env, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    assert "hunter2" not in out and "s3cret" not in out
    lines = {ln.split()[0]: ln for ln in out.splitlines()}
    assert "***" in lines["STACKBENCH_SMTP_PASSWORD"]
    assert "***" in lines["STACKBENCH_BB_WORKER_PASSWORD_QEMU1"]
    assert (
        "mx.example" in lines["STACKBENCH_SMTP_HOST"]
        and "(environment)" in lines["STACKBENCH_SMTP_HOST"]
    )
    assert "8080" in lines["STACKBENCH_WEB_PORT"] and "(default)" in lines["STACKBENCH_WEB_PORT"]
