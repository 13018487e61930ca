"""A real wheel carries every component package and its data files, and imports without the
source tree (editable installs can hide a missing package or template)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build_wheel(out: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("stackbench-*.whl")
    return wheel


def _expected_files() -> set[str]:
    """Every .py and data file of the component folders, as the wheel should name it."""
    mapping = {
        "stackbench": "stackbench",
        "results-db": "stackbench/resultsdb",
        "web": "stackbench/web",
        "jobs": "stackbench/jobs",
        "patches": "stackbench/patches",
        "kernels": "stackbench/kernels",
        "mail": "stackbench/mail",
    }
    found = set()
    for folder, target in mapping.items():
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT / folder)
            # only files inside packages (folders with __init__.py up to the component root)
            if not all(
                (ROOT / folder / Path(*rel.parts[:i]) / "__init__.py").exists()
                for i in range(len(rel.parts))
            ):
                continue
            if path.suffix in (".py", ".sql", ".yaml", ".html", ".mako", ".c", ".cfg"):
                found.add(f"{target}/{rel.as_posix()}")
    return found


def test_wheel_contains_every_component_file(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected_files() - names)
    assert not missing, f"wheel lacks {missing[:10]}"
    assert "stackbench/resultsdb/migrations/versions/0001_initial_schema.py" in names


def test_wheel_imports_without_source_tree(tmp_path):
    wheel = _build_wheel(tmp_path)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    deps = sysconfig.get_paths()["purelib"]
    code = (
        "import stackbench.resultsdb.db as d, stackbench.cli as c; "
        "print(d.MIGRATIONS); c.build_parser()"
    )
    # -S: no site processing, so the editable install's path hook is not active
    res = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{target}:{deps}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(str(target))
