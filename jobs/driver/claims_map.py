"""Claims turned into jobs of ours: which job definition measures each claim, under which
stored metric, and which of the series' kernels its columns are.

A job is named as a plan names it (``vm-scalability[test=anon-w-seq-mt]``, see
jobs/executors/jobspecs.py) and checked against the definitions for the guest it will run
on, so a suite whose definition does not exist yet (thpchallenge, thpcompact) maps as soon
as it does. Parameters the header gives are kept where they fit the guest and scaled the
way the seeds' definitions scale them; ``scaling`` says what changed. ``statistic`` says how
the claim reduces the metric's samples: ``mean`` (LKP's mean of the runs), mmtests' row
statistic (``Amean``, ``Stddev``...), a percentile (``p50``: nearest rank over the pooled
samples), or seed 003's ``Success`` / ``Success(N)`` from the attempts.

Kernel columns are matched to the series by name, by sha prefix, by the words a table uses
for the two ends (``baseline``/``vanilla``, ``patches``/``this patch``), and, when no column
of the table matches any of those, by order when the table has one column per kernel. A
claim whose columns are not both found is listed with why, never guessed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stackbench.errors import StackbenchError
from stackbench.patches.claims import Claim

_BASE_WORDS = ("base", "baseline", "vanilla", "before", "unpatched", "orig", "original")
_HEAD_WORDS = ("patches", "patched", "after", "series", "this patch", "with patches")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_THREADS = re.compile(r"^(?:fault-(?:base|huge|both)|(?:Percentage )?huge)-(\d+)$")
_MMTESTS_SUITES = ("thpscale", "thpchallenge", "thpcompact")
_SEED003 = re.compile(r"^(hogger|build)-frag-(movable|unmovable)$")
# seed 003 held 200 MB of its 512 MB VM with the hogger; the definition holds 400 MB of the
# ~1 GiB guest: the same share of memory
_SEED003_HOGGER_SCALE = 2
_LKP_SCALED = ("runtime", "size", "nr_task")
_LKP_KEPT = ("thp_enabled", "thp_defrag")
# what our vm-scalability runs store, as LKP's parse names it (time.* is LKP's time monitor)
# what every run of ours stores beside its suite's metrics, as our LKP tables print it
_MONITORED = (
    "mmtests-vmstat.* (proc-vmstat.*)", "duration.elapsed (time.elapsed_time)", "kcompactd.cpu_s",
)  # fmt: skip
_VMS_STATS = (
    "throughput", "median", "workload", "free_time", "throughput_fault", "median_fault",
    "migrate_mbps",
)  # fmt: skip


@dataclass(frozen=True)
class MappedClaim:
    claim: Claim
    job: str | None  # our job as a plan names it
    metric: str | None  # our stored metric name for it
    kernel_index: int | None  # index into the series' kernels, 0 = base
    base_index: int | None
    reason: str | None  # why not mapped (the job, the kernels, or both)
    statistic: str | None = None  # how the claim reduces the metric's samples
    scaling: str | None = None  # what the guest runs instead of the header's parameters

    @property
    def mapped(self) -> bool:
        return self.reason is None

    def as_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim.as_json(),
            "job": self.job,
            "metric": self.metric,
            "statistic": self.statistic,
            "kernel_index": self.kernel_index,
            "base_index": self.base_index,
            "scaling": self.scaling,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class _Job:
    job: str | None
    metric: str | None
    statistic: str | None = None
    scaling: str | None = None
    reason: str | None = None


def map_claims(
    claims: list[Claim], kernels: list[tuple[str, str]], *, cpus: int = 2, mem_mb: int = 1024
) -> list[MappedClaim]:
    """Each claim with our job, metric and the series' kernel indexes, or why not.
    ``kernels``: (sha, subject or name) of the series' kernels, base first; ``cpus`` and
    ``mem_mb``: the guest the jobs will run on."""
    tables: dict[tuple[str, ...], list[int | None]] = {}
    out = []
    for c in claims:
        j = _job(c, cpus, mem_mb)
        k, b, why = _kernels(c, kernels, tables)
        reasons = [r for r in (j.reason, why) if r]
        out.append(
            MappedClaim(
                claim=c,
                job=j.job,
                metric=j.metric,
                kernel_index=k,
                base_index=b,
                reason="; ".join(reasons) or None,
                statistic=j.statistic,
                scaling=j.scaling,
            )
        )
    return out


# ---- kernels ------------------------------------------------------------------------------


def _one(name: str, kernels: list[tuple[str, str]]) -> int | None:
    """The index of the series' kernel a column names, by name, sha prefix or end word."""
    low = name.strip().lower()
    if not low:
        return None
    for i, (sha, subject) in enumerate(kernels):
        if low in (sha.lower(), subject.strip().lower()):
            return i
    if _SHA.match(low):
        hits = [i for i, (sha, _) in enumerate(kernels) if sha.lower().startswith(low)]
        if len(hits) == 1:
            return hits[0]
    if low in _BASE_WORDS or low.split()[0] in ("vanilla", "baseline"):
        return 0
    if low in _HEAD_WORDS or "this patch" in low or "with patches" in low:
        return len(kernels) - 1 if len(kernels) > 1 else None
    return None


