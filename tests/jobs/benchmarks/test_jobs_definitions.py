"""Job definitions: schema validation with clear errors, LKP-style expansion, versions."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from stackbench.errors import InputError, NotFoundError
from stackbench.jobs.benchmarks import definitions as d


def expand_ok(job: d.JobDef) -> bool:
    return len(d.expand(job, guest_mem_mb=1024, guest_cpus=2)) >= 1


def test_shipped_definitions_load_and_expand():
    jobs = {j.name: j for j in d.load_all()}
    assert set(d.SUITES) <= set(jobs)
    # every other shipped definition reproduces a seed's experiment and names the seed
    for name in set(jobs) - set(d.SUITES):
        assert name.startswith(f"seed-{jobs[name].seed}-"), name
        assert expand_ok(jobs[name])
    vms = d.expand(jobs["vm-scalability"], guest_mem_mb=1024, guest_cpus=2)
    assert len(vms) == 12
    assert {sj.test for sj in vms} >= {"anon-w-seq-mt", "lru-file-readtwice", "mmap-xread-seq-mt"}
    names = [sj.name for sj in d.expand(jobs["thpscale"], guest_mem_mb=1024, guest_cpus=2)]
    names += [sj.name for sj in vms]
    assert len(names) == len(set(names))
    for sj in vms:
        assert sj.runs == 5
        assert sj.runner == "stackbench-guest"
        # params are the declared values (machine independent), resolved the guest's numbers
        assert sj.params["nr_task"] == "100%"
        assert sj.resolved["NR_TASK"] == 2
        assert sj.resolved["MEM_PERMILLE"] == 125
        assert sj.resolved["TEST"] == sj.test == sj.params["test"]


def test_list_params_expand_to_every_combination():
    job = d.parse(
        {
            "suite": "vm-scalability",
            "runs": 2,
            "params": {"test": ["anon-w-seq", "anon-cow-seq"], "nr_task": [1, "50%"]},
        },
        path="combo.yaml",
    )
    subs = d.expand(job, guest_mem_mb=2048, guest_cpus=8)
    combos = {(sj.test, sj.params["nr_task"], sj.resolved["NR_TASK"]) for sj in subs}
    assert combos == {
        ("anon-w-seq", 1, 1),
        ("anon-w-seq", "50%", 4),
        ("anon-cow-seq", 1, 1),
        ("anon-cow-seq", "50%", 4),
    }
    assert all(sj.runs == 2 for sj in subs)
    # defaults are filled so the same job written two ways has the same identity
    assert subs[0].params["runtime"] == "300s"
    assert subs[0].params["mem_fraction"] == 0.5


def test_params_identity_does_not_depend_on_the_guest():
    job = d.load("vm-scalability")
    small = d.expand(job, guest_mem_mb=1024, guest_cpus=2)
    big = d.expand(job, guest_mem_mb=8192, guest_cpus=16)
    assert [s.job_spec().params_key for s in small] == [b.job_spec().params_key for b in big]
    assert small[0].resolved["NR_TASK"] == 2 and big[0].resolved["NR_TASK"] == 16


def test_job_spec_carries_suite_version_and_runner():
    # pinned to the builtin suite: with ../shared present the default would be upstream
    job = d.load("thpscale")
    job = dataclasses.replace(job, params={**job.params, "suite_source": "builtin"})
    sj = d.expand(job, guest_mem_mb=1024, guest_cpus=2)[0]
    spec = sj.job_spec()
    assert spec.suite == "thpscale" and spec.test == "thpscale"
    assert re.fullmatch(r"builtin-\d+\+[0-9a-f]{12}", spec.suite_version)
    assert spec.runner == "stackbench-guest"
    assert spec.params == {"max_threads": 4, "mapsize_fraction": 0.15, "madvise": True}


@pytest.mark.parametrize(
    ("max_threads", "expected"),
    [
        (32, [1, 3, 5, 7, 12, 18, 24, 30, 32]),
        (8, [1, 3, 5, 7, 8]),
        (4, [1, 3, 4]),
        (1, [1]),
        (12, [1, 3, 5, 7, 12]),
    ],
)
def test_thread_counts_follow_mmtests(max_threads, expected):
    assert d.thread_counts(max_threads) == expected


def test_thpscale_auto_threads_use_four_per_cpu_capped():
    job = d.parse({"suite": "thpscale", "params": {"max_threads": "auto"}}, path="t.yaml")
    (sj,) = d.expand(job, guest_mem_mb=4096, guest_cpus=2)
    assert sj.resolved["THREADS"] == "1 3 5 7 8"
    (sj,) = d.expand(job, guest_mem_mb=65536, guest_cpus=16)
    assert sj.resolved["THREADS"] == "1 3 5 7 12 18 24 30 32"


def test_thpscale_too_little_memory_per_thread_is_a_clear_error():
    job = d.parse({"suite": "thpscale", "params": {"max_threads": 32}}, path="t.yaml")
    with pytest.raises(InputError, match=r"t.yaml: params.mapsize_fraction: .*per thread"):
        d.expand(job, guest_mem_mb=128, guest_cpus=2)


def test_suite_versions_differ_per_suite_and_are_stable():
    versions = {s: d.suite_version(s) for s in d.SUITES}
    assert len(set(versions.values())) == len(d.SUITES) == 5
    assert versions == {s: d.suite_version(s) for s in d.SUITES}
    assert any(p.name == "stackbench_highalloc.c" for p in d.source_files("stress-highalloc"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"suite": "fio", "params": {}}, r"suite: 'fio' is not one of"),
        ({"suite": "thpscale"}, r"top level: 'params' is a required property"),
        ({"suite": "thpscale", "params": {}, "runs": 0}, r"runs: 0 is less than the minimum"),
        ({"suite": "thpscale", "params": {}, "color": 1}, r"top level: unknown key .*'color'"),
        ({"suite": "vm-scalability", "params": {}}, r"params.test: required for suite"),
        (
            {"suite": "vm-scalability", "params": {"test": ["anon-w-seq", "anon-x"]}},
            r"params.test\[1\]: 'anon-x' is not one of",
        ),
        (
            {"suite": "vm-scalability", "params": {"test": "anon-w-seq", "nr_task": "lots"}},
            r"params.nr_task: 'lots' is none of: integer in 1..1024; string matching",
        ),
        (
            {"suite": "vm-scalability", "params": {"test": "anon-w-seq", "runtime": 300}},
            r"params.runtime: 300 is not of type 'string'",
        ),
        ({"suite": "thpscale", "params": {"threads": 4}}, r"params.threads: unknown parameter"),
        ({"suite": "thpscale", "params": {"max_threads": []}}, r"params.max_threads: an empty"),
        ({"suite": "stress-highalloc", "params": {"gfp": "atomic"}}, r"params.gfp: 'atomic'"),
        ([1, 2], r"top level: \[1, 2\] is not of type 'object'"),
    ],
)
def test_invalid_definitions_name_the_file_and_field(data, message):
    with pytest.raises(InputError, match=r"^bad.yaml: " + message):
        d.parse(data, path="bad.yaml")


def test_load_file_errors(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("suite: [unclosed\n")
    with pytest.raises(InputError, match=r"broken.yaml: not valid YAML"):
        d.load_file(broken)
    with pytest.raises(InputError, match=r"missing.yaml: "):
        d.load_file(tmp_path / "missing.yaml")
    with pytest.raises(
        NotFoundError, match=r"no job definition 'fio' \(known: seed-000-.*stress-highalloc"
    ):
        d.load("fio")
    ok = tmp_path / "mine.yaml"
    ok.write_text(
        yaml.safe_dump({"suite": "stress-highalloc", "params": {"gfp": ["thp", "hugetlb"]}})
    )
    job = d.load_file(ok)
    # a name is never a path, however it ends: requests choose it
    for name in (str(ok), "mine.yaml", "../jobs/benchmarks/defs/thpscale.yaml"):
        with pytest.raises(NotFoundError):
            d.load(name)
    assert job.name == "mine" and job.runs == d.DEFAULT_RUNS
    assert [sj.resolved["GFP"] for sj in d.expand(job, guest_mem_mb=1024, guest_cpus=2)] == [
        "thp",
        "hugetlb",
    ]


def test_too_small_guest_is_rejected():
    with pytest.raises(InputError, match="guest too small"):
        d.expand(d.load("thpscale"), guest_mem_mb=32, guest_cpus=2)


def test_format_job_spec_reads_back_through_parse_job_spec():
    from stackbench.jobs.executors.jobspecs import format_job_spec, parse_job_spec

    assert format_job_spec("thpscale", {}) == "thpscale"
    spec = format_job_spec("thpscale", {"madvise": False, "max_threads": 2})
    assert spec == "thpscale[madvise=false,max_threads=2]"
    job = parse_job_spec(spec)
    assert job.params["madvise"] is False and job.params["max_threads"] == 2
