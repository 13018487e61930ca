"""The guest's clock in a run's system state: what the guest records (jobs/benchmarks/guest/init.sh's
clock.<stage> files), how collect reads it, and what a coarse clock does to a comparison
(latencies marked, verdict undecided (coarse clock)) and runs on different clocksources
(never compared). The real boots are in test_guest_boot.py."""

from __future__ import annotations

import contextlib
import io

from stackbench import cli
from stackbench.jobs.benchmarks import collect as c
from stackbench.resultsdb import ingest as ig

pytest_plugins = ["helpers.web"]

JOB = ig.JobSpec("thpscale", "thpscale", {"max_threads": 2, "mapsize_fraction": 0.1})
BASE, PATCH = "d" * 40, "e" * 40
LATENCY = "thpscale.fault-both-1"
HUGE = "thpscale.Percentage huge-1"

TSC = """source tsc
res_ns 1
step_ns 38
log [    0.000000] tsc: Detected 2394.454 MHz processor
log [    0.841231] clocksource: Switched to clocksource tsc
"""
JIFFIES = """source refined-jiffies
res_ns 4000000
step_ns 4000250
log [    0.492000] clocksource: Switched to clocksource refined-jiffies
"""
WATCHDOG = TSC + (
    "log [   11.070123] clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' "
    "as unstable because the skew is too large:\n"
    "log [   11.072001] clocksource: Switched to clocksource hpet\n"
)


