"""The evidence boot's CPU profile, for real: the cached base kernel (tiny-guest) booted twice
under QEMU TCG through coverage_stage.evidence_boot, perf from Debian's linux-perf sampling
the guest's CPUs during vm-scalability's anon-w-seq, read back on the host against the
kernel's System.map. The two profiles are stored as the base and a patched kernel of a
stored series (the same kernel twice: an A/A), whose patch says it changes
do_huge_pmd_anonymous_page, the function every anonymous THP fault of the job runs.

Checked: every sampled kernel symbol is one of that kernel's System.map; the fault path
holds most of the samples; the moved-symbols section of ``compare --style stackbench``, the
comparison page, the series page and the JSON mark the patched function; a kernel built
without perf events says why it has no profile."""

from __future__ import annotations

import re

import pytest
from helpers.kernelkit import base_kernel, require_kernel_tools, use_kernel_cache
from helpers.web import app, changed_function, client, finished_series  # noqa: F401

from stackbench.jobs.benchmarks import perfprof
from stackbench.jobs.driver import lifecycle, pipeline
from stackbench.jobs.executors import coverage_stage, jobspecs, profile_stage
from stackbench.jobs.executors.series_state import KernelTask, SeriesRun
from stackbench.resultsdb import coverage_store, profile_store, query
from stackbench.resultsdb import db as rdb
from stackbench.resultsdb.models import KernelBuild, Patch
from stackbench.resultsdb.tables import render

pytestmark = pytest.mark.slow

VMS = "vm-scalability[test=anon-w-seq]"
PATCHED = "do_huge_pmd_anonymous_page"


@pytest.fixture
def kernel_env(monkeypatch):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    why = perfprof.available()
    if why:
        pytest.skip(why)


def _system_map_names(path) -> set[str]:
    return {line.split()[2] for line in path.read_text().splitlines() if len(line.split()) >= 3}


def test_the_evidence_boot_profiles_the_kernel_and_marks_the_patched_function(
    eng,
    kernel_env,
    monkeypatch,
    client,  # noqa: F811
) -> None:
    _repo, res = base_kernel(monkeypatch)
    settings = pipeline.Settings(cpus=2, mem_mb=1024, init_timeout_s=120, accel="tcg")
    plan = jobspecs.plan_for(jobspecs.resolve_jobs([VMS], 1), settings)
    task = KernelTask("base", "base", res.commit, build=res, outcome="built")
    sr = SeriesRun(None, settings, None)
    boots = [coverage_stage.evidence_boot(sr, task, plan, [PATCHED]) for _ in range(2)]
    names = _system_map_names(res.artifact_dir / "System.map")
    for counted in boots:
        (job, got), *_ = counted.items()
        prof = got["profile"]
        print(job, prof.get("error"), prof.get("samples"), list(prof.get("self", {}))[:8])
        assert not prof.get("error"), prof
        assert prof["samples"] > 100
        kernel_syms = [s for s in prof["self"] if s not in (perfprof.USER, perfprof.UNRESOLVED)]
        assert kernel_syms and set(kernel_syms) <= names, set(kernel_syms) - names
        assert set(prof["children"]) <= names
        # the job is anonymous THP faults: the fault path holds most of the time
        assert prof["children"][PATCHED] > 0.2, prof["children"].get(PATCHED)
        assert got["calls"][PATCHED] > 0

    # the two profiles stored as a series' base and its one patched kernel
    sid, build_ids = finished_series(eng, n=1)
    with rdb.session(eng) as s:
        patch = s.query(Patch).filter(Patch.series_id == sid).one()
        fn = changed_function(PATCHED, path="mm/huge_memory.c")
        coverage_store.save_functions(s, patch.id, [fn])
        for b, counted in zip(build_ids, boots, strict=True):
            for job, got in counted.items():
                coverage_store.save_counts(s, b, job, got)
                profile_stage.save(s, b, job, got)
        commits = [s.get(KernelBuild, b).commit for b in build_ids]
    with eng.connect() as conn:
        rows = profile_store.load(conn, query.kernels_by_id(conn, build_ids))
    assert len(rows) == 1 and rows[0].patched == [PATCHED]
    (moved,) = rows[0].jobs.values()
    marked = [r for r in moved if r.patched]
    assert [profile_store.function_of(r.symbol) for r in marked] == [PATCHED]
    assert not any(r.patched for r in moved if profile_store.function_of(r.symbol) != PATCHED)

    text = render.render(eng, commits, style="stackbench")
    print(text)
    section = text[text.index("== profile") :]
    assert re.search(r"samples \(base [\d,]+\)", section)
    assert re.search(r"\*perf-profile\.self\.cycles-pp\." + PATCHED + r"\b", section)
    assert section.count("*perf-profile") == 1

    key = lifecycle.publish_comparison(eng, sid)
    page = client.get(f"/compare/{key}").get_data(as_text=True)
    part = page[page.index('id="profile"') :]
    assert re.search(PATCHED + r'\S* <strong class="patched-mark">patched</strong>', part)
    assert part.count('class="patched-mark"') == 1
    doc = client.get(f"/api/comparisons/{key}").get_json()
    (jrow,) = doc["profile"]
    (jsyms,) = jrow["jobs"].values()
    assert [s["lkp"] for s in jsyms if s["patched"]] == [f"perf-profile.self.cycles-pp.{PATCHED}"]
    assert 'id="profile"' in client.get(f"/series/{sid}").get_data(as_text=True)


def test_a_kernel_without_perf_events_says_why(tmp_path) -> None:
    """The tiny guest's own reason when its kernel cannot run perf (no boot is needed)."""
    art = tmp_path / "art"
    art.mkdir()
    (art / "config").write_text("CONFIG_64BIT=y\n# CONFIG_PERF_EVENTS is not set\n")
    (art / "System.map").write_text("ffffffff81000000 T _text\n")
    system_map, why = profile_stage.symbols_for(art)
    assert system_map is None
    assert "CONFIG_PERF_EVENTS" in why and "cannot run perf" in why
    assert profile_stage.profile_of({}, why) == {"error": why}


def test_the_evidence_initramfs_carries_a_perf_that_runs_on_its_own_libraries(
    kernel_env, tmp_path
) -> None:
    """perf and what ldd lists, appended as a second archive: unpacked, the copied loader
    runs the copied perf on the copied libraries alone; a measured boot's image has none."""
    import subprocess

    from stackbench.jobs.benchmarks.guest.initramfs import build_initramfs, extract_initramfs
    from stackbench.jobs.executors.settings import Settings

    plan = jobspecs.plan_for(jobspecs.resolve_jobs([VMS], 1), Settings(accel="tcg"))
    for profile in (False, True):
        image = build_initramfs(tmp_path / f"{profile}.gz", plan, None, profile=profile)
        root = extract_initramfs(image, tmp_path / f"root-{profile}")
        assert (root / "init").is_file()
        assert (root / perfprof.GUEST_DIR / "perf").is_file() is profile
    p = tmp_path / "root-True" / perfprof.GUEST_DIR
    assert (p / "frequency").read_text().strip() == str(perfprof.FREQUENCY)
    out = subprocess.run(
        [p / "ld.so", "--library-path", p / "lib", p / "perf", "--version"],
        capture_output=True, text=True, env={"PATH": "/nonexistent", "LD_LIBRARY_PATH": ""},
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("perf version"), out.stderr
