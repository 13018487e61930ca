"""Patched-code coverage through the real pipeline: the demo stack with two planted patches
on top (a comment-only edit, and a change to sysctl_compaction_handler, which runs only
when someone writes /proc/sys/vm/compact_memory and no benchmark does), applied with real
``git am``, built with the tiny-guest config (ftrace's function profiler compiled in, off),
measured in one boot per kernel and counted on one evidence boot per kernel under QEMU TCG.

Checked: the functions each commit changes and their calls beside the base's, the flag on
the verdict row of the commit none of whose functions ran, "no function changed" for the
comment-only commit, in ``compare --style stackbench``, the comparison page, the series
page and the comparison's JSON."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.intake import submit_series
from helpers.kernelkit import base_kernel, cache_dir, require_kernel_tools, use_kernel_cache
from helpers.web import app, client  # noqa: F401  (fixtures)

from stackbench.jobs.driver import pipeline
from stackbench.patches import stacks
from stackbench.resultsdb import coverage_store, kernels_store, query, series_store
from stackbench.resultsdb import db as rdb
from stackbench.resultsdb.tables import render

pytestmark = pytest.mark.slow

VMS = "vm-scalability[test=anon-w-seq]"
FILES = ("mm/compaction.c", "mm/huge_memory.c")


# the plants' date: git am keeps it as the committer's, so every run applies the same
# commits and their kernels are built once, then reused from the test cache
PLANT_DATE = "2026-12-01T12:00:00+00:00"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=stackbench test",
         "-c", "user.email=test@stackbench.invalid", *args],
        check=True, capture_output=True, text=True,
        env={**os.environ, "GIT_AUTHOR_DATE": PLANT_DATE, "GIT_COMMITTER_DATE": PLANT_DATE},
    ).stdout  # fmt: skip


def _edit(repo: Path, path: str, old: str, new: str, subject: str) -> None:
    f = repo / path
    text = f.read_text()
    assert old in text, old
    f.write_text(text.replace(old, new, 1))
    _git(repo, "commit", "-qam", f"{subject}\n\nPlanted by the coverage test.")


def stack_with_plants(tmp: Path) -> bytes:
    """The demo stack and two planted patches, as one 5-patch mbox."""
    linux = cache_dir() / "trees" / "linux-6.1"
    repo = tmp / "plants"
    repo.mkdir()
    _git(repo, "init", "-q")
    for f in FILES:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(_git(linux, "show", f"HEAD:{f}"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    for p in sorted(stacks.stack_dir("compaction-demo").glob("000[1-9]-*.patch")):
        _git(repo, "am", "-q", str(p))
    _edit(
        repo, "mm/compaction.c",
        "/* Returns true if compaction should be skipped this time */\n",
        "/* Returns true if compaction should be skipped this time (see defer_compaction) */\n",
        "mm/compaction: say where the deferral starts",
    )  # fmt: skip
    _edit(
        repo, "mm/compaction.c",
        "\tif (write)\n\t\tcompact_nodes();\n",
        "\tif (write && *length)\n\t\tcompact_nodes();\n",
        "mm/compaction: compact on a non-empty write only",
    )  # fmt: skip
    return _git(repo, "format-patch", "-n", "--thread", "--stdout", "HEAD~5").encode()


@pytest.fixture
def kernel_env(monkeypatch):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    monkeypatch.setenv("STACKBENCH_EVIDENCE_BOOT", "1")


def _row(rows: list[coverage_store.CommitCoverage], prefix: str) -> coverage_store.CommitCoverage:
    return next(r for r in rows if r.label.startswith(prefix))


def _calls(row: coverage_store.CommitCoverage) -> dict[str, tuple[int | None, int | None]]:
    """(calls, base calls) per changed function over the jobs; a function the compiler
    folded into its callers counts as their calls."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for calls in row.jobs.values():
        for f in calls:
            if f.calls is None and f.via:
                out[f.name] = (sum(c or 0 for _n, c, _b in f.via), sum(b or 0 for *_x, b in f.via))
            else:
                out[f.name] = (f.calls, f.base_calls)
    return out


def test_an_evidence_boot_counts_the_calls_in_the_guest(kernel_env, monkeypatch, tmp_path):
    """One evidence boot of the cached base kernel (tiny-guest: the profiler compiled in)
    under TCG: the guest counts the listed functions during the run, names the one the
    compiler folded in as untraceable, and counts 0 for one the job never calls; a boot
    without a list leaves the profiler off and the runs without counts."""
    from stackbench.jobs.executors import boot_stage, jobspecs
    from stackbench.resultsdb.rundata import KernelSpec

    _repo, res = base_kernel(monkeypatch)  # reused from the cache unless its config changed
    art, base = res.artifact_dir, res.commit
    settings = pipeline.Settings(cpus=2, mem_mb=1024, init_timeout_s=120, accel="tcg")
    plan = [sj for sj in jobspecs.plan_for(jobspecs.resolve_jobs([VMS], 1), settings)]
    # __do_huge_pmd_anonymous_page has one caller: gcc folds it in (no symbol at -Os)
    wanted = ["vma_thp_gfp_mask", "do_huge_pmd_anonymous_page", "sysctl_compaction_handler",
              "__do_huge_pmd_anonymous_page"]  # fmt: skip
    kernel = KernelSpec(commit=base, name="base")
    runs = {}
    for label, coverage in (("evidence", wanted), ("measured", None)):
        _res, got = boot_stage.run_kernel(
            art / "bzImage", {}, plan, kernel=kernel, settings=settings,
            workdir=tmp_path / label, boot_id=label, coverage=coverage,
        )  # fmt: skip
        assert [r.status for r in got] == ["done"], [r.error for r in got]
        runs[label] = got[0]
    counted = runs["evidence"].meta["coverage"]
    print(counted)
    assert counted["untraceable"] == ["__do_huge_pmd_anonymous_page"]
    assert counted["calls"]["vma_thp_gfp_mask"] > 0
    assert counted["calls"]["do_huge_pmd_anonymous_page"] > 0
    assert counted["calls"]["sysctl_compaction_handler"] == 0
    assert "coverage" not in runs["measured"].meta


