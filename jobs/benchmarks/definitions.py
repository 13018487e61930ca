"""Job definitions: one YAML per benchmark under jobs/benchmarks/defs, LKP-style parameters.

A definition names its suite, how many runs each sub-job gets, and parameters. A parameter
given as a list expands into one sub-job per element (every combination when several are
lists), as LKP expands its job files. Each sub-job carries

- ``params``: the declared values with the suite's defaults filled in. They are the job's
  identity in the results database (ingest's JobSpec), so they stay independent of the
  machine: ``nr_task: 100%`` stays a percentage, as LKP keeps ``size: 8T`` in its paths;
- ``resolved``: what the guest runner needs for one machine (task counts, thread lists,
  per-mille shares of MemTotal), computed by :func:`expand` from the guest's CPUs and memory.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from stackbench.errors import InputError, NotFoundError
from stackbench.jobs.benchmarks import knobs, suites
from stackbench.schema import read_yaml

HERE = Path(__file__).resolve().parent
DEFS_DIR = HERE / "defs"
WORKLOADS_DIR = HERE / "workloads"
GUEST_DIR = HERE / "guest"

DEFAULT_RUNS = 5
DEFAULT_TIMEOUT_S = 600
RUNNER = "stackbench-guest"
# bump when the builtin programs change meaning without their sources changing (flags...)
BUILTIN_VERSION = "builtin-1"
HPAGE_MB = 2
HPAGE_ORDER = 9
HIGHALLOC_PASSES = 3

SUITES = ("vm-scalability", "thpscale", "thpchallenge", "thpcompact", "stress-highalloc")

# defaults filled into params so equal jobs get equal identities however they were written
DEFAULTS: dict[str, dict[str, Any]] = {
    "vm-scalability": {"nr_task": "100%", "runtime": "300s", "mem_fraction": 0.5},
    "thpscale": {"max_threads": "auto", "mapsize_fraction": 0.8, "madvise": True},
    # mmtests' own defaults: 0.8 of memory, no MADV_HUGEPAGE (its configs pass no --madv-huge)
    "thpchallenge": {"max_threads": "auto", "mapsize_fraction": 0.8, "madvise": False},
    "thpcompact": {
        "max_threads": "auto",
        "anon_fraction": 0.8,
        "file_fraction": 0.2,
        "madvise": False,
    },
    "stress-highalloc": {
        "gfp": "movable",
        "pace_ms": 125,
        "alloc_fraction": 0.95,
        "load_fraction": 0.3,
    },
}

# the sources that decide each builtin suite's results: their hash is the suite version
SUITE_SOURCES: dict[str, tuple[str, ...]] = {
    "vm-scalability": (
        "workloads/usemem.c",
        "workloads/readfile.c",
        "workloads/cases",
        "guest/run-vm-scalability.sh",
    ),
    "thpscale": ("workloads/thpfaults.c", "guest/run-thpscale.sh"),
    "thpchallenge": ("workloads/thpfaults.c", "guest/run-thpchallenge.sh"),
    "thpcompact": ("workloads/thpfaults.c", "guest/run-thpcompact.sh"),
    "stress-highalloc": (
        "workloads/highalloc",
        "workloads/usemem.c",
        "guest/run-stress-highalloc.sh",
    ),
}
# the experiments of the seeds (../shared/seeds) the seed-* definitions reproduce, and the
# comparison that reads each one
SEEDS: dict[str, tuple[str, str]] = {
    "000": ("mm: enable >0 order folio memory compaction (Zi Yan)", "--style lkp"),
    "001": ("mm: proactive compaction", "--style alloc-latency"),
    "002": ("mm: page_alloc: freelist migratetype hygiene", "--style per-run --metric M"),
    "003": ("mm/compaction: redesign compaction (Joonsoo Kim)", "--style order-success"),
    "004": ("Increase success rates and reduce latency of compaction (Mel Gorman)",
            "--style mmtests --table latency"),
}  # fmt: skip
# the scenario stage's sources: part of the version of jobs that have a scenario stage only
SCENARIO_SOURCES = ("workloads/fragment.c", "guest/scenario.sh")
# our side of an upstream suite (how LKP and mmtests run it): its hash joins the commit in
# the suite version
UPSTREAM_RUNNERS: dict[str, tuple[str, ...]] = {
    "vm-scalability": ("guest/run-vm-scalability-upstream.sh", "guest/upstream-bin"),
    "thpscale": ("guest/run-thpscale-upstream.sh",),
    "thpchallenge": ("guest/run-thpchallenge-upstream.sh",),
    "thpcompact": ("guest/run-thpcompact-upstream.sh",),
}


@dataclass
class JobDef:
    name: str
    suite: str
    params: dict[str, Any]
    runs: int = DEFAULT_RUNS
    runner: str = RUNNER
    timeout_s: int = DEFAULT_TIMEOUT_S
    description: str = ""
    path: Path | None = None
    seed: str = ""
    # the suite's upstream repository and pinned commit (jobs/benchmarks/suites.py)
    upstream: suites.Upstream | None = None


@dataclass
class SubJob:
    suite: str
    test: str
    params: dict[str, Any]
    runs: int
    suite_version: str
    runner: str
    name: str = ""
    resolved: dict[str, Any] = field(default_factory=dict)
    timeout_s: int = DEFAULT_TIMEOUT_S
    # system knobs, command line, config fragment and scenario stage (jobs/benchmarks/knobs.py)
    setup: knobs.SystemSetup = field(default_factory=knobs.SystemSetup)
    # set when the sub-job runs the upstream suite (suite_source=upstream)
    upstream: suites.Upstream | None = None

    @property
    def suite_source(self) -> str:
        return "upstream" if self.upstream else "builtin"

    def provenance(self) -> dict[str, Any]:
        """What a run records about where its benchmark came from (run meta)."""
        out: dict[str, Any] = {"suite_source": self.suite_source}
        if self.upstream is not None:
            out["upstream"] = {"url": self.upstream.url, "commit": self.upstream.commit}
        if self.setup.kconfig:
            from stackbench.kernels import config as kconfig

            # the fragment's text as it was: a fragment edited later is another kernel
            text = kconfig.fragment_path(self.setup.kconfig).read_text()
            out["kconfig"] = {"fragment": self.setup.kconfig, "text": text}
        return out

    def job_spec(self):  # -> stackbench.resultsdb.rundata.JobSpec
        from stackbench.resultsdb.rundata import JobSpec

        return JobSpec(
            suite=self.suite,
            test=self.test,
            params=dict(self.params),
            suite_version=self.suite_version,
            runner=self.runner,
        )


@cache
def schema() -> dict[str, Any]:
    with open(DEFS_DIR / "schema.yaml") as fh:
        return yaml.safe_load(fh)


def names() -> list[str]:
    return sorted(p.stem for p in DEFS_DIR.glob("*.yaml") if p.stem != "schema")


def load(name: str) -> JobDef:
    """The shipped definition jobs/benchmarks/defs/<name>.yaml. Never a path: names arrive from requests,
    and a file of the server's choosing must not be read for them (``load_file`` reads one)."""
    known = names()
    if name not in known:
        raise NotFoundError(f"no job definition {name[:80]!r} (known: {', '.join(known)})")
    return load_file(DEFS_DIR / f"{name}.yaml")


