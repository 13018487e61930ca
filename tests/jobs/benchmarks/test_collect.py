"""collect(): a guest results directory -> RunData, including every way a run can go wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec

KERNEL = KernelSpec(commit="a" * 40, name="v6.1-test", config_name="tiny-guest", compiler="gcc-12")
MACHINE = MachineSpec(name="qemu-tcg-2c-1g", kind="qemu", cpus=2, memory_mb=1024)

VMSTAT_BEFORE = "nr_free_pages 200000\ncompact_stall 3\nthp_fault_alloc 10\npgmigrate_success 0\n"
VMSTAT_AFTER = "nr_free_pages 150000\ncompact_stall 7\nthp_fault_alloc 42\npgmigrate_success 128\n"
VMS_OUTPUT = """\
2026-11-21 10:00:00  ./case-anon-w-seq-mt
4194304 bytes / 1000 usecs = 4096000 KB/s
4194304 bytes / 2000 usecs = 2048000 KB/s
"""


STATUS_KILLED_AT = "rc 137\nstart_uptime 10\nend_uptime %s\n"


def thp_log(threads: int) -> str:
    lines = ["Running with 1 thread", ""]
    lines += [f"anoninit {t} 100" for t in range(threads)]
    lines += [f"fileinit {t} 50" for t in range(threads)]
    for t in range(threads):
        lines.append(f"fault {t} huge 300 1795306863.785142 -1")
        lines.append(f"fault {t} base 900 1795306863.885142 -1")
        lines.append(f"fault {t} huge 310 1795306863.985142 -1")
    return "\n".join(lines) + "\n"


def pass_log(ok: int, attempts: int) -> str:
    lines = [
        f"{i} {'success' if i <= ok else 'failure'} {1000 * i}" for i in range(1, attempts + 1)
    ]
    return "\n".join(lines) + f"\n% Success: {ok * 100 // attempts}\n"


def write_run(root: Path, sj: d.SubJob, run: int, files: dict[str, str], rc: int = 0) -> Path:
    rd = root / sj.name / str(run)
    rd.mkdir(parents=True)
    base = {
        "vmstat.before": VMSTAT_BEFORE,
        "vmstat.after": VMSTAT_AFTER,
        "buddyinfo.before": "Node 0, zone   Normal   10 5 2 1 0 0 0 0 0 0 50\n",
        "buddyinfo.after": "Node 0, zone   Normal   90 40 20 9 3 1 0 0 0 0 12\n",
        "meminfo.before": "MemTotal:        1004000 kB\n",
        "meminfo.after": "MemTotal:        1004000 kB\n",
        "stderr": "",
        "status": f"rc {rc}\nstart_epoch 1795306800\nend_epoch 1795306812\n"
        "start_uptime 10.50\nend_uptime 22.75\n",
    }
    for name, text in {**base, **files}.items():
        if text is not None:
            (rd / name).write_text(text)
    return rd


@pytest.fixture
def plan() -> list[d.SubJob]:
    vms = d.parse(
        {"suite": "vm-scalability", "runs": 2, "params": {"test": "anon-w-seq-mt"}}, path="v.yaml"
    )
    thp = d.parse({"suite": "thpscale", "runs": 1, "params": {"max_threads": 3}}, path="t.yaml")
    ha = d.parse({"suite": "stress-highalloc", "runs": 1, "params": {}}, path="h.yaml")
    out = []
    for job in (vms, thp, ha):
        out += d.expand(job, guest_mem_mb=1024, guest_cpus=2)
    return out


def good_results(root: Path, plan: list[d.SubJob]) -> None:
    vms, thp, ha = plan[0], plan[1], plan[2]
    for run in range(2):
        write_run(root, vms, run, {"output": VMS_OUTPUT})
    assert thp.resolved["THREADS"] == "1 3"
    write_run(
        root,
        thp,
        0,
        {"output": "thpscale: 1 threads\n", **{f"threads-{n}.log": thp_log(n) for n in (1, 3)}},
    )
    write_run(
        root,
        ha,
        0,
        {
            "output": "highalloc: pass 1\n",
            "pass1.log": pass_log(3, 4),
            "pass2.log": pass_log(2, 4),
            "pass3.log": pass_log(4, 4),
        },
    )


def by_suite(runs):
    return {(r.job.suite, r.iteration): r for r in runs}


def test_collect_turns_every_run_into_rundata(tmp_path, plan):
    good_results(tmp_path, plan)
    runs = c.collect(tmp_path, plan, kernel=KERNEL, machine=MACHINE)
    assert len(runs) == 4
    assert all(r.status == "done" and r.error == "" for r in runs), [r.error for r in runs]
    got = by_suite(runs)

    vms = got[("vm-scalability", 0)]
    assert vms.samples["vm-scalability.throughput"] == [6144000.0]
    assert vms.samples["vm-scalability.workload"] == [8192.0]
    assert vms.job.suite_version == d.suite_version("vm-scalability")
    assert vms.job.runner == "stackbench-guest" and vms.job.test == "anon-w-seq-mt"
    assert vms.job.params["test"] == "anon-w-seq-mt"
    assert vms.kernel is KERNEL and vms.machine is MACHINE and vms.source == "qemu"
    assert vms.logs["output"] == VMS_OUTPUT.encode()
    assert "vmstat.before" not in vms.logs
    # vmstat deltas as mmtests-vmstat rows, elapsed time from the guest's uptime
    assert vms.samples["mmtests-vmstat.compact_stall"] == [4.0]
    assert vms.samples["mmtests-vmstat.thp_fault_alloc"] == [32.0]
    assert vms.samples["mmtests-vmstat.nr_free_pages"] == [-50000.0]
    assert vms.samples["duration.elapsed"] == [12.25]
    assert vms.duration_s == 12.25
    assert vms.started_at.timestamp() == 1795306800
    assert vms.sysstate["vmstat_start"]["compact_stall"] == 3
    assert vms.sysstate["end"]["/proc/buddyinfo"].startswith("Node 0")

    thp = got[("thpscale", 0)]
    assert thp.samples["thpscale.fault-huge-3"] == [300.0, 310.0] * 3
    assert thp.samples["thpscale.fault-both-1"] == [300.0, 900.0, 310.0]
    assert thp.samples["thpscale.Percentage huge-1"] == pytest.approx([200 / 3])
    assert set(thp.logs) >= {"threads-1.log", "threads-3.log", "output", "status"}

    ha = got[("stress-highalloc", 0)]
    assert ha.samples["stress-highalloc.pass1"] == [75.0]
    assert ha.samples["stress-highalloc.pass2"] == [50.0]
    assert ha.samples["stress-highalloc.pass3"] == [100.0]


def test_collected_runs_ingest_with_the_shared_metric_names(eng, tmp_path, plan):
    from sqlalchemy import text

    good_results(tmp_path, plan)
    runs = c.collect(tmp_path / ".", plan, kernel=KERNEL, machine=MACHINE, boot_id="boot-1")
    res = ingest(eng, runs)
    assert len(res.inserted) == 4
    with eng.connect() as conn:
        rows = dict(conn.execute(text("SELECT name, higher_is_better FROM metric")).all())
        suites = set(conn.execute(text("SELECT suite || ' ' || suite_version FROM job")).scalars())
    assert rows["vm-scalability.throughput"] is True
    assert rows["stress-highalloc.pass3"] is True
    assert rows["thpscale.fault-both-3"] is False
    assert "mmtests-vmstat.compact_stall" in rows and "duration.elapsed" in rows
    assert f"thpscale {d.suite_version('thpscale')}" in suites
    # the same boot again is a duplicate; another boot of the same plan is new runs
    assert ingest(eng, runs).skipped == 4
    again = c.collect(tmp_path, plan, kernel=KERNEL, machine=MACHINE, boot_id="boot-2")
    assert len(ingest(eng, again).inserted) == 4


def test_a_results_wrapper_directory_is_accepted(tmp_path, plan):
    good_results(tmp_path / "results", plan)
    runs = c.collect(tmp_path, plan, kernel=KERNEL, machine=MACHINE)
    assert [r.status for r in runs] == ["done"] * 4


def test_missing_results_dir_is_an_input_error(tmp_path, plan):
    from stackbench.errors import InputError

    with pytest.raises(InputError, match="results directory does not exist"):
        c.collect(tmp_path / "nothing", plan, kernel=KERNEL, machine=MACHINE)


def collect_one(tmp_path, plan, index, files, rc=0):
    sj = plan[index]
    (tmp_path / "dmesg").write_text("[    1.0] Out of memory: Killed process 83 (usemem)\n")
    write_run(tmp_path, sj, 0, files, rc=rc)
    return c.collect_run(tmp_path, sj, 0, kernel=KERNEL, machine=MACHINE)


def test_runs_the_guest_never_reached_are_lost(tmp_path, plan):
    good = plan[0]
    write_run(tmp_path, good, 0, {"output": VMS_OUTPUT})
    runs = c.collect(tmp_path, plan, kernel=KERNEL, machine=MACHINE)
    assert [r.status for r in runs] == ["done", "lost", "lost", "lost"]
    assert runs[1].error == f"no results for {good.name} run 1"
    assert runs[1].samples == {}


@pytest.mark.parametrize(
    ("index", "files", "rc", "status", "error"),
    [
        (
            0,
            {"output": "2026-11-21 10:00:00  ./case-anon-w-seq-mt\n"},
            0,
            "failed",
            "output: no usemem or dd result lines",
        ),
        (0, {"output": None}, 0, "failed", "output: missing"),
        (
            0,
            {"output": VMS_OUTPUT, "stderr": "usemem: mmap 1 bytes: nope\n"},
            1,
            "failed",
            "vm-scalability exited with 1: usemem: mmap 1 bytes: nope",
        ),
        (
            0,
            {"output": VMS_OUTPUT, "status": STATUS_KILLED_AT % 600.5},
            0,
            "timeout",
            "killed after the 600s timeout",
        ),
        (
            0,
            {"output": VMS_OUTPUT},
            137,
            "failed",
            "killed by SIGKILL after 12.25s, before its 600s timeout (out of memory?",
        ),
        (0, {"output": VMS_OUTPUT, "status": "rc 0\n"}, 0, "failed", "status: no start_uptime"),
        (0, {"output": VMS_OUTPUT, "status": None}, 0, "failed", "no status file"),
        (0, {"output": VMS_OUTPUT, "status": "rc zero\n"}, 0, "failed", "status: malformed line"),
        (0, {"output": VMS_OUTPUT, "vmstat.after": None}, 0, "failed", "no /proc/vmstat snapshot"),
        (
            0,
            {"output": VMS_OUTPUT, "vmstat.after": "compact_stall x\n"},
            0,
            "failed",
            "vmstat.after: /proc/vmstat snapshot: malformed line",
        ),
        (1, {"threads-1.log": thp_log(1)}, 0, "failed", "threads-3.log: missing"),
        (
            1,
            {"threads-1.log": "fault 0 huge\n", "threads-3.log": thp_log(3)},
            0,
            "failed",
            "threads-1.log: line 1",
        ),
        (
            1,
            {"threads-1.log": "anoninit 0 5\n", "threads-3.log": thp_log(3)},
            0,
            "failed",
            "threads-1.log: no fault lines",
        ),
        (
            2,
            {"pass1.log": pass_log(1, 2), "pass2.log": pass_log(1, 2), "pass3.log": ""},
            0,
            "failed",
            "pass logs: 2 passes, expected 3",
        ),
        (
            2,
            {"pass1.log": pass_log(1, 2), "pass2.log": "1 success 5\n", "pass3.log": ""},
            0,
            "failed",
            "attempts after the last '% Success:' line",
        ),
    ],
)
def test_bad_runs_are_marked_not_raised(tmp_path, plan, index, files, rc, status, error):
    run = collect_one(tmp_path, plan, index, files, rc=rc)
    assert run.status == status
    assert error in run.error
    assert "\n" not in run.error
    assert run.samples == {}
    assert run.job.suite == plan[index].suite
    # what the guest did leave is kept for the post-mortem, with the kernel's log
    if files.get("status", "") is not None:
        assert "status" in run.logs
    assert run.logs["dmesg"] == b"[    1.0] Out of memory: Killed process 83 (usemem)\n"