# five kernels to build (about 6 minutes each on this loaded host) and twelve boots
@pytest.mark.long
def test_each_commit_shows_the_calls_of_the_functions_it_changes(eng, kernel_env, tmp_path, client):  # noqa: F811
    sid = submit_series(eng, stack_with_plants(tmp_path), jobs=[VMS], runs=1)
    settings = pipeline.Settings(
        cpus=2, mem_mb=1024, init_timeout_s=120, accel="tcg", adaptive=False
    )
    assert pipeline.run_series(eng, sid, settings=settings, boots=1, seed=1) == "done"
    with rdb.session(eng) as s:
        kernels = [(k.id, k.commit) for k in kernels_store.series_kernels(s, sid)]
    assert len(kernels) == 6
    refs = [c for _i, c in kernels]
    with eng.connect() as conn:
        rows = coverage_store.load(conn, query.kernels_by_id(conn, [i for i, _c in kernels]))
    for r in rows:
        print(r.label, r.flag, _calls(r))
    # 1/5, the cleanup: its helper is static inline, its two users are static too (at -Os
    # all three are folded into their callers, counted there); each as often as on the base
    one = _calls(_row(rows, "1/5"))
    for fn in ("compaction_defer_limit", "compaction_deferred", "compaction_restarting"):
        calls, base = one[fn]
        assert calls is not None and base is not None
        assert abs(calls - base) <= max(3, 0.2 * base), (fn, calls, base)
    # 2/5 and 3/5: every anonymous THP fault goes through both changed functions
    assert _calls(_row(rows, "2/5"))["vma_thp_gfp_mask"][0] > 0
    three = _calls(_row(rows, "3/5"))["__do_huge_pmd_anonymous_page"]
    assert three[0] > 0 and three[1] > 0
    assert not _row(rows, "3/5").flag
    # 4/5 is comment-only; 5/5's function never ran: the flag
    assert _row(rows, "4/5").no_function_changed
    five = _row(rows, "5/5")
    assert _calls(five) == {"sysctl_compaction_handler": (0, 0)}
    assert five.flag == coverage_store.NOT_RUN

    text = render.render(eng, refs, style="stackbench")
    print(text)
    assert re.search(r"new: +5/5\S* .*\[" + re.escape(coverage_store.NOT_RUN) + r"\]", text)
    assert not re.search(r"new: +3/5\S* .*\[", text)
    assert re.search(r"4/5\S*: no function changed", text)
    assert "sysctl_compaction_handler 0 calls: this benchmark did not run the changed code" in text
    assert re.search(
        r"__do_huge_pmd_anonymous_page \(static\)(: inlined into its callers; "
        r"do_huge_pmd_anonymous_page)? [\d,]+ calls \(base [\d,]+\)",
        text,
    )

    # the same evidence boots profiled each kernel (docs/profile.md; test_profile_guest.py)
    assert "== profile: kernel symbols whose share of the CPU samples moved most" in text

    # the comparison page, its JSON and the series page
    with rdb.session(eng) as s:
        key = series_store.get(s, sid).meta["comparison"]["key"]
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    assert 'id="coverage"' in page and "no function changed" in page
    assert "this benchmark did not run the changed code" in page
    doc = client.get(f"/api/comparisons/{key}").get_json()
    by_kernel = {c["kernel"][:3]: c for c in doc["coverage"]}
    assert by_kernel["5/5"]["flag"] == coverage_store.NOT_RUN
    assert by_kernel["4/5"]["no_function_changed"] is True
    assert by_kernel["3/5"]["jobs"]
    assert {r["kernel"][:3] for r in doc["profile"]} == {"1/5", "2/5", "3/5", "4/5", "5/5"}
    # 3/5's changed function is marked in its profile: itself, or (folded in at -Os, no
    # symbol of its own) the caller whose code holds it
    inner = "__do_huge_pmd_anonymous_page"
    (prof3,) = [r for r in doc["profile"] if r["kernel"].startswith("3/5")]
    marked = [(m["symbol"], m["holds"]) for rows in prof3["jobs"].values() for m in rows
              if m["patched"]]  # fmt: skip
    print("3/5 marked:", marked)
    assert any(sym == inner or inner in holds for sym, holds in marked), prof3
    if inner not in dict(marked):
        assert re.search(
            rf"\*perf-profile\.self\.cycles-pp\.\S+ .*\(holds {inner}, inlined\)", text
        )
    # one flag a flagged commit: 5/5's, and 1/5's too when no fault of the run compacted
    # (anon-w-seq seldom does; test_buildbot_evidence counts 1/3 under stress-highalloc)
    flagged = sorted(r.label[:3] for r in rows if r.flag)
    print("flagged:", flagged)
    assert "5/5" in flagged and not {"2/5", "3/5", "4/5"} & set(flagged), flagged
    series_page = client.get(f"/series/{sid}").get_data(as_text=True)
    assert series_page.count('class="coverage-flag"') == len(flagged)
