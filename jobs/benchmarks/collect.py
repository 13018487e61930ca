"""Guest results -> RunData: one per (sub-job, run), parsed with the suites' own rules.

The guest leaves ``<results>/<sub-job name>/<run>/`` per run (see jobs/benchmarks/guest/init.sh):
``output`` and ``stderr`` of the suite runner, files the suite writes (``threads-N.log``,
``passN.log``), ``<proc file>.before|after`` snapshots and ``status`` (rc, epochs, uptimes).

Samples use the names the importers use, so LKP and mmtests tables render our runs the same
way as imported ones: ``vm-scalability.*`` (LKP's parse), ``thpscale.<name>`` and
``stress-highalloc.passN`` (mmtests' extraction), ``mmtests-vmstat.<counter>`` (the /proc/vmstat
delta over the run) and ``duration.elapsed``. A run whose output is missing or garbled comes
back with a non-``done`` status and a one-line error instead of stopping the collection.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from stackbench.errors import InputError
from stackbench.jobs.benchmarks import funcprof, knobs, perfprof
from stackbench.jobs.benchmarks.definitions import HIGHALLOC_PASSES, SubJob
from stackbench.jobs.benchmarks.guest.initramfs import GuestPlan, as_plan
from stackbench.jobs.benchmarks.parsers import (
    buddyinfo,
    highalloc,
    mmtests_logs,
    thpscale,
    vm_scalability,
)
from stackbench.resultsdb.rundata import KernelSpec, MachineSpec, RunData

SNAPSHOTS = (
    "vmstat",
    "buddyinfo",
    "pagetypeinfo",
    "meminfo",
    "zoneinfo",
    "extfrag_index",
    "unusable_index",
    "kcompactd",
    "clock",
)
# USER_HZ: the clock ticks of /proc/<pid>/stat's utime and stime
CLOCK_TICKS = 100
# where a snapshot came from in the guest (the rest are /proc/<name>): its sysstate key
SNAPSHOT_KEYS = {
    "extfrag_index": "/sys/kernel/debug/extfrag/extfrag_index",
    "unusable_index": "/sys/kernel/debug/extfrag/unusable_index",
    "kcompactd": "kcompactd",
    "clock": "clock",
}
# clocksources that advance once per timer tick (4 ms at the guest's HZ=250)
JIFFIES_CLOCKS = ("jiffies", "refined-jiffies")
# a clock read in steps this coarse cannot time a single allocation or fault
COARSE_STEP_NS = 1_000_000
# the watchdog's console lines that mean the clocksource changed
CLOCK_CHANGE_WORDS = ("Switched to clocksource", "as unstable")
# clocksources that read the same counter: the kernel boots on "tsc-early" and switches to
# "tsc" once the TSC's calibration is refined (later under a loaded TCG host, so a run that
# starts early sees the switch); the counter and its resolution stay the same
SAME_COUNTER = {"tsc-early": "tsc"}


def clock_counter(source: str) -> str:
    """The counter a clocksource reads: what runs are kept apart by."""
    return SAME_COUNTER.get(source, source)


# the snapshot suffixes: before the scenario stage, before and after the benchmark
STAGES = {"scenario-before": "scenario_start", "before": "start", "after": "end"}
# the status file's rc when `timeout -s KILL` stopped the run (128 + SIGKILL)
KILLED_RC = 137
MAX_LOG_BYTES = 8 << 20


class RunFailed(Exception):
    """This run has no usable result; ``status`` says how it ended."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def find_root(results_dir: Path) -> Path:
    """The directory holding the sub-job folders (a lone ``results/`` wrapper is skipped)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(root, "results directory does not exist")
    inner = root / "results"
    if inner.is_dir() and not (root / "plan").exists():
        return inner
    return root


def parse_status(path: Path) -> dict[str, float]:
    """``status``: ``<key> <number>`` lines written by the guest after the run."""
    try:
        text = path.read_text()
    except OSError:
        raise RunFailed("failed", "no status file: the guest did not finish this run") from None
    out: dict[str, float] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        try:
            if len(words) != 2:
                raise ValueError
            out[words[0]] = float(words[1])
        except ValueError:
            raise RunFailed("failed", f"status: malformed line {line.strip()!r}") from None
    for key in ("rc", "start_uptime", "end_uptime"):
        if key not in out:
            raise RunFailed("failed", f"status: no {key} (run cut short)")
    return out


def read_logs(run_dir: Path) -> dict[str, bytes]:
    """The run's raw outputs (everything but the /proc snapshots, which go to sysstate)."""
    logs: dict[str, bytes] = {}
    for p in sorted(run_dir.rglob("*")):
        if not p.is_file() or p.name.split(".", 1)[0] in SNAPSHOTS and "." in p.name:
            continue
        if p.name == "perf.data":
            # binary samples, read by perfprof.read_run into meta
            continue
        data = p.read_bytes()
        if len(data) > MAX_LOG_BYTES:
            data = data[:MAX_LOG_BYTES] + b"\n[stackbench: truncated]\n"
        logs[p.relative_to(run_dir).as_posix()] = data
    return logs