def load_all() -> list[JobDef]:
    return [load(n) for n in names()]


def load_file(path: Path) -> JobDef:
    return parse(read_yaml(path), path=path)


def parse(data: Any, *, path: Path | str = "<job>") -> JobDef:
    """Validate a definition already read from YAML; errors name the field at fault."""
    _validate(data, schema()["job"], path, "")
    suite = data["suite"]
    params = data["params"]
    pschema = schema()["params"][suite]
    props = pschema.get("properties", {})
    for key in pschema.get("required", []):
        if key not in params:
            raise InputError(path, f"params.{key}: required for suite {suite}")
    for key, value in params.items():
        sch = props.get(key) or _system_schema(key)
        if sch is None:
            raise InputError(
                path,
                f"params.{key}: unknown parameter for {suite} (known: {', '.join(props)}; "
                f"any job: {', '.join(schema()['system']['properties'])}, vm.<sysctl>)",
            )
        if isinstance(value, list):
            if not value:
                raise InputError(path, f"params.{key}: an empty list expands to no job")
            for i, item in enumerate(value):
                _validate(item, sch, path, f"params.{key}[{i}]")
        else:
            _validate(value, sch, path, f"params.{key}")
    for value in (
        params.get("kconfig", [])
        if isinstance(params.get("kconfig"), list)
        else [params.get("kconfig")]
    ):
        if value:
            _known_fragment(value, path)
    return JobDef(
        name=Path(path).stem,
        suite=suite,
        params=params,
        runs=data.get("runs", DEFAULT_RUNS),
        runner=data.get("runner", RUNNER),
        timeout_s=data.get("timeout", DEFAULT_TIMEOUT_S),
        description=data.get("description", ""),
        path=Path(path),
        seed=data.get("seed", ""),
        upstream=suites.Upstream(**data["upstream"]) if "upstream" in data else None,
    )


