"""thpchallenge's and thpcompact's tables against the real compare-mmtests.pl of the mmtests
commits their job definitions pin, run from ../shared/upstream's bundle on the same logs.

The logs are written from a seeded random source (mmtests_synth.py) with the cases the
extraction rules treat specially: several iterations, a thread count whose faults were all
huge on the base kernel, one where the new kernel had none, base, remote and unknown-node
faults. Each is imported with ``stackbench import mmtests`` and compared with ``stackbench
compare --style mmtests``; the text must be the same, byte for byte.

At 526d3138 compare-kernels' ``-a counts``/``-a locality`` select nothing for thpcompact
(its Perl extraction modules ignore the switch, so the latency table is printed again);
the counts and locality modules it ships are run by their own benchmark names over the same
logs (a link per iteration), which is what they would print.

Needs perl with File::Which, File::Slurp and YAML::PP and R (mmtests asks R for the normal
quantile); skipped, with the reason, without them or without the bundle.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SHARED
from mmtests_synth import write_run

from stackbench.cli import main
from stackbench.jobs.benchmarks import definitions as d

BUNDLE = SHARED / "upstream" / "mmtests.bundle"
PERL_MODULES = ("File::Which", "File::Slurp", "YAML::PP")

# (suite, stackbench compare arguments, compare-mmtests.pl arguments)
CASES = [
    ("thpchallenge", ["--table", "latency"], ["-b", "thpchallenge"]),
    ("thpchallenge", ["--table", "significance"], ["-b", "thpchallenge", "--print-significance"]),
    ("thpchallenge", ["--table", "counts"], ["-b", "thpchallenge", "-a", "counts"]),
    ("thpcompact", ["--table", "latency"], ["-b", "thpcompact"]),
    ("thpcompact", ["--table", "significance"], ["-b", "thpcompact", "--print-significance"]),
    ("thpcompact", ["--table", "counts"], ["-b", "thpcompactcounts"]),
    ("thpcompact", ["--table", "locality"], ["-b", "thpcompactlocality"]),
    ("thpcompact", ["--monitor", "duration"], ["-b", "thpcompact", "--print-monitor", "duration"]),
]
KERNELS = ("base-v1", "new-v2")


def _missing_tools() -> str:
    if not BUNDLE.is_file():
        return f"mmtests bundle not present: {BUNDLE}"
    if not shutil.which("perl"):
        return "perl is not installed"
    for mod in PERL_MODULES:
        if subprocess.run(["perl", f"-M{mod}", "-e1"], capture_output=True).returncode:
            return f"perl module {mod} is not installed (Debian: lib*-perl)"
    if not shutil.which("R"):
        return "R is not installed (r-base-core): mmtests computes its intervals with it"
    return ""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict[str, Path]:
    return checkouts(tmp_path_factory.mktemp("mmtests"))


def checkouts(root: Path) -> dict[str, Path]:
    """Checkouts of the pinned commits under ``root``, and a PERL5LIB with the one module
    mmtests imports that Debian 12 lacks (List::BinarySearch, unused on these paths) as an
    empty stand-in; skips, with the reason, without the tools or the bundle."""
    why = _missing_tools()
    if why:
        pytest.skip(why)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(BUNDLE), root / "repo"], check=True)
    out: dict[str, Path] = {}
    for suite in ("thpchallenge", "thpcompact"):
        commit = d.load(suite).upstream.commit
        tree = root / suite
        subprocess.run(
            ["git", "-C", root / "repo", "worktree", "add", "-q", "--detach", tree, commit],
            check=True,
        )
        out[suite] = tree
    stub = root / "perl5" / "List"
    stub.mkdir(parents=True)
    (stub / "BinarySearch.pm").write_text("package List::BinarySearch;\n1;\n")
    out["perl5lib"] = root / "perl5"
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for suite in ("thpchallenge", "thpcompact"):
        root = tmp_path_factory.mktemp(f"log-{suite}")
        # base: few huge faults at 1 thread (its first fault is a base page, so thpchallenge
        # lists fault-base-1 first), every fault of 5 threads huge; new: no huge at 1 thread
        write_run(root, KERNELS[0], suite, seed=11, iterations=3, huge_share={1: 0.1, 5: 1.0})
        write_run(root, KERNELS[1], suite, seed=12, iterations=2, huge_share={1: 0.0})
        for kernel in KERNELS:
            for it in (root / kernel).glob("iter-*"):
                for alias in ("counts", "locality"):
                    (it / f"{suite}{alias}").symlink_to(suite)
        out[suite] = root
    return out


def _real(upstream: dict[str, Path], suite: str, root: Path, args: list[str]) -> str:
    env = {**os.environ, "PERL5LIB": str(upstream["perl5lib"])}
    script = upstream[suite] / "bin" / "compare-mmtests.pl"
    res = subprocess.run(
        ["perl", str(script), "-d", ".", *args, "-n", ",".join(KERNELS)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip(), res.stderr
    return res.stdout


def _ours(root: Path, args: list[str]) -> str:
    for kernel in KERNELS:
        assert main(["import", "mmtests", str(root / kernel)]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["compare", "--style", "mmtests", *KERNELS, *args])
    assert rc == 0
    return out.getvalue()


@pytest.mark.parametrize(
    ("suite", "ours", "theirs"), CASES, ids=[f"{s}-{o[1]}" for s, o, _ in CASES]
)
def test_table_matches_real_compare(eng, upstream, logs, suite, ours, theirs):
    expected = _real(upstream, suite, logs[suite], theirs)
    got = _ours(logs[suite], ours)
    if "--monitor" in ours:  # monitors pad their last column; compared without it
        assert [ln.rstrip() for ln in got.splitlines()] == [
            ln.rstrip() for ln in expected.splitlines()
        ]
    else:
        assert got == expected


def test_cases_cover_the_special_rows(eng, upstream, logs):
    """The logs reach the rows the rules treat specially: a size that never occurred (its
    one 0 sample), a starred mean, and in thpchallenge's first-seen order a thread count
    whose first fault was a base page and one whose first was huge."""
    text = _real(upstream, "thpcompact", logs["thpcompact"], ["-b", "thpcompact"])
    assert "Amean     fault-base-5" in text and "*" in text
    base_5 = next(ln for ln in text.splitlines() if ln.startswith("Min       fault-base-5"))
    assert base_5.split()[2] == "0.00000000"
    text = _real(upstream, "thpchallenge", logs["thpchallenge"], ["-b", "thpchallenge"])
    ops = [ln.split()[1] for ln in text.splitlines() if ln.startswith("Min ")]
    assert ops[:3] == ["fault-base-1", "fault-both-1", "fault-huge-1"], ops
    assert ops[-3:] == ["fault-huge-5", "fault-both-5", "fault-base-5"], ops
