"""Conformance of the two suite sources on one real kernel: vm-scalability and thpscale run
from upstream (the pinned commits, from ../shared/upstream's bundles) and from our builtin
programs in one boot under QEMU, through the same parsers. Both sources must give the same
metric names, the runs must record where they came from, and the stored results must land
in separate jobs (never pooled) in the comparison tables. Uses the shared kernel cache."""

from __future__ import annotations

import pytest
from helpers.kernelkit import GUEST_CPUS, GUEST_MEM_MB, base_kernel, boot_plan, guest_specs
from test_suites import MMTESTS_COMMIT, UPSTREAM, VMS_COMMIT, need_bundles

from stackbench.errors import StackbenchError
from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks import suites
from stackbench.resultsdb import query
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.tables import render


def both_sources_plan() -> list[d.SubJob]:
    jobs = [
        (
            "vm-scalability",
            {"test": "anon-w-seq", "mem_fraction": 0.05, "runtime": "20s"},
            120,
        ),
        # a conformance test, not a timing: a full CI's load slowed upstream thpscale past
        # 300 s once (it takes about 10 s on a quiet host), so the limit only catches a hang
        ("thpscale", {"max_threads": 2, "mapsize_fraction": 0.1}, 900),
    ]
    plan: list[d.SubJob] = []
    for name, params, timeout in jobs:
        defn = d.load(name)
        data = {
            "suite": defn.suite,
            "runs": 1,
            "timeout": timeout,
            "params": {**params, "suite_source": ["upstream", "builtin"]},
            "upstream": {"url": defn.upstream.url, "commit": defn.upstream.commit},
        }
        plan += d.expand(
            d.parse(data, path=f"{name}.yaml"), guest_mem_mb=GUEST_MEM_MB, guest_cpus=GUEST_CPUS
        )
    return plan


def metric_names(run) -> set[str]:
    return {k for k in run.samples if k.startswith((f"{run.job.suite}.",))}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_upstream_and_builtin_on_one_kernel(monkeypatch, tmp_path, eng):
    need_bundles()
    monkeypatch.setenv(suites.MIRROR_ENV, str(UPSTREAM))
    suites._reachable.cache_clear()
    _, res = base_kernel(monkeypatch)
    plan = both_sources_plan()
    assert [sj.suite_source for sj in plan] == ["upstream", "builtin"] * 2
    boot = boot_plan(res, plan, tmp_path, timeout_s=1500, expect_within_s=180)
    assert boot.status == "ok", boot.reason + "\n" + boot.console_tail
    assert boot.results_dir is not None
    assert (boot.results_dir / "complete").is_file(), boot.console_tail

    kernel, machine = guest_specs(res, name="base")
    runs = c.collect(boot.results_dir, plan, kernel=kernel, machine=machine)
    problems = [(r.job.suite, r.meta["suite_source"], r.status, r.error) for r in runs]
    assert len(runs) == 4 and all(r.status == "done" for r in runs), (problems, boot.console_tail)

    by = {(r.job.suite, r.meta["suite_source"]): r for r in runs}
    for suite in ("vm-scalability", "thpscale"):
        up, bi = by[(suite, "upstream")], by[(suite, "builtin")]
        names = metric_names(up)
        assert names, up.samples.keys()
        assert names == metric_names(bi), sorted(names ^ metric_names(bi))
        assert up.job.suite_version != bi.job.suite_version
        assert bi.job.suite_version.startswith("builtin-")
    vms_up = by[("vm-scalability", "upstream")]
    assert vms_up.samples["vm-scalability.throughput"][0] > 0
    assert vms_up.meta["upstream"]["commit"] == VMS_COMMIT
    assert VMS_COMMIT in vms_up.job.suite_version
    thp_up = by[("thpscale", "upstream")]
    assert MMTESTS_COMMIT in thp_up.job.suite_version
    assert 0 <= thp_up.samples["thpscale.Percentage huge-1"][0] <= 100

    ingest(eng, runs)
    with eng.connect() as conn:
        ds = query.load(conn, query.resolve_kernels(conn, ["base"]))
    per_suite: dict[str, list[query.JobRow]] = {}
    for job in ds.jobs.values():
        per_suite.setdefault(job.suite, []).append(job)
    assert {s: len(js) for s, js in per_suite.items()} == {"vm-scalability": 2, "thpscale": 2}
    lkp = render.render(eng, ["base"], style="lkp", suite="vm-scalability", all_rows=True)
    print(lkp)
    assert lkp.count("vm-scalability.throughput") == 2  # one group per source
    assert f"suite_commit: {VMS_COMMIT[:12]}" in lkp or f"/{VMS_COMMIT[:12]}" in lkp
    with pytest.raises(StackbenchError, match="not pooled"):
        render.render(eng, ["base"], style="mmtests", suite="thpscale")
    for source in ("upstream", "builtin"):
        mm = render.render(eng, ["base"], style="mmtests", suite="thpscale", suite_source=source)
        print(f"--- thpscale, suite_source={source}\n{mm}")
        assert "Amean     fault-both-1" in mm
