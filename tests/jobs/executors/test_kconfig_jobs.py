"""A job's kernel config fragment (``kconfig=NAME``) builds a kernel of its own: the config
name stacks the fragment over the series' config, so the build key, the artifact, the kernel
row and the runs differ from the kernel without it; a fragment the tree cannot honour is a
job error naming the fragment and the option."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from helpers.intake import submit_series

from stackbench.errors import NotFoundError
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.driver.local_executor import with_fragments
from stackbench.jobs.executors.jobspecs import parse_job_spec
from stackbench.jobs.executors.series_state import KernelTask
from stackbench.kernels import config


def expand(job: d.JobDef) -> list[d.SubJob]:
    return d.expand(job, guest_mem_mb=1024, guest_cpus=2)


def test_a_composed_config_stacks_the_job_fragment_over_the_base():
    name = config.compose("tiny-guest", "debug-vm")
    assert name == "tiny-guest+debug-vm"
    assert config.compose("tiny-guest", "") == "tiny-guest"
    assert config.fragment_names(name) == ["tiny-guest", "debug-vm"]
    wanted = config.wanted_values(name)
    assert wanted["CONFIG_DEBUG_VM"] == "y" and wanted["CONFIG_COMPACTION"] == "y"
    assert "CONFIG_DEBUG_VM" not in config.wanted_values("tiny-guest")
    # the base config keeps the digest it always had (its artifact index stays valid); the
    # stacked one is another build
    base = b"tinyconfig\0" + config.fragment_path("tiny-guest").read_bytes()
    assert config.fragment_digest("tiny-guest") == hashlib.sha256(base).hexdigest()
    assert config.fragment_digest(name) != config.fragment_digest("tiny-guest")
    with pytest.raises(NotFoundError, match="no kernel config fragment named 'nope'"):
        config.fragment_digest("tiny-guest+nope")


def _configs(tmp_path, monkeypatch, **fragments: str):
    d = tmp_path / "configs"
    d.mkdir()
    for name, text in fragments.items():
        (d / f"{name}.config").write_text(text)
    monkeypatch.setattr(config, "CONFIGS_DIR", d)


def test_check_names_the_fragment_and_why_an_option_is_missing(tmp_path, monkeypatch):
    _configs(
        tmp_path,
        monkeypatch,
        base="CONFIG_A=y\n",
        job="CONFIG_B=y\nCONFIG_GHOST=y\n# CONFIG_C is not set\n",
    )
    src = tmp_path / "src"
    (src / "mm").mkdir(parents=True)
    (src / "mm" / "Kconfig").write_text("config A\n\tbool\nmenuconfig B\n\tbool\nconfig C\n")
    final = tmp_path / ".config"
    final.write_text("CONFIG_A=y\n# CONFIG_B is not set\n")
    with pytest.raises(config.ConfigError) as err:
        config.check("base+job", final, src)
    msg = str(err.value)
    assert msg.startswith("config base+job: not honoured by the kernel's Kconfig: ")
    assert "fragment job: CONFIG_B=y requested, Kconfig gave unset (unmet dependencies?)" in msg
    assert "fragment job: CONFIG_GHOST=y requested, this tree has no such option" in msg
    assert "CONFIG_A" not in msg and "CONFIG_C" not in msg
    final.write_text("CONFIG_A=y\nCONFIG_B=y\nCONFIG_GHOST=y\n")
    config.check("base+job", final, src)


def test_jobs_with_a_fragment_run_on_their_own_kernels_only():
    plain = expand(parse_job_spec("thpscale[max_threads=2]"))
    debug = expand(parse_job_spec("thpscale[kconfig=debug-vm,max_threads=2]"))
    tasks = [KernelTask("base", "v6.1", "a" * 40), KernelTask("1/1", "1/1-bbbb", "b" * 40, 7)]
    out = with_fragments(tasks, plain + debug)
    assert [t.key for t in out] == [
        "a" * 40,
        "b" * 40,
        "a" * 40 + "+debug-vm",
        "b" * 40 + "+debug-vm",
    ]
    variant = out[3]
    assert (variant.name, variant.label, variant.patch_id) == (
        "1/1-bbbb+debug-vm",
        "1/1+debug-vm",
        7,
    )
    assert variant.config("tiny-guest") == "tiny-guest+debug-vm"
    assert out[0].config("tiny-guest") == "tiny-guest"
    assert [sj.name for sj in plain + debug if variant.runs_subjob(sj)] == [debug[0].name]
    assert [sj.name for sj in plain + debug if out[0].runs_subjob(sj)] == [plain[0].name]
    # when every job asks for the fragment, the kernels without it have nothing to run
    only = with_fragments(tasks, debug)
    assert [t.fragment for t in only] == ["debug-vm", "debug-vm"]


def test_the_fragment_is_in_the_run_provenance():
    sj = expand(parse_job_spec("thpscale[kconfig=debug-vm]"))[0]
    prov = sj.provenance()
    assert prov["kconfig"]["fragment"] == "debug-vm"
    assert "CONFIG_DEBUG_VM=y" in prov["kconfig"]["text"]
    assert "kconfig" not in expand(parse_job_spec("thpscale"))[0].provenance()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_fragment_the_tree_cannot_honour_fails_its_kernels_with_the_reason(
    eng, monkeypatch, tmp_path
):
    """Through the whole pipeline on the demo stack: the job's kernels fail at configuration
    (nothing is compiled), the series fails, and the reason names the fragment's options."""
    from helpers.kernelkit import require_kernel_tools, use_kernel_cache
    from sqlalchemy import select
    from sqlalchemy.orm import Session
    from test_pipeline_e2e import first_patch

    from stackbench.jobs.driver import pipeline
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.models import KernelBuild, Series

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    d = tmp_path / "configs"
    d.mkdir()
    shutil.copy(config.fragment_path("tiny-guest"), d / "tiny-guest.config")
    # CONFIG_INET needs CONFIG_NET, which tinyconfig leaves off: Kconfig drops it
    (d / "ghost.config").write_text("CONFIG_STACKBENCH_GHOST=y\nCONFIG_INET=y\n")
    monkeypatch.setattr(config, "CONFIGS_DIR", d)
    sid = submit_series(
        eng, first_patch("compaction-demo"), jobs=["thpscale[kconfig=ghost,max_threads=1]"], runs=1
    )
    assert pipeline.run_series(eng, sid, settings=Settings()) == "failed"
    with Session(eng) as s:
        series = s.get(Series, sid)
        rows = list(s.scalars(select(KernelBuild).where(KernelBuild.series_id == sid)))
    assert series.state == "failed"
    assert "v6.1-debian+ghost: build-failed (config tiny-guest+ghost: not honoured" in series.error
    assert "fragment ghost: CONFIG_STACKBENCH_GHOST=y requested, this tree has no such option" in (
        series.error
    )
    # both kernels of the series are the fragment's, each failed with the reason
    assert sorted(r.status for r in rows) == ["build-failed", "build-failed"]
    assert all(r.config_name == "tiny-guest+ghost" for r in rows)
    assert all("CONFIG_INET=y requested, Kconfig gave unset" in r.log for r in rows)