def _known_fragment(name: str, path: Path | str) -> None:
    from stackbench.kernels import config as kconfig

    try:
        kconfig.fragment_path(name)
    except NotFoundError as exc:
        raise InputError(path, f"params.kconfig: {exc}") from None


def _system_schema(key: str) -> dict[str, Any] | None:
    """The schema of a system parameter (schema.yaml's ``system``), None for unknown keys."""
    system = schema()["system"]
    if key in system["properties"]:
        return system["properties"][key]
    for pattern, sch in system.get("patternProperties", {}).items():
        if re.match(pattern, key):
            return sch
    return None


def _validate(value: Any, sch: dict[str, Any], path: Path | str, where: str) -> None:
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    err = errors[0]
    loc = ".".join([where] * bool(where) + [str(p) for p in err.absolute_path]) or "top level"
    msg = err.message
    if err.validator == "oneOf":
        msg = f"{err.instance!r} is none of: " + "; ".join(
            _describe(s) for s in err.validator_value
        )
    elif err.validator == "additionalProperties":
        msg = f"unknown key ({msg.split('(')[-1].rstrip(')')})"
    raise InputError(path, f"{loc}: {msg}")


def _describe(sch: dict[str, Any]) -> str:
    if "const" in sch:
        return repr(sch["const"])
    kind = sch.get("type", "value")
    if "pattern" in sch:
        return f"{kind} matching {sch['pattern']}"
    lo, hi = sch.get("minimum"), sch.get("maximum")
    if lo is not None and hi is not None:
        return f"{kind} in {lo}..{hi}"
    return kind


# ---- expansion ------------------------------------------------------------------------------


