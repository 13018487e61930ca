"""Conformance with LKP's real outputs (../shared/fixtures, ../shared/seeds; skipped when
absent): the vm-scalability parse, the change-rule verdicts, and table rows reproduced from
runs with the statistics the published tables show."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from conftest import SHARED, shared_fixtures
from test_lkp_table import make_dataset, spread

from stackbench.jobs.benchmarks.parsers import vm_scalability as vms
from stackbench.resultsdb.tables import lkp, lkp_rule

RULER = "=" * 89


def _cases(*parts: str, pattern: str) -> list[Path]:
    path = SHARED / "fixtures" / Path(*parts)
    return sorted(path.glob(pattern)) if path.is_dir() else []


# -- vm-scalability parse -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    _cases("lkp", "vm-scalability-parse", pattern="*.raw") or ["absent"],
    ids=lambda p: getattr(p, "stem", p),
)
def test_parse_matches_lkp(raw):
    shared_fixtures("lkp", "vm-scalability-parse")
    expected = raw.with_suffix(".expected").read_text()
    want = "".join(line for line in expected.splitlines(True) if not line.startswith("#"))
    assert vms.format_stats(vms.parse(raw.read_text())) == want


# -- change rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    _cases("lkp", "stats_changed_stats", pattern="*.yaml") or ["absent"],
    ids=lambda p: getattr(p, "stem", p),
)
def test_changed_stats_verdicts(case):
    shared_fixtures("lkp", "stats_changed_stats")
    spec = yaml.safe_load(case.read_text())
    got = lkp_rule.changed_stats(
        spec["matrix_a"], spec["matrix_b"], dict(spec.get("options") or {})
    )
    expected = spec["expected"] or {}
    assert set(got) == set(expected)
    for stat, want in expected.items():
        for key, value in want.items():
            assert got[stat][key] == value, (stat, key)
    # the single-stat entry point the verdict engineer uses agrees on one-stat cases
    if len(spec["matrix_a"]) == 1:
        (stat, a), (_, b) = (
            next(iter(spec["matrix_a"].items())),
            next(iter(spec["matrix_b"].items())),
        )
        opts = spec.get("options") or {}
        verdict = lkp_rule.is_changed(
            a,
            b,
            stat,
            more=bool(opts.get("more")),
            gap=opts.get("gap"),
            variance=opts.get("variance"),
            regression_only=bool(opts.get("regression-only")),
        )
        assert verdict == (stat in expected)


# -- table rows rebuilt from their statistics ---------------------------------------------


def _mean_interval(text: str) -> tuple[float, float, bool]:
    """Values that LKP prints as ``text`` (%.4g, %.2f or truncated %d); integer?"""
    x = float(text)
    if "e" in text:
        half = 0.5 * 10 ** (math.floor(math.log10(abs(x))) - 3)
        return x - half, x + half, False
    if "." in text:
        return x - 0.005, x + 0.005, False
    return x, x + 1, True


def _pick(lo: float, hi: float, integer: bool) -> float | None:
    if integer:
        v = math.ceil(lo)
        return float(v) if v < hi else None
    return (lo + hi) / 2 if lo < hi else None


def solve_means(stat: str, means: list[str], changes: list[str]) -> list[float | None]:
    """Column means consistent with both the printed means and the printed changes."""
    absolute = lkp.uses_absolute_change(stat)
    lo0, hi0, int0 = _mean_interval(means[0])
    bases = [lo0] if int0 else [lo0 + (hi0 - lo0) * i / 200 for i in range(1, 200)]
    for base in bases:
        out: list[float | None] = [base]
        for m, c in zip(means[1:], changes, strict=True):
            p = float(c.rstrip("%"))
            if m == "0.00" and p == -100.0:
                out.append(None)  # the stat is absent in that kernel
                continue
            lo, hi, integer = _mean_interval(m)
            if absolute:
                clo, chi = base + p - 0.05, base + p + 0.05
            else:
                clo, chi = base * (1 + (p - 0.05) / 100), base * (1 + (p + 0.05) / 100)
            v = _pick(max(lo, clo), min(hi, chi), integer)
            if v is None:
                break
            out.append(v)
        else:
            return out
    raise AssertionError(f"no means reproduce {stat}: {means} {changes}")


def parse_row(line: str) -> tuple[str, list[str], list[int], list[str]]:
    """(stat, means, stddev percents (0: not shown), changes) of a printed perf row."""
    tokens = line.split()
    stat, tokens = tokens[-1], tokens[:-1]
    means: list[str] = []
    pcts: list[int] = []
    changes: list[str] = []
    i = 0
    while i < len(tokens):
        if means:
            changes.append(tokens[i])
            i += 1
        means.append(tokens[i])
        i += 1
        pct = 0
        if i < len(tokens) and tokens[i].startswith("±"):
            text = tokens[i][1:] or tokens[i + 1]
            i += 1 if tokens[i][1:] else 2
            pct = int(text.rstrip("%"))
        pcts.append(pct)
    return stat, means, pcts, changes


def runs_for(line: str, n: int) -> tuple[str, list[list[float] | None]]:
    stat, means, pcts, changes = parse_row(line)
    values = []
    for mean, text, pct in zip(solve_means(stat, means, changes), means, pcts, strict=True):
        if mean is None:
            values.append(None)
            continue
        integer = _mean_interval(text)[2]
        values.append(spread(mean, pct + 0.5 if pct else 0, n, integer=integer))
    return stat, values


def dataset_for(lines: list[str], labels: list[str], n: int, **kw):
    columns: list[tuple[str, dict]] = [(label, {}) for label in labels]
    for line in lines:
        stat, values = runs_for(line, n)
        for (_, stats), v in zip(columns, values, strict=True):
            stats[stat] = v
    return make_dataset(columns, **kw)


def perf_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("         %stddev"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_seed_000_groups_reproduced():
    seeds = SHARED / "seeds"
    if not seeds.is_dir():
        pytest.skip(f"conformance data not present: {seeds}")
    (seed,) = seeds.glob("000_*.txt")
    text = seed.read_text()
    chunks = text.split(RULER)[1:]
    assert len(chunks) == 19
    collapsed_seed = " ".join(text.split())
    for chunk in chunks:
        tokens = chunk.split()
        keys = tokens[0].rstrip(":").split("/")
        axes = dict(zip(keys, tokens[1].split("/"), strict=True))
        assert tokens[2] == "commit:"
        stat_at = tokens.index("vm-scalability.throughput")
        ncols = sum(1 for t in tokens[:stat_at] if set(t) == {"-"})
        labels = tokens[3 : 3 + ncols]
        last_bar = max(i for i, t in enumerate(tokens[:stat_at]) if t == "\\")
        row = " ".join(tokens[last_bar + 1 : stat_at + 1])
        params = {
            k: v
            for k, v in axes.items()
            if k not in ("compiler", "kconfig", "tbox_group", "testcase")
        }
        ds = dataset_for(
            [row],
            labels,
            5,  # "Each has 5 runs"
            params=params,
            suite=axes["testcase"],
            machine=axes["tbox_group"],
            config=axes["kconfig"],
            compiler=axes["compiler"],
        )
        out = lkp.render(ds, all_rows=True)
        assert " ".join(out.split()) in collapsed_seed, chunk[:200]


def _report(name: str) -> str:
    base = shared_fixtures("lkp", "reports")
    (path,) = base.glob(f"*{name}*.txt")
    return path.read_text()


def test_2020_report_perf_block_in_lkp_order():
    text = _report("2020")
    block = perf_block(text)
    rows = block[2:]
    ds = dataset_for(rows, ["3852f6768ede542e", "aae466b0052e1888edd1d7f473d"], 4)
    out = lkp.render(ds, all_rows=True)
    # same rows, same order (benchmark first, then monitors by how many rows they have)
    assert perf_block(out) == block


def test_2020_report_header():
    text = _report("2020")
    labels = ["3852f6768ede542e", "aae466b0052e1888edd1d7f473d"]
    ds = make_dataset([(label, {"x.y": [1.0] * 4}) for label in labels])
    out = lkp.render(ds, all_rows=True).splitlines()
    want = text.splitlines()
    head = want.index("3852f6768ede542e aae466b0052e1888edd1d7f473d ")
    assert out[out.index(want[head]) : out.index(want[head]) + 2] == want[head : head + 2]
    assert want[0] == out[0] == RULER


def test_2025_report_rows():
    text = _report("2025")
    rows = perf_block(text)[2:]
    assert len(rows) > 20
    ds = dataset_for(rows, ["448854478ab2f477", "6af8cb80d3a9a6bbd521d8a7c94"], 4)
    out = lkp.render(ds, all_rows=True).splitlines()
    for row in rows:
        assert row in out