def _text(run_dir: Path, name: str) -> str:
    path = run_dir / name
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        raise RunFailed("failed", f"{name}: missing") from None


def snapshots(run_dir: Path) -> dict[str, dict[str, str]]:
    """Per stage (``scenario_start``, ``start``, ``end``): ``/proc/<file>`` -> its text
    (debugfs files under their /sys/kernel/debug/extfrag path)."""
    out: dict[str, dict[str, str]] = {key: {} for key in STAGES.values()}
    for name in SNAPSHOTS:
        where = SNAPSHOT_KEYS.get(name, f"/proc/{name}")
        for suffix, key in STAGES.items():
            p = run_dir / f"{name}.{suffix}"
            if p.is_file():
                out[key][where] = p.read_text(errors="replace")
    return out


@dataclass
class ClockSnapshot:
    """One ``clock.<stage>`` file (jobs/benchmarks/guest/init.sh)."""

    source: str = ""
    res_ns: int | None = None  # clock_getres(CLOCK_MONOTONIC)
    step_ns: int = 0  # the smallest step clock_gettime() was seen to take
    log: list[str] = field(default_factory=list)  # the kernel's clocksource lines so far


def parse_clock(text: str) -> ClockSnapshot:
    snap = ClockSnapshot()
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "log":
            snap.log.append(value.strip())
        elif key == "source":
            snap.source = value.strip()
        elif key in ("res_ns", "step_ns") and value.strip().isdigit():
            setattr(snap, key, int(value))
    return snap


def clock_state(stages: dict[str, dict[str, str]]) -> dict[str, object] | None:
    """The run's clock: ``source`` (at its start) and ``source_end``, ``resolution_ns``,
    ``step_ns``, ``changes`` (the clocksource lines the kernel logged during the run) and
    ``coarse``: why its latencies cannot be trusted, "" when they can. None for a run
    without clock snapshots (results of a guest older than the clock records)."""
    first = stages["scenario_start"].get("clock") or stages["start"].get("clock")
    last = stages["end"].get("clock")
    if first is None or last is None:
        return None
    a, b = parse_clock(first), parse_clock(last)
    seen = set(a.log)
    changes = [line for line in b.log if line not in seen]
    step = max(a.step_ns, b.step_ns)
    start, end = clock_counter(a.source), clock_counter(b.source)
    # a switch to the counter the run started on (tsc-early to tsc) changes nothing
    moved = [
        line
        for line in changes
        if any(w in line for w in CLOCK_CHANGE_WORDS)
        and not line.rstrip().endswith(f"Switched to clocksource {start}")
    ]
    coarse = ""
    if a.source in JIFFIES_CLOCKS or b.source in JIFFIES_CLOCKS:
        coarse = f"jiffies clocksource ({b.source if b.source in JIFFIES_CLOCKS else a.source})"
    elif start != end:
        coarse = f"clocksource that changed during the run ({a.source} to {b.source})"
    elif moved:
        coarse = "clocksource that changed during the run"
    elif step >= COARSE_STEP_NS:
        coarse = f"clock that advances in {step / 1e6:g} ms steps"
    return {
        "source": start,
        "source_end": end,
        "resolution_ns": b.res_ns,
        "step_ns": step,
        "changes": changes,
        "coarse": coarse,
    }


def kcompactd_seconds(text: str) -> float:
    """kcompactd threads' CPU seconds from the guest's ``(kcompactdN) utime stime`` lines."""
    ticks = 0
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[1].isdigit() and words[2].isdigit():
            ticks += int(words[1]) + int(words[2])
    return ticks / CLOCK_TICKS


def fragmentation(stages: dict[str, dict[str, str]]) -> dict[str, dict[str, object]]:
    """Per stage with a buddyinfo snapshot: per zone, the score and the indexes."""
    out: dict[str, dict[str, object]] = {}
    for key, snap in stages.items():
        text = snap.get("/proc/buddyinfo")
        if text:
            out[key] = buddyinfo.summary(text, f"buddyinfo ({key})")
    return out