def expand(job: JobDef, *, guest_mem_mb: int, guest_cpus: int) -> list[SubJob]:
    """One sub-job per combination of list-valued params, resolved for the given guest."""
    if guest_cpus < 1 or guest_mem_mb < 64:
        raise InputError(
            job.path or job.name, f"guest too small: {guest_cpus} CPUs, {guest_mem_mb} MB"
        )
    keys = list(job.params)
    choices = [v if isinstance(v, list) else [v] for v in job.params.values()]
    subjobs = []
    for combo in itertools.product(*choices):
        params = dict(DEFAULTS[job.suite])
        params.update(zip(keys, combo, strict=True))
        test = str(params.get("test", job.suite))
        source = suites.choose(
            job.suite, params.pop("suite_source", None), job.upstream, str(job.path or job.name)
        )
        setup = knobs.split(params)
        resolved = RESOLVERS[job.suite](job, params, guest_mem_mb, guest_cpus)
        resolved.update(setup.env())
        upstream = job.upstream if source == "upstream" else None
        if upstream is not None:
            # only upstream jobs name their source: builtin ones keep their old identity
            params["suite_source"] = "upstream"
            resolved["SB_RUNNER"] = f"run-{job.suite}-upstream.sh"
            version = upstream_version(job.suite, upstream, scenario=bool(setup.stage))
        else:
            version = suite_version(job.suite, scenario=bool(setup.stage))
        if "image" in params:
            from stackbench.jobs.benchmarks.guest import mmtests_image

            version = mmtests_image.setup_subjob(
                job.suite, params, resolved, setup, upstream, version, str(job.path or job.name)
            )
        subjobs.append(
            SubJob(
                suite=job.suite,
                test=test,
                params=params,
                runs=job.runs,
                suite_version=version,
                runner=job.runner,
                name=subjob_name(job.suite, params),
                resolved=resolved,
                timeout_s=job.timeout_s,
                setup=setup,
                upstream=upstream,
            )
        )
    seen: set[str] = set()
    for sj in subjobs:
        if sj.name in seen:
            raise InputError(job.path or job.name, f"two sub-jobs share the name {sj.name}")
        seen.add(sj.name)
    return subjobs


def subjob_name(suite: str, params: dict[str, Any]) -> str:
    """LKP's path_params idea: values sorted by key, each cut to 31 chars, joined by '-'."""
    parts = [_path_value(params[k]) for k in sorted(params)]
    return f"{suite}.{'-'.join(parts)}" if parts else suite


def _path_value(v: Any) -> str:
    if isinstance(v, bool):
        v = int(v)
    return re.sub(r"[^-a-zA-Z0-9+=:.%]", "_", str(v))[:31]


def thread_counts(max_threads: int) -> list[int]:
    """mmtests' thread rule: 1..8 step 2, then 12 step 6 up to MAX, plus MAX itself."""
    counts = [n for n in range(1, 9, 2) if n <= max_threads]
    counts += [n for n in range(12, max_threads + 1, 6)]
    if max_threads not in counts:
        counts.append(max_threads)
    return counts


def _permille(fraction: float) -> int:
    return max(1, round(fraction * 1000))


def _seconds(text: str) -> int:
    return int(text.rstrip("s"))


def _bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)", text)
    assert m, text  # the schema guarantees the shape
    shift = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]
    return int(m.group(1)) << shift


