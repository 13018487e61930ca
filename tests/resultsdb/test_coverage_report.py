"""The coverage report's parts that need no kernel: the guest's function-profiler output
read into calls (stackbench.jobs.benchmarks.funcprof), and the lines a commit gets from its
counts (stackbench.resultsdb.tables.coverage), flag included."""

from __future__ import annotations

from pathlib import Path

from stackbench.jobs.benchmarks import funcprof
from stackbench.resultsdb.coverage_store import NOT_RUN, CommitCoverage, FunctionCalls
from stackbench.resultsdb.tables import coverage

# two CPUs' trace_stat/function<N> files as the guest concatenates them (6.1, no graph tracer)
TRACE_STAT = """\
  Function                               Hit
  --------                               ---
  vma_thp_gfp_mask                       12001
  __do_huge_pmd_anonymous_page           344
  Function                               Hit
  --------                               ---
  vma_thp_gfp_mask                       344
"""


def test_trace_stat_sums_the_cpus() -> None:
    assert funcprof.parse_trace_stat(TRACE_STAT) == {
        "vma_thp_gfp_mask": 12345,
        "__do_huge_pmd_anonymous_page": 344,
    }


def test_a_run_counts_zero_for_a_traced_function_never_called(tmp_path: Path) -> None:
    (tmp_path / "funcprof").write_text(TRACE_STAT)
    (tmp_path / "funcprof-untraceable").write_text("compaction_defer_limit\n")
    wanted = ["vma_thp_gfp_mask", "sysctl_compaction_handler", "compaction_defer_limit"]
    got = funcprof.read_run(tmp_path, wanted)
    assert got == {
        "calls": {"vma_thp_gfp_mask": 12345, "sysctl_compaction_handler": 0},
        "untraceable": ["compaction_defer_limit"],
    }


def test_a_kernel_without_the_profiler_says_so(tmp_path: Path) -> None:
    (tmp_path / "funcprof-error").write_text("this kernel has no function profiler (x)\n")
    assert funcprof.read_run(tmp_path, ["f"]) == {
        "error": "this kernel has no function profiler (x)"
    }
    assert funcprof.read_run(tmp_path, []) is None


def _fc(name: str, calls: int | None, base: int | None, kind: str = "") -> FunctionCalls:
    return FunctionCalls(name, kind, "modified", calls, base, True)


def test_the_lines_say_calls_beside_the_base_and_what_did_not_run() -> None:
    row = CommitCoverage(
        2, "1/2-abc", [{"name": "compact_zone"}, {"name": "isolate_freepages_block"}],
        jobs={"thpscale": [_fc("compact_zone", 12345, 12001),
                           _fc("isolate_freepages_block", 0, 0, "static")]},
    )  # fmt: skip
    text = coverage.render([row])
    assert (
        "thpscale: compact_zone 12,345 calls (base 12,001); isolate_freepages_block (static) "
        "0 calls: this benchmark did not run the changed code"
    ) in text
    assert NOT_RUN not in text  # one of its functions ran


def test_a_commit_none_of_whose_functions_ran_is_flagged() -> None:
    row = CommitCoverage(
        3, "2/2-def", [{"name": "sysctl_compaction_handler"}],
        jobs={"vm-scalability": [_fc("sysctl_compaction_handler", 0, 0)],
              "thpscale": [_fc("sysctl_compaction_handler", 0, 0)]},
    )  # fmt: skip
    assert row.flag == NOT_RUN
    assert f"2/2-def  [{NOT_RUN}]" in coverage.render([row])


def test_uncountable_and_unchanged_commits_are_not_flagged() -> None:
    inlined = CommitCoverage(
        2, "1/2", [{"name": "helper"}], jobs={"j": [_fc("helper", None, None, "static inline")]}
    )
    comment = CommitCoverage(3, "2/2", [])
    assert not inlined.flag and not comment.flag
    text = coverage.render([inlined, comment])
    assert "helper (static inline): not traceable in this kernel (inlined or notrace)" in text
    assert "2/2: no function changed" in text
    assert coverage.render([]) == ""


def test_a_folded_in_function_is_counted_at_its_callers() -> None:
    folded = FunctionCalls(
        "__do_huge_pmd_anonymous_page", "static", "modified", None, None, True,
        via=[("do_huge_pmd_anonymous_page", 1024, 1000)],
    )  # fmt: skip
    row = CommitCoverage(2, "3/3", [{"name": "__do_huge_pmd_anonymous_page"}], jobs={"j": [folded]})
    assert not row.flag
    assert (
        "__do_huge_pmd_anonymous_page (static): inlined into its callers; "
        "do_huge_pmd_anonymous_page 1,024 calls (base 1,000)"
    ) in coverage.render([row])
    idle = FunctionCalls("f", "static", "modified", None, None, True, via=[("g", 0, 0)])
    row = CommitCoverage(3, "4/4", [{"name": "f"}], jobs={"j": [idle]})
    assert row.flag == NOT_RUN
    assert "f (static): inlined into its callers; g 0 calls: this benchmark did not run" in (
        coverage.render([row])
    )


def test_a_count_whose_trace_buffer_overran_is_a_lower_bound() -> None:
    overran = FunctionCalls("compact_zone", "", "modified", 12345, 12001, True, lost=17)
    silent = FunctionCalls("sysctl_compaction_handler", "", "modified", 0, 0, True, lost=17)
    row = CommitCoverage(2, "1/2", [{"name": "compact_zone"}], jobs={"j": [overran, silent]})
    text = coverage.render([row])
    assert (
        "compact_zone at least 12,345 calls (base 12,001) [17 trace events lost: a lower bound]"
        in text
    )
    # 0 counted while events were dropped: its calls may be among them, so no "did not run"
    assert "sysctl_compaction_handler at least 0 calls" in text
    assert "did not run" not in text
    alone = CommitCoverage(3, "2/2", [{"name": "f"}], jobs={"j": [silent]})
    assert not alone.flag
    base_only = FunctionCalls("f", "", "modified", 5, 9, True, base_lost=3)
    assert "f 5 calls (base at least 9) [3 trace events lost on the base: a lower bound]" in (
        coverage.function_text(base_only)
    )
    assert overran.as_dict()["lower_bound"] is True and overran.as_dict()["lost_events"] == 17
