"""thpchallenge and thpcompact, builtin (stackbench's thpfaults program), in a real QEMU boot
of the tiny guest on the shared test kernel: both job definitions expand for the guest, run,
parse into the thpscale metric names under their own suites, are stored, and render as the
mmtests tables of their commits. Uses the shared kernel cache."""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import pytest
from helpers.kernelkit import GUEST_CPUS, GUEST_MEM_MB, base_kernel, boot_plan, guest_specs
from sqlalchemy import text

# compare-mmtests.pl of the pinned commits, run as the conformance suite runs it (skipped
# there, and here, without perl's modules, R or the bundle)
from test_mmtests_ci_conformance import CASES, KERNELS, _ours, _real, checkouts

from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks.importers import mmtests as mmtests_import
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
    # a tenth of the guest's memory (a thirtieth of file for thpcompact): the runs under TCG
    # take a minute or two, enough faults for every row of the tables
    small = {"mapsize_fraction": 0.1} if suite == "thpchallenge" else {
        "anon_fraction": 0.1, "file_fraction": 0.03}  # fmt: skip
    params = {**defn.params, **small, "max_threads": 2, "suite_source": "upstream"}
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


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict[str, Path]:
    return checkouts(tmp_path_factory.mktemp("mmtests"))


def _mmtests_dirs(root: Path, suite: str, mm, plain) -> None:
    """Two mmtests run directories from one boot, for compare-kernels: ``base-v1`` is the
    iteration directory run-mmtests.sh left in the image, as it left it; ``new-v2`` the same
    directory with the threads-N.log files our runner of the same program wrote (gzipped as
    mmtests keeps them), so the table compares two real runs of the upstream program."""
    base, new = (root / k / "iter-0" for k in KERNELS)
    for name, data in mm.logs.items():
        if name.startswith("mmtests/iter-0/"):
            dest = base / name.removeprefix("mmtests/iter-0/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    shutil.copytree(base, new)
    logs = new / suite / "logs"
    for old in logs.glob("threads-*.log.gz"):
        old.unlink()
    for name, data in plain.logs.items():
        if re.fullmatch(r"threads-\d+\.log", name):
            (logs / f"{name}.gz").write_bytes(gzip.compress(data))
    for it in (base, new):
        # compare-kernels' counts and locality modules by their own names (see
        # test_mmtests_ci_conformance: its -a switch selects nothing for thpcompact)
        for alias in ("counts", "locality"):
            (it / f"{suite}{alias}").symlink_to(suite)


def _base_faults(root: Path, suite: str) -> int:
    logs = root.glob(f"*/iter-0/{suite}/logs/threads-*.log.gz")
    lines = [ln for f in logs for ln in gzip.decompress(f.read_bytes()).splitlines()]
    return sum(ln.startswith(b"fault") and ln.split()[2:3] == [b"base"] for ln in lines)


def _fall_back_three_faults(upstream: dict[str, Path], root: Path, suite: str) -> None:
    """A guest whose every fault got a huge page (a small guest under TCG compacts easily)
    leaves thpcompact's fault-base-N rows a single 0, and the pinned compare-mmtests.pl dies
    on such a run (Compare.pm line 134 takes the interval of that row, which it has none of).
    That failure is checked; then the first three faults of each log are copied as base-page
    faults, in both kernels, so that the two tools compare a table with every row."""
    with pytest.raises(AssertionError, match="Compare.pm line 134"):
        _real(upstream, suite, root, ["-b", suite])
    for log in root.glob(f"*/iter-0/{suite}/logs/threads-*.log.gz"):
        lines = gzip.decompress(log.read_bytes()).splitlines(keepends=True)
        faults = [ln for ln in lines if ln.startswith(b"fault")][:3]
        extra = [ln.replace(b" huge ", b" base ", 1) for ln in faults]
        log.write_bytes(gzip.compress(b"".join([*lines, *extra])))
    assert _base_faults(root, suite)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("suite", SUITES)
def test_run_mmtests_in_the_image(monkeypatch, tmp_path, eng, upstream, suite):
    """mmtests' own run-mmtests.sh of the pinned commit in the Debian image, beside our
    runner of the same upstream program, in one boot of a debian-guest kernel: the same
    metric names, the files run-mmtests.sh itself leaves, the stored samples what mmtests'
    own extraction reads from those files, and our tables of the two runs the real
    compare-mmtests.pl's, byte for byte."""
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
    print(*problems, sep="\n")
    assert len(runs) == 2 and all(r.status == "done" for r in runs), problems
    plain, mm = sorted(runs, key=lambda r: "image" in r.job.params)
    names = {k for k in mm.samples if k.startswith(f"{suite}.")}
    assert names and names == {k for k in plain.samples if k.startswith(f"{suite}.")}
    assert mm.meta["upstream"]["commit"] == d.load(suite).upstream.commit
    assert "mmtests/iter-0/tests-timestamp" in mm.logs
    assert f"mmtests/iter-0/{suite}/logs/threads-1.log.gz" in mm.logs
    assert any(k.startswith(f"mmtests/iter-0/{suite}/logs/threads-1") and k.endswith(".time")
               for k in mm.logs), sorted(mm.logs)  # fmt: skip

    root = tmp_path / "log"
    _mmtests_dirs(root, suite, mm, plain)
    # the guest path's parse of mmtests' files is the importer's parse of mmtests' layout
    imported = {r.job.suite: r for r in mmtests_import.parse_run(root / KERNELS[0])}
    assert {k: v for k, v in imported[suite].samples.items() if k.startswith(f"{suite}.")} == {
        k: v for k, v in mm.samples.items() if k.startswith(f"{suite}.")
    }
    if suite == "thpcompact" and not _base_faults(root, suite):
        _fall_back_three_faults(upstream, root, suite)
    for case_suite, ours, theirs in CASES:
        if case_suite != suite:
            continue
        expected = _real(upstream, suite, root, theirs)
        got = _ours(root, ours)
        print(f"--- {suite} {' '.join(ours)}\n{got}")
        if "--monitor" in ours:  # monitors pad their last column; compared without it
            assert [ln.rstrip() for ln in got.splitlines()] == [
                ln.rstrip() for ln in expected.splitlines()
            ]
        else:
            assert got == expected, (ours, expected, got)