def _resolve_vms(job: JobDef, p: dict[str, Any], mem_mb: int, cpus: int) -> dict[str, Any]:
    nr = p["nr_task"]
    if isinstance(nr, str):
        nr = max(1, cpus * int(nr.rstrip("%")) // 100)
    return {
        "TEST": p["test"],
        "NR_TASK": nr,
        "RUNTIME_S": _seconds(p["runtime"]),
        "SIZE_BYTES": _bytes(p["size"]) if "size" in p else 0,
        "MEM_PERMILLE": _permille(p["mem_fraction"]),
    }


def _resolve_thpscale(job: JobDef, p: dict[str, Any], mem_mb: int, cpus: int) -> dict[str, Any]:
    mt = p["max_threads"]
    if mt == "auto":
        mt = min(4 * cpus, 32)
    threads = thread_counts(mt)
    # each thread needs at least two huge pages of its own for the hole punching to mean much
    per_thread_mb = mem_mb * p["mapsize_fraction"] / max(threads)
    if per_thread_mb < 4 * HPAGE_MB:
        raise InputError(
            job.path or job.name,
            f"params.mapsize_fraction: {p['mapsize_fraction']} of {mem_mb} MB gives "
            f"{per_thread_mb:.1f} MB per thread at {max(threads)} threads; need 8 MB",
        )
    return {
        "THREADS": " ".join(map(str, threads)),
        "MAP_PERMILLE": _permille(p["mapsize_fraction"]),
        "MADVISE": int(bool(p["madvise"])),
    }


def _threads(p: dict[str, Any], cpus: int) -> list[int]:
    mt = p["max_threads"]
    return thread_counts(min(4 * cpus, 32) if mt == "auto" else mt)


def _per_thread_check(job: JobDef, key: str, fraction: float, mem_mb: int, threads: int) -> None:
    # every thread faults half its share: below 8 MB a share gives one or two faults
    per_thread_mb = mem_mb * fraction / threads
    if per_thread_mb < 4 * HPAGE_MB:
        raise InputError(
            job.path or job.name,
            f"params.{key}: {fraction} of {mem_mb} MB gives {per_thread_mb:.1f} MB per "
            f"thread at {threads} threads; need 8 MB",
        )


def _resolve_thpchallenge(job: JobDef, p: dict[str, Any], mem_mb: int, cpus: int) -> dict[str, Any]:
    threads = _threads(p, cpus)
    _per_thread_check(job, "mapsize_fraction", p["mapsize_fraction"], mem_mb, max(threads))
    return {
        "THREADS": " ".join(map(str, threads)),
        "MAP_PERMILLE": _permille(p["mapsize_fraction"]),
        "MADVISE": int(bool(p["madvise"])),
    }


def _resolve_thpcompact(job: JobDef, p: dict[str, Any], mem_mb: int, cpus: int) -> dict[str, Any]:
    threads = _threads(p, cpus)
    _per_thread_check(job, "anon_fraction", p["anon_fraction"], mem_mb, max(threads))
    return {
        "THREADS": " ".join(map(str, threads)),
        "ANON_PERMILLE": _permille(p["anon_fraction"]),
        "FILE_PERMILLE": _permille(p["file_fraction"]),
        "MADVISE": int(bool(p["madvise"])),
    }


def _resolve_highalloc(job: JobDef, p: dict[str, Any], mem_mb: int, cpus: int) -> dict[str, Any]:
    # order, attempts and passes are only in params when given (older jobs keep their ids)
    return {
        "GFP": p["gfp"],
        "PACE_MS": p["pace_ms"],
        "ALLOC_PERMILLE": _permille(p["alloc_fraction"]),
        "LOAD_PERMILLE": round(p["load_fraction"] * 1000),
        "LOAD_TASKS": cpus,
        "ORDER": p.get("order", HPAGE_ORDER),
        "ATTEMPTS": p.get("attempts", 0),
        "PASSES": p.get("passes", HIGHALLOC_PASSES),
    }


RESOLVERS = {
    "vm-scalability": _resolve_vms,
    "thpscale": _resolve_thpscale,
    "thpchallenge": _resolve_thpchallenge,
    "thpcompact": _resolve_thpcompact,
    "stress-highalloc": _resolve_highalloc,
}


# ---- versions -------------------------------------------------------------------------------


def source_files(suite: str, *, scenario: bool = False, upstream: bool = False) -> list[Path]:
    files: list[Path] = []
    table = UPSTREAM_RUNNERS if upstream else SUITE_SOURCES
    for rel in table[suite] + (SCENARIO_SOURCES if scenario else ()):
        p = HERE / rel
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        elif p.is_file():
            files.append(p)
    return files


def _files_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(HERE).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def suite_version(suite: str, *, scenario: bool = False) -> str:
    """``builtin-N+<hash>``: the builtin programs' version and the hash of their sources
    (with the scenario stage's for jobs that have one)."""
    return f"{BUILTIN_VERSION}+{_files_hash(source_files(suite, scenario=scenario))}"


def upstream_version(suite: str, up: suites.Upstream, *, scenario: bool = False) -> str:
    """``upstream-N+<commit>+<hash>``: the upstream commit and the hash of our runner."""
    files = source_files(suite, scenario=scenario, upstream=True)
    return suites.version(up, _files_hash(files))