def _kernels(
    c: Claim, kernels: list[tuple[str, str]], tables: dict[tuple[str, ...], list[int | None]]
) -> tuple[int | None, int | None, str | None]:
    if not kernels:
        return None, None, "the series has no kernels"
    if c.columns and c.column is not None:
        where = tables.get(c.columns)
        if where is None:
            where = [_one(name, kernels) for name in c.columns]
            # a sha that names none of the series' commits is another commit, not a place
            in_order = all(
                w == i or (w is None and not _SHA.match(name.lower()))
                for i, (w, name) in enumerate(zip(where, c.columns, strict=True))
            )
            if in_order and len(c.columns) == len(kernels):
                # one column per kernel, and every column that names one is in its place
                where = list(range(len(kernels)))
            tables[c.columns] = where
        k = where[c.column]
        b = where[c.base_column] if c.base_column is not None else None
    else:
        k = _one(c.kernel, kernels)
        b = _one(c.base, kernels) if c.base else 0
    missing = [
        name for name, idx in ((c.kernel, k), (c.base if c.base else "base", b)) if idx is None
    ]
    if not missing:
        return k, b, None
    shown = " and ".join(m[:60] for m in missing)
    word = "columns" if len(missing) > 1 else "column"
    verb = "are" if len(missing) > 1 else "is"
    return k, b, f"kernel {word} {shown} {verb} not in this series"


# ---- jobs ---------------------------------------------------------------------------------


def _fits(spec: str, cpus: int, mem_mb: int) -> str | None:
    """Why the job spec does not run on the guest, or None when it does."""
    from stackbench.jobs.benchmarks import definitions
    from stackbench.jobs.executors import jobspecs

    try:
        definitions.expand(jobspecs.parse_job_spec(spec), guest_mem_mb=mem_mb, guest_cpus=cpus)
    except StackbenchError as exc:
        return str(exc)
    return None


def _defined(name: str) -> bool:
    from stackbench.jobs.benchmarks import definitions

    return name in definitions.names()


def _vms_tests() -> list[str]:
    from stackbench.jobs.benchmarks import definitions

    return list(definitions.schema()["params"]["vm-scalability"]["properties"]["test"]["enum"])


def _job(c: Claim, cpus: int, mem_mb: int) -> _Job:
    suite = c.job.get("suite", "")
    if c.style == "lkp":
        return _lkp_job(c, suite, cpus, mem_mb)
    if suite in _MMTESTS_SUITES:
        return _thp_job(c, suite, cpus, mem_mb)
    if suite == "stress-highalloc":
        return _highalloc_job(c, cpus, mem_mb)
    test = c.job.get("test", "")
    if _SEED003.match(test):
        return _seed003_job(c, test, cpus, mem_mb)
    if c.metric.startswith("latency p") or c.metric == "Total 2M hugepages allocated":
        return _seed001_job(c, cpus, mem_mb)
    if c.style == "short" and c.metric in _vms_tests():
        return _checked(
            f"vm-scalability[test={c.metric}]", "vm-scalability.throughput", "mean", None,
            cpus, mem_mb,
        )  # fmt: skip
    if suite:
        return _Job(None, None, reason=f"{suite} is not a suite here")
    return _Job(None, None, reason=f"no job of ours measures {c.metric!r}")


def _checked(
    spec: str, metric: str, statistic: str | None, scaling: str | None, cpus: int, mem_mb: int
) -> _Job:
    why = _fits(spec, cpus, mem_mb)
    if why:
        return _Job(spec, metric, statistic, scaling, reason=f"{spec} does not run here: {why}")
    return _Job(spec, metric, statistic, scaling)