def test_a_kernel_artifact_whose_module_source_changed_rebuilds_the_module(tmp_path, monkeypatch):
    from stackbench.jobs.benchmarks import highalloc
    from stackbench.kernels import build

    src = tmp_path / "highalloc"
    shutil.copytree(highalloc.MODULE_DIR, src)
    monkeypatch.setattr(highalloc, "MODULE_DIR", src)
    art = tmp_path / "art"
    (art / "modules").mkdir(parents=True)
    (art / "config").write_text("CONFIG_MODULES=y\n")
    (art / "System.map").write_text("ffffffff81000000 T _stext\n")
    (art / "modules" / "stackbench_highalloc.ko").write_bytes(b"\x7fELF")
    stamp = highalloc._stamp_of((art / "config").read_text(), art / "System.map")
    (art / "modules" / highalloc.STAMP).write_text(stamp)
    assert highalloc.module_current(art)
    assert build._modules_ok(art, highalloc.build_module)
    with open(src / "stackbench_highalloc.c", "a") as fh:
        fh.write("/* changed */\n")
    assert not highalloc.module_current(art)
    assert not build._modules_ok(art, highalloc.build_module)
    # another builder's modules are its own business
    assert build._modules_ok(art, lambda s, o, d: d)
    (art / "modules" / highalloc.STAMP).unlink()
    assert not highalloc.module_current(art)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(3600)
def test_a_job_fragment_builds_boots_and_stays_apart(eng, monkeypatch, capsys):
    """The demo stack with one job on the series' kernels and the same job with
    kconfig=debug-vm: four kernels, the fragment's built with CONFIG_DEBUG_VM, each job run
    on its own, the fragment in the runs' provenance and in LKP's kconfig axis."""
    from helpers.kernelkit import require_kernel_tools, use_kernel_cache
    from sqlalchemy import select
    from sqlalchemy.orm import Session
    from test_pipeline_e2e import first_patch, runs_of

    from stackbench.jobs.driver import pipeline
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.models import Job, KernelBuild
    from stackbench.resultsdb.tables import render

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    job = "stress-highalloc[passes=1,load_fraction=0,alloc_fraction=0.05,pace_ms=0{}]"
    sid = submit_series(
        eng,
        first_patch("compaction-demo"),
        jobs=[job.format(""), job.format(",kconfig=debug-vm")],
        runs=1,
    )
    settings = Settings(cpus=2, mem_mb=1024, init_timeout_s=120)
    assert pipeline.run_series(eng, sid, settings=settings) == "done"
    with Session(eng) as s:
        rows = {
            k.name: k for k in s.scalars(select(KernelBuild).where(KernelBuild.series_id == sid))
        }
        jobs = {j.id: j for j in s.scalars(select(Job))}
    base, debug = rows["v6.1-debian"], rows["v6.1-debian+debug-vm"]
    assert len(rows) == 4 and debug.commit == base.commit
    assert (base.config_name, debug.config_name) == ("tiny-guest", "tiny-guest+debug-vm")
    assert base.config_hash != debug.config_hash
    assert "CONFIG_DEBUG_VM=y" in (Path(debug.artifact_path) / "config").read_text()
    assert "CONFIG_DEBUG_VM=y" not in (Path(base.artifact_path) / "config").read_text()
    for k, frag in ((base, None), (debug, "debug-vm")):
        runs = runs_of(eng, k.id)
        assert [r.status for r in runs] == ["done"], [r.error for r in runs]
        assert jobs[runs[0].job_id].params.get("kconfig") == frag
        assert (runs[0].meta.get("kconfig") or {}).get("fragment") == frag
    # the job with the fragment compared across the series' fragment kernels
    pair = sorted(n for n in rows if n.endswith("+debug-vm"))
    assert pair[1] == "v6.1-debian+debug-vm" and pair[0].startswith("1/1-")
    lkp = render.render(eng, [pair[1], pair[0]], style="lkp", all_rows=True)
    with capsys.disabled():
        print("\n" + lkp)
    assert "/tiny-guest+debug-vm/" in lkp