def _stages(start: str | None, end: str | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {"scenario_start": {}, "start": {}, "end": {}}
    if start is not None:
        out["start"]["clock"] = start
    if end is not None:
        out["end"]["clock"] = end
    return out


def test_a_fine_clock_is_recorded_and_not_coarse():
    got = c.clock_state(_stages(TSC, TSC))
    assert got == {
        "source": "tsc",
        "source_end": "tsc",
        "resolution_ns": 1,
        "step_ns": 38,
        "changes": [],
        "coarse": "",
    }


def test_the_tsc_refined_after_the_run_began_is_the_same_clock():
    # under a loaded TCG host the kernel may switch from tsc-early to tsc (the same counter,
    # its calibration refined) after the first run started: not a change of clock
    early = TSC.replace("source tsc\n", "source tsc-early\n", 1).replace(
        "log [    0.841231] clocksource: Switched to clocksource tsc\n", ""
    )
    late = TSC + "log [   19.000001] clocksource: Switched to clocksource tsc\n"
    got = c.clock_state(_stages(early, late))
    assert got is not None
    assert got["coarse"] == "" and got["source"] == got["source_end"] == "tsc"
    # the TSC marked unstable after the switch is a change all the same
    unstable = late + "log [   20.1] clocksource: Marking clocksource 'tsc' as unstable\n"
    assert c.clock_state(_stages(early, unstable))["coarse"]


def test_a_jiffies_clock_is_coarse():
    got = c.clock_state(_stages(JIFFIES, JIFFIES))
    assert got is not None
    assert got["coarse"] == "jiffies clocksource (refined-jiffies)"
    assert got["resolution_ns"] == 4000000 and got["step_ns"] == 4000250


def test_a_switch_during_the_run_is_coarse_with_the_watchdog_lines():
    end = WATCHDOG.replace("source tsc\n", "source hpet\n", 1)
    got = c.clock_state(_stages(TSC, end))
    assert got is not None
    assert got["coarse"] == "clocksource that changed during the run (tsc to hpet)"
    assert len(got["changes"]) == 2 and "Marking clocksource 'tsc'" in got["changes"][0]
    # switched away and back between the snapshots: only the kernel's lines show it
    got = c.clock_state(_stages(TSC, WATCHDOG))
    assert got is not None and got["coarse"] == "clocksource that changed during the run"


def test_a_clock_read_in_large_steps_is_coarse_whatever_its_name():
    got = c.clock_state(_stages(TSC, TSC.replace("step_ns 38", "step_ns 4000000")))
    assert got is not None and got["coarse"] == "clock that advances in 4 ms steps"


def test_results_without_clock_records_have_none():
    assert c.clock_state(_stages(None, None)) is None
    assert c.clock_state(_stages(TSC, None)) is None


def _clock(text: str) -> dict:
    state = c.clock_state(_stages(text, text))
    assert state is not None
    return state


def _runs(base_clock: str, patch_clock: str) -> list[ig.RunData]:
    """Ten runs per kernel; the patch doubles the fault latency and keeps the huge pages."""
    out = []
    for commit, clock, factor in ((BASE, base_clock, 1.0), (PATCH, patch_clock, 2.0)):
        for it in range(10):
            run = ig.RunData(
                JOB,
                ig.KernelSpec(commit),
                ig.MachineSpec("qemu-vm"),
                it,
                {
                    LATENCY: [factor * (100.0 + 7 * it + k) for k in range(5)],
                    HUGE: [90.0 + (it % 3)],
                },
            )
            run.sysstate = {"clock": _clock(clock)}
            out.append(run)
    return out


def _compare(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["compare", *argv])
    return rc, out.getvalue(), err.getvalue()


def _verdict_cell(table: str, metric: str) -> str:
    (row,) = [ln for ln in table.splitlines() if ln.lstrip().startswith(metric + " ")]
    return row


def test_a_fine_clock_lets_the_verdict_call_the_latency_change(eng):
    ig.ingest(eng, _runs(TSC, TSC))
    rc, out, err = _compare("--style", "stackbench", "--all", BASE, PATCH)
    assert rc == 0, err
    assert " worse " in _verdict_cell(out, LATENCY)
    assert "coarse clock" not in out


def test_latencies_timed_with_a_coarse_clock_are_marked_and_undecided(eng, capsys):
    ig.ingest(eng, _runs(JIFFIES, JIFFIES))
    rc, out, err = _compare("--style", "stackbench", "--all", BASE, PATCH)
    assert rc == 0, err
    row = _verdict_cell(out, LATENCY)
    assert "undecided (coarse clock)" in row and " worse " not in row
    # the other metrics of the same runs are judged as ever
    assert "coarse clock" not in _verdict_cell(out, HUGE)
    assert out.startswith(
        "# coarse clock: thpscale thpscale: latencies timed with a jiffies clocksource "
        "(refined-jiffies); not comparable, no verdict on them\n"
    )
    assert "undecided (coarse clock): latencies timed with a clock too coarse" in out
    # every table style says so, as the report's tables do
    rc, out, err = _compare("--style", "mmtests", BASE, PATCH)
    assert rc == 0 and out.startswith("# coarse clock: thpscale thpscale:"), err


def test_the_comparison_page_marks_coarse_latencies(eng, client):
    from test_compare_machines import _page, _sign_in

    ig.ingest(eng, _runs(JIFFIES, JIFFIES))
    _sign_in(eng, client)
    _url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}", "all": "1"})
    assert "Warning: coarse clock: thpscale thpscale: latencies timed with a jiffies" in page
    (row,) = [ln for ln in page.split("<tr") if f">{LATENCY}" in ln]
    assert "(coarse clock)</span>" in row and "undecided (coarse clock)" in row
    assert "worse" not in row


def test_runs_on_different_clocksources_are_never_compared(eng, client):
    from test_compare_machines import _page, _sign_in

    ig.ingest(eng, _runs(TSC, JIFFIES))
    for pool in ((), ("--pool-machines",)):
        rc, out, err = _compare("--style", "stackbench", *pool, BASE, PATCH)
        assert rc == 1 and out == ""
        assert "runs of thpscale thpscale were timed with different clocksources " in err
        assert "(refined-jiffies, tsc)" in err and "never compared" in err
    _sign_in(eng, client)
    _url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}", "pool": "1"})
    assert "were timed with different clocksources (refined-jiffies, tsc)" in page
    assert 'id="table-lkp"' not in page