def _lkp_job(c: Claim, suite: str, cpus: int, mem_mb: int) -> _Job:
    if suite != "vm-scalability":
        return _Job(None, None, reason=f"{suite} is not a suite here")
    test = c.job.get("test", "") or _case_of_path(c.job.get("path_params", ""))
    if test not in _vms_tests():
        return _Job(
            None, None,
            reason=f"vm-scalability case {test or '(none)'} is not one of ours "
            f"({', '.join(_vms_tests())})",
        )  # fmt: skip
    params = [f"test={test}"] + [f"{k}={c.job[k]}" for k in _LKP_KEPT if k in c.job]
    theirs = [f"{k} {c.job[k]}" for k in _LKP_SCALED if k in c.job]
    scaling = None
    if theirs:
        scaling = (
            f"{', '.join(theirs)} on {c.job.get('tbox_group', 'their machine')}: the guest runs "
            f"the definition's scale ({_defaults_text('vm-scalability')}, {cpus} vCPUs, "
            f"{mem_mb} MB)"
        )
    spec = f"vm-scalability[{','.join(params)}]"
    monitor = _monitor_metric(c.metric)
    if monitor is not None:
        return _checked(spec, monitor, "mean", scaling, cpus, mem_mb)
    if c.metric.removeprefix("vm-scalability.") not in _VMS_STATS:
        return _Job(
            spec, None,
            reason=f"{c.metric} is not measured here (our vm-scalability runs store "
            f"{', '.join('vm-scalability.' + k for k in _VMS_STATS)}, {', '.join(_MONITORED)})",
        )  # fmt: skip
    return _checked(spec, c.metric, "mean", scaling, cpus, mem_mb)


def _monitor_metric(name: str) -> str | None:
    """Our stored name of a monitor row of an LKP table, None when it is not one we keep.
    Every run of ours stores its /proc/vmstat delta and its wall-clock time
    (jobs/benchmarks/collect.py) under the names our own LKP tables print
    (``mmtests-vmstat.*``, ``duration.elapsed``); LKP's proc-vmstat monitor is the same
    delta, its time monitor's ``elapsed_time`` the same wall clock."""
    if name.startswith("proc-vmstat."):
        return "mmtests-vmstat." + name.removeprefix("proc-vmstat.")
    if name.startswith("mmtests-vmstat.") or name in ("duration.elapsed", "kcompactd.cpu_s"):
        return name
    if name == "time.elapsed_time":
        return "duration.elapsed"
    return None


def _case_of_path(path_params: str) -> str:
    """The case a result path's parameters end with (``performance-300s-8T-anon-w-seq-mt``:
    the values sorted by key, and ``test`` sorts last of vm-scalability's)."""
    ends = [t for t in _vms_tests() if path_params == t or path_params.endswith("-" + t)]
    return max(ends, key=len, default="")


def _defaults_text(name: str) -> str:
    from stackbench.jobs.benchmarks import definitions

    job = definitions.load(name)
    keep = ("runtime", "size", "nr_task", "max_threads", "mapsize_fraction", "pace_ms")
    return ", ".join(f"{k} {job.params[k]}" for k in keep if k in job.params)


def _vmstat_counter(label: str) -> str | None:
    from stackbench.resultsdb.tables.mmtests_vmstat import VMSTAT_ROWS

    text = label[4:] if label.startswith("Ops ") else label
    for counter, row in VMSTAT_ROWS:
        if row == text:
            return counter
    return None


def _thp_job(c: Claim, suite: str, cpus: int, mem_mb: int) -> _Job:
    if not _defined(suite):
        return _Job(None, None, reason=f"{suite} has no job definition here")
    counter = _vmstat_counter(c.metric)
    if counter is not None:
        return _checked(suite, f"mmtests-vmstat.{counter}", "max", None, cpus, mem_mb)
    op = c.metric
    if c.statistic and op.startswith(c.statistic + " "):
        op = op[len(c.statistic) + 1 :]
    elif c.statistic and op.endswith(" " + c.statistic):
        op = op[: -len(c.statistic) - 1]
    m = _THREADS.match(op)
    if m is None:
        return _Job(suite, None, reason=f"{c.metric} is not a {suite} metric here")
    threads = int(m.group(1))
    name = op if op.startswith("fault-") else f"Percentage huge-{threads}"
    metric = f"{suite}.{name}"
    # a share of huge faults is one value per run; compare-mmtests shows the best run's
    statistic = "max" if c.statistic in (None, "Percentage") else c.statistic
    run = _threads_run(suite, cpus, mem_mb)
    if threads in run:
        return _checked(suite, metric, statistic, None, cpus, mem_mb)
    if threads > 4 * cpus:
        return _Job(
            None, metric, statistic,
            reason=f"{threads} threads is beyond {suite}'s 4 x CPUs on the {cpus}-vCPU guest",
        )  # fmt: skip
    spec = f"{suite}[max_threads={threads}]"
    scaling = f"{threads} threads: max_threads {threads} instead of the definition's {max(run)}"
    return _checked(spec, metric, statistic, scaling, cpus, mem_mb)