def check_setup(run_dir: Path, sj: SubJob) -> dict[str, str]:
    """The knobs the guest read back; RunFailed when the kernel lacked or refused one, or
    the scenario stage could not be set up."""
    for name in ("knob-error", "scenario-error"):
        p = run_dir / name
        if p.is_file():
            raise RunFailed("failed", p.read_text(errors="replace").strip() or name)
    p = run_dir / "knobs"
    if not p.is_file():
        if sj.setup.knobs:
            raise RunFailed("failed", "knobs: the guest did not read the knobs back")
        return {}
    got = knobs.parse_readback(p.read_text(errors="replace"))
    bad = knobs.mismatches(sj.setup.knobs, got)
    if bad:
        raise RunFailed("failed", "; ".join(bad))
    return got


# ---- per-suite samples ----------------------------------------------------------------------


def samples_vm_scalability(run_dir: Path, sj: SubJob) -> dict[str, list[float]]:
    stats = vm_scalability.parse(_text(run_dir, "output"))
    keys = {k for k, _ in stats}
    if "throughput" not in keys:
        raise RunFailed("failed", "output: no usemem or dd result lines (vm-scalability)")
    return vm_scalability.to_samples(stats)


def samples_thpscale(run_dir: Path, sj: SubJob) -> dict[str, list[float]]:
    """thpscale's threads-N.log files; thpchallenge and thpcompact write the same ones and
    their metrics are named the same under their own suite."""
    prefix = f"{sj.suite}."
    out: dict[str, list[float]] = {}
    for n in (int(t) for t in str(sj.resolved["THREADS"]).split()):
        name = f"threads-{n}.log"
        text = _text(run_dir, name)
        raw = thpscale.parse_log(text, n, name)
        if f"fault-both-{n}" not in raw:
            raise RunFailed("failed", f"{name}: no fault lines ({sj.suite} cut short?)")
        out.update({prefix + k: v for k, v in raw.items()})
    return out


def samples_highalloc(run_dir: Path, sj: SubJob) -> dict[str, list[float]]:
    passes = int(sj.resolved.get("PASSES", HIGHALLOC_PASSES))
    text = "".join(_text(run_dir, f"pass{i}.log") for i in range(1, passes + 1))
    raw = highalloc.parse(text, f"pass1..{passes}.log")
    got = sum(1 for k in raw if k.startswith("pass"))
    if got != passes:
        raise RunFailed("failed", f"pass logs: {got} passes, expected {passes}")
    return {highalloc.PREFIX + k: v for k, v in raw.items()}


SAMPLERS = {
    "vm-scalability": samples_vm_scalability,
    "thpscale": samples_thpscale,
    "thpchallenge": samples_thpscale,
    "thpcompact": samples_thpscale,
    "stress-highalloc": samples_highalloc,
}


# ---- runs -----------------------------------------------------------------------------------


