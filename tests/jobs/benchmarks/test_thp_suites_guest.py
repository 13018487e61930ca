"""thpchallenge and thpcompact, builtin (stackbench's thpfaults program), in a real QEMU boot
of the tiny guest on the shared test kernel: both job definitions expand for the guest, run,
parse into the thpscale metric names under their own suites, are stored, and render as the
mmtests tables of their commits. Uses the shared kernel cache."""

from __future__ import annotations

import pytest
from helpers.kernelkit import GUEST_CPUS, GUEST_MEM_MB, base_kernel, boot_plan, guest_specs
from sqlalchemy import text

from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.resultsdb.ingest import ingest
from stackbench.resultsdb.rundata import KernelSpec
from stackbench.resultsdb.tables import render

SUITES = ("thpchallenge", "thpcompact")


def builtin_plan() -> list[d.SubJob]:
    """The shipped definitions with their guest parameters, one run each, builtin."""
    plan: list[d.SubJob] = []
    for name in SUITES:
        defn = d.load(name)
        data = {
            "suite": defn.suite,
            "runs": 1,
            "timeout": 300,
            "params": {**defn.params, "suite_source": "builtin"},
        }
        plan += d.expand(
            d.parse(data, path=f"{name}.yaml"), guest_mem_mb=GUEST_MEM_MB, guest_cpus=GUEST_CPUS
        )
    return plan


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_builtin_twins_in_the_guest(monkeypatch, tmp_path, eng):
    _, res = base_kernel(monkeypatch)
    plan = builtin_plan()
    assert [sj.suite for sj in plan] == list(SUITES)
    assert all(sj.suite_source == "builtin" for sj in plan)
    assert [sj.resolved["THREADS"] for sj in plan] == ["1 3 4", "1 3 4"]
    boot = boot_plan(res, plan, tmp_path, timeout_s=1500, expect_within_s=180)
    assert boot.status == "ok", boot.reason + "\n" + boot.console_tail
    assert boot.results_dir is not None
    assert (boot.results_dir / "complete").is_file(), boot.console_tail

    kernel, machine = guest_specs(res, name="base")
    runs = c.collect(boot.results_dir, plan, kernel=kernel, machine=machine)
    problems = [(r.job.suite, r.status, r.error) for r in runs]
    assert len(runs) == 2 and all(r.status == "done" for r in runs), problems
    for run in runs:
        suite = run.job.suite
        assert run.job.suite_version.startswith("builtin-")
        for n in (1, 3, 4):
            both = run.samples[f"{suite}.fault-both-{n}"]
            # every thread faults half its share, one 2 MB block at a time
            assert len(both) >= n * 4, (suite, n, len(both))
            assert all(v > 0 for v in both)
            assert 0 <= run.samples[f"{suite}.Percentage huge-{n}"][0] <= 100
            assert f"{suite}.local-huge-{n}" in run.samples
        print(suite, {k: v[:3] for k, v in run.samples.items() if k.endswith("-1")})

    ingest(eng, runs)
    with eng.connect() as conn:
        stored = dict(
            conn.execute(
                text(
                    "SELECT m.name, count(*) FROM sample s JOIN metric m ON m.id = s.metric_id "
                    "WHERE m.name LIKE 'thpc%fault-both-%' GROUP BY m.name"
                )
            ).all()
        )
    assert set(stored) == {f"{s}.fault-both-{n}" for s in SUITES for n in (1, 3, 4)}
    for suite in SUITES:
        table = render.render(eng, ["base"], style="mmtests", suite=suite)
        print(f"--- {suite}\n{table}")
        assert "Amean     fault-both-4" in table
        counts = render.render(eng, ["base"], style="mmtests", suite=suite, table="counts")
        assert "huge-4" in counts


def _upstream_plan(suite: str, image: bool) -> list[d.SubJob]:
    defn = d.load(suite)
    params = {**defn.params, "max_threads": 2, "suite_source": "upstream"}
    if image:
        params["image"] = "debian"
    data = {
        "suite": suite,
        "runs": 1,
        "timeout": 900,
        "params": params,
        "upstream": {"url": defn.upstream.url, "commit": defn.upstream.commit},
    }
    return d.expand(d.parse(data, path=f"{suite}.yaml"), guest_mem_mb=GUEST_MEM_MB,
                    guest_cpus=GUEST_CPUS)  # fmt: skip


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("suite", SUITES)
def test_run_mmtests_in_the_image(monkeypatch, tmp_path, suite):
    """mmtests' own run-mmtests.sh of the pinned commit in the Debian image, beside our
    runner of the same upstream program, in one boot of a debian-guest kernel: the same
    metric names, and the files run-mmtests.sh itself leaves."""
    from test_image import built_image, debian_kernel
    from test_suites import UPSTREAM, need_bundles

    from stackbench.jobs.benchmarks import suites
    from stackbench.jobs.executors.boot_stage import run_kernel
    from stackbench.jobs.executors.settings import Settings

    need_bundles()
    monkeypatch.setenv(suites.MIRROR_ENV, str(UPSTREAM))
    suites._reachable.cache_clear()
    built_image(monkeypatch)
    res = debian_kernel(monkeypatch)
    plan = [*_upstream_plan(suite, False), *_upstream_plan(suite, True)]
    kernel = KernelSpec(commit=res.commit, name="base", config_hash=res.config_hash,
                        compiler=res.compiler, config_name="debian-guest")  # fmt: skip
    settings = Settings(cpus=GUEST_CPUS, mem_mb=GUEST_MEM_MB, accel="tcg")
    boot, runs = run_kernel(res.bzimage, res.modules, plan, kernel=kernel,
                                     settings=settings, workdir=tmp_path / "vm",
                                     boot_id="thp-image-test")  # fmt: skip
    assert boot is not None and boot.status == "ok", boot and boot.console_tail
    problems = [(r.job.params, r.status, r.error) for r in runs if r.status != "done"]
    assert len(runs) == 2 and all(r.status == "done" for r in runs), problems
    plain, mm = sorted(runs, key=lambda r: "image" in r.job.params)
    names = {k for k in mm.samples if k.startswith(f"{suite}.")}
    assert names and names == {k for k in plain.samples if k.startswith(f"{suite}.")}
    assert mm.meta["upstream"]["commit"] == d.load(suite).upstream.commit
    assert "mmtests/tests-timestamp" in mm.logs and "mmtests/threads-1.time" in mm.logs