def _threads_run(suite: str, cpus: int, mem_mb: int) -> list[int]:
    from stackbench.jobs.benchmarks import definitions

    try:
        (sj,) = definitions.expand(definitions.load(suite), guest_mem_mb=mem_mb, guest_cpus=cpus)
    except (StackbenchError, ValueError):
        return []
    return [int(t) for t in str(sj.resolved.get("THREADS", "")).split()]


def _highalloc_job(c: Claim, cpus: int, mem_mb: int) -> _Job:
    m = re.fullmatch(r"Ops (\d)", c.metric)
    if m:
        return _checked(
            "stress-highalloc", f"stress-highalloc.pass{m.group(1)}", "mean", None, cpus, mem_mb
        )
    counter = _vmstat_counter(c.metric)
    if counter is not None:
        return _checked("stress-highalloc", f"mmtests-vmstat.{counter}", "max", None, cpus, mem_mb)
    return _Job(
        "stress-highalloc", None, reason=f"{c.metric} is not a stress-highalloc metric here"
    )


def _seed003_job(c: Claim, test: str, cpus: int, mem_mb: int) -> _Job:
    m = _SEED003.match(test)
    assert m is not None
    load, kind = m.groups()
    params = [f"scenario=spread-25-{kind}"]
    scaling = None
    if "hogger" in c.job and load == "hogger":
        mb = re.match(r"(\d+)", c.job["hogger"])
        if mb:
            ours = int(mb.group(1)) * _SEED003_HOGGER_SCALE * mem_mb // 1024
            params.append(f"hogger={ours}")
            scaling = (
                f"hogger {c.job['hogger']} of their 512 MB VM: {ours} MB of the {mem_mb} MB guest"
            )
    spec = f"seed-003-compaction-{load}[{','.join(params)}]"
    if c.metric in ("Success:", "Success(N):"):
        return _checked(
            spec, "stress-highalloc.allocated-pass1", c.metric.rstrip(":"), scaling, cpus, mem_mb
        )
    if re.fullmatch(r"[a-z]+(?:_[a-z0-9]+)+", c.metric):
        return _checked(spec, f"mmtests-vmstat.{c.metric}", "mean", scaling, cpus, mem_mb)
    return _Job(spec, None, reason=f"{c.metric} is not measured by {spec}")


def _seed001_job(c: Claim, cpus: int, mem_mb: int) -> _Job:
    spec = "seed-001-proactive-compaction"
    if c.metric.startswith("latency p"):
        return _checked(
            spec, "stress-highalloc.latency-pass1", c.metric.split()[-1], None, cpus, mem_mb
        )
    return _checked(spec, "stress-highalloc.allocated-pass1", "mean", None, cpus, mem_mb)


def format_table(mapped: list[MappedClaim]) -> str:
    """One line per claim: what it claims, and our job and kernels for it or why not."""
    lines = []
    for m in mapped:
        c = m.claim
        head = f"{c.metric} {c.kernel} vs {c.base or '?'} {c.printed_pct:+.2f}%"
        if m.reason is None:
            lines.append(
                f"{head}: {m.job} {m.metric} ({m.statistic}) kernels {m.base_index}->{m.kernel_index}"
            )
        else:
            lines.append(f"{head}: not mapped: {m.reason}")
    return "\n".join(lines) + ("\n" if lines else "")


def cover_claims(cover_letter: str, kernels: list[tuple[str, str]]) -> list[MappedClaim]:
    """The claims of a series' cover letter mapped to its kernels (base first), as the series
    page shows them before anything is built."""
    from stackbench.patches import claims

    if not cover_letter.strip():
        return []
    return map_claims(claims.parse(cover_letter), kernels)