def _when(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch else None


def collect_run(
    root: Path,
    sj: SubJob,
    iteration: int,
    *,
    kernel: KernelSpec,
    machine: MachineSpec,
    source: str = "qemu",
    boot_id: str | None = None,
    coverage: list[str] | None = None,
    profile: Path | None = None,
) -> RunData:
    run_dir = root / sj.name / str(iteration)
    data = RunData(
        job=sj.job_spec(),
        kernel=kernel,
        machine=machine,
        iteration=iteration,
        samples={},
        source=source,
        meta={"subjob": sj.name, "resolved": dict(sj.resolved), **sj.provenance()},
    )
    if boot_id:
        data.meta["boot_id"] = boot_id
        key = hashlib.sha256(f"{data.key()}\0{boot_id}".encode()).hexdigest()
        data.idempotency_key = key
    if not run_dir.is_dir():
        return replace(data, status="lost", error=f"no results for {sj.name} run {iteration}")
    data.logs = read_logs(run_dir)
    stages = snapshots(run_dir)
    start, end = stages["start"], stages["end"]
    data.sysstate = {"test": sj.name, "start": start, "end": end}
    if stages["scenario_start"]:
        data.sysstate["scenario_start"] = stages["scenario_start"]
    clock = clock_state(stages)
    if clock is not None:
        data.sysstate["clock"] = clock
    try:
        status = parse_status(run_dir / "status")
        got = check_setup(run_dir, sj)
        if got:
            data.meta["knobs"] = got
            data.sysstate["knobs"] = got
        cmdline = run_dir / "cmdline"
        if sj.setup.cmdline and cmdline.is_file():
            data.meta["cmdline"] = cmdline.read_text(errors="replace").strip()
        data.started_at = _when(status.get("start_epoch"))
        data.finished_at = _when(status.get("end_epoch"))
        data.duration_s = round(status["end_uptime"] - status["start_uptime"], 3)
        rc = int(status["rc"])
        if rc == KILLED_RC and data.duration_s >= sj.timeout_s * 0.95:
            raise RunFailed("timeout", f"{sj.suite} killed after the {sj.timeout_s}s timeout")
        if rc == KILLED_RC:
            raise RunFailed(
                "failed",
                f"{sj.suite} killed by SIGKILL after {data.duration_s:g}s, before its "
                f"{sj.timeout_s}s timeout (out of memory? see the dmesg log)",
            )
        if rc != 0:
            tail = data.logs.get("stderr", b"").decode(errors="replace").strip()
            tail = tail.splitlines()[-1] if tail else "no stderr"
            raise RunFailed("failed", f"{sj.suite} exited with {rc}: {tail}")
        samples = SAMPLERS[sj.suite](run_dir, sj)
        if "/proc/vmstat" not in start or "/proc/vmstat" not in end:
            raise RunFailed("failed", "no /proc/vmstat snapshot before and after the run")
        vm_start = mmtests_logs.parse_vmstat(start["/proc/vmstat"], "vmstat.before")
        vm_end = mmtests_logs.parse_vmstat(end["/proc/vmstat"], "vmstat.after")
        frag = fragmentation(stages)
        scen = stages["scenario_start"].get("/proc/vmstat")
        vm_scen = mmtests_logs.parse_vmstat(scen, "vmstat.scenario-before") if scen else None
    except (RunFailed, InputError) as exc:
        status, error = (
            (exc.status, exc.error) if isinstance(exc, RunFailed) else ("failed", str(exc))
        )
        dmesg = root / "dmesg"
        if dmesg.is_file():
            # the kernel's side of a failure (OOM kills, warnings) for the post-mortem
            data.logs["dmesg"] = dmesg.read_bytes()[-MAX_LOG_BYTES:]
        return replace(data, status=status, error=error)
    data.sysstate["vmstat_start"] = vm_start
    data.sysstate["vmstat_end"] = vm_end
    for key, value in mmtests_logs.vmstat_delta(vm_start, vm_end).items():
        samples[f"mmtests-vmstat.{key}"] = [float(value)]
    if vm_scen is not None:
        # what the scenario stage and the settling time did (kcompactd's proactive work)
        data.sysstate["vmstat_scenario_start"] = vm_scen
        for key, value in mmtests_logs.vmstat_delta(vm_scen, vm_start).items():
            samples[f"scenario-vmstat.{key}"] = [float(value)]
    kc = {k: snap["kcompactd"] for k, snap in stages.items() if snap.get("kcompactd")}
    if "start" in kc and "end" in kc:
        used = kcompactd_seconds(kc["end"]) - kcompactd_seconds(kc["start"])
        samples["kcompactd.cpu_s"] = [round(used, 2)]
    if "scenario_start" in kc and "start" in kc:
        used = kcompactd_seconds(kc["start"]) - kcompactd_seconds(kc["scenario_start"])
        samples["scenario-kcompactd.cpu_s"] = [round(used, 2)]
    if frag:
        data.sysstate["fragmentation"] = frag
        for stage, zones in frag.items():
            for zone, info in zones.items():
                samples[f"fragmentation.{stage}.{zone.replace('/', '-')}"] = [float(info["score"])]
    cov = funcprof.read_run(run_dir, coverage or [])
    if cov is not None:
        data.meta["coverage"] = cov
    prof = perfprof.read_run(run_dir, profile)
    if prof is not None:
        data.meta["profile"] = prof
    samples["duration.elapsed"] = [data.duration_s]
    data.samples = samples
    data.status = "done"
    return data


def collect(
    results_dir: Path,
    plan: list[SubJob] | GuestPlan,
    *,
    kernel: KernelSpec,
    machine: MachineSpec,
    source: str = "qemu",
    boot_id: str | None = None,
    coverage: list[str] | None = None,
    profile: Path | None = None,
) -> list[RunData]:
    """One RunData per (sub-job, run) of ``plan``; runs the guest never reached are "lost".
    ``coverage``: the functions an evidence boot profiled (their calls go to meta).
    ``profile``: the kernel's System.map when the evidence boot ran perf (the symbolized
    profile goes to meta).

    ``boot_id`` (e.g. the pipeline's build request) makes repeated boots of the same kernel
    and plan distinct runs instead of duplicates of the first.
    """
    root = find_root(Path(results_dir))
    out = []
    for sj in as_plan(plan).subjobs:
        for i in range(sj.runs):
            out.append(
                collect_run(
                    root,
                    sj,
                    i,
                    kernel=kernel,
                    machine=machine,
                    source=source,
                    boot_id=boot_id,
                    coverage=coverage,
                    profile=profile,
                )  # fmt: skip
            )
    return out
