"""A real wheel carries every component package and its data files, and imports without the
source tree (editable installs can hide a missing package or template)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


COMPONENTS = {
    "stackbench": "stackbench",
    "results-db": "stackbench/resultsdb",
    "web": "stackbench/web",
    "jobs": "stackbench/jobs",
    "patches": "stackbench/patches",
    "kernels": "stackbench/kernels",
    "mail": "stackbench/mail",
}
# without it distutils notes that it does not byte-compile, which is no warning of ours
BUILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _source_files() -> list[str]:
    """The project's files as a fresh clone has them (with new files not yet committed): a
    worktree's build/ and egg-info remember data files the packaging no longer declares."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted({f for f in out.split("\0") if f and (ROOT / f).is_file()})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """One real wheel for the module, built from a clean copy of the sources, and what the
    build printed (verbose, so setuptools' warnings show)."""
    src = tmp_path_factory.mktemp("src")
    for name in _source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=BUILD_ENV,
    )
    (wheel,) = out.glob("stackbench-*.whl")
    return wheel, res.stdout + res.stderr


def _expected_files() -> set[str]:
    """Every source file of the component folders, as the wheel should name it: data without
    a known suffix (the guest's upstream-bin scripts) must travel too."""
    found = set()
    for name in _source_files():
        folder, _, rel = name.partition("/")
        if folder in COMPONENTS and rel:
            found.add(f"{COMPONENTS[folder]}/{rel}")
    return found


def test_wheel_contains_every_component_file(built):
    wheel, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected_files() - names)
    assert not missing, f"wheel lacks {missing[:10]}"
    assert "stackbench/resultsdb/migrations/versions/0001_initial_schema.py" in names
    assert "stackbench/jobs/benchmarks/guest/upstream-bin/log_test" in names


def test_build_is_quiet(built):
    """Data folders are declared, so setuptools has nothing to warn about (a newcomer's
    `pip install -e .` printed pages of "Package would be ignored")."""
    _, log = built
    warnings = [line.strip() for line in log.splitlines() if "warning" in line.lower()]
    assert not warnings, warnings[:5]


def test_editable_build_is_quiet(tmp_path):
    """What `pip install -e .` runs (setuptools' editable wheel, as the scripts' pip shows it
    to a newcomer) warns about nothing either."""
    code = f"import build; build.ProjectBuilder({str(ROOT)!r}).build('editable', {str(tmp_path)!r})"
    res = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=BUILD_ENV,
    )
    assert list(tmp_path.glob("stackbench-*.editable-*.whl"))
    log = res.stdout + res.stderr
    warnings = [line.strip() for line in log.splitlines() if "warning" in line.lower()]
    assert not warnings, warnings[:5]


def test_wheel_imports_without_source_tree(built, tmp_path):
    wheel, _ = built
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
