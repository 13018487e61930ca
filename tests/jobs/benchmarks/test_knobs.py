"""System knobs and the scenario stage as job parameters: validation, identity, what the
guest gets, what collect() makes of the guest's read-back, and the fragmentation figures."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from test_collect import KERNEL, MACHINE, pass_log, write_run

from stackbench.errors import InputError
from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks import knobs
from stackbench.jobs.benchmarks.parsers import buddyinfo
from stackbench.jobs.executors.jobspecs import parse_job_spec

SEED_001 = (
    "stress-highalloc[thp_enabled=madvise,thp_defrag=madvise,"
    "vm.compaction_proactiveness=20,scenario=fill-free-3of4]"
)


def expand(job: d.JobDef) -> list[d.SubJob]:
    return d.expand(job, guest_mem_mb=1024, guest_cpus=2)


def test_knobs_are_params_of_any_job_and_name_the_lkp_job():
    sj = expand(parse_job_spec(SEED_001))[0]
    assert sj.params["thp_enabled"] == "madvise"
    assert sj.params["vm.compaction_proactiveness"] == 20
    # LKP's path_params: values sorted by key, so the job id carries the THP modes
    assert sj.name.endswith("-fill-free-3of4-madvise-madvise-20")
    assert sj.setup.knobs == {
        "thp_enabled": "madvise",
        "thp_defrag": "madvise",
        "vm.compaction_proactiveness": "20",
    }
    assert sj.resolved["SCENARIO"] == "fill-free-3of4"
    assert (sj.resolved["HOGGER_MB"], sj.resolved["BGLOAD"]) == (0, "none")
    # a scenario stage is part of the version; a job without knobs keeps its old identity
    plain = expand(parse_job_spec("stress-highalloc"))[0]
    assert sj.suite_version != plain.suite_version
    assert "thp_enabled" not in plain.params and plain.setup == knobs.SystemSetup()
    assert plain.suite_version == d.suite_version("stress-highalloc")


def test_list_valued_knobs_expand_like_any_param():
    subs = expand(parse_job_spec("thpscale[vm.compaction_proactiveness=0|20,thp_defrag=never]"))
    assert [s.setup.knobs["vm.compaction_proactiveness"] for s in subs] == ["0", "20"]
    assert len({s.name for s in subs}) == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("thpscale[thp_enabled=sometimes]", "params.thp_enabled: 'sometimes' is not one of"),
        ("thpscale[thp_defrag=1]", "params.thp_defrag: 1 is not one of"),
        ("thpscale[vm.compaction_proactiveness=-1]", "params.vm.compaction_proactiveness"),
        ("thpscale[vm.Bad-Name=1]", "params.vm.Bad-Name: unknown parameter for thpscale"),
        ("thpscale[scenario=spread-250-movable]", "params.scenario: 'spread-250-movable'"),
        ("thpscale[scenario=fill-free]", "params.scenario"),
        ("thpscale[hogger=0]", "params.hogger: 0 is less than the minimum of 1"),
        ("thpscale[bgload=make]", "params.bgload"),
        ("thpscale[cmdline=a;reboot]", "params.cmdline"),
        ("thpscale[kconfig=no-such-fragment]", "params.kconfig: no kernel config fragment"),
        ("stress-highalloc[order=11]", "params.order: 11 is greater than the maximum of 10"),
        ("stress-highalloc[passes=4]", "params.passes"),
    ],
)
def test_bad_knobs_are_one_line_errors(spec, message):
    with pytest.raises(InputError) as exc:
        parse_job_spec(spec)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_unknown_param_names_the_system_params_too():
    with pytest.raises(InputError, match=r"any job: thp_enabled, thp_defrag.*vm.<sysctl>"):
        parse_job_spec("thpscale[thp=always]")


def test_knob_files_for_the_guest():
    assert knobs.knobs_text({"vm.min_free_kbytes": "8192", "thp_enabled": "never"}) == (
        "thp_enabled /sys/kernel/mm/transparent_hugepage/enabled never\n"
        "vm.min_free_kbytes /proc/sys/vm/min_free_kbytes 8192\n"
    )
    text = knobs.all_paths_text([{"vm.extra_knob": "1"}, {}])
    assert "vm.extra_knob /proc/sys/vm/extra_knob\n" in text
    assert "khugepaged_defrag /sys/kernel/mm/transparent_hugepage/khugepaged/defrag\n" in text


def test_command_lines_of_one_boot():
    assert knobs.plan_cmdline(["movablecore=256M", "", "movablecore=256M nokaslr"]) == (
        "movablecore=256M nokaslr"
    )
    with pytest.raises(ValueError, match="'movablecore=256M' and 'movablecore=512M' in one boot"):
        knobs.plan_cmdline(["movablecore=256M", "movablecore=512M"])


def test_boot_setup_refuses_jobs_the_kernel_config_or_the_boot_cannot_serve(tmp_path):
    config = tmp_path / "config"
    config.write_text("CONFIG_COMPACTION=y\n# CONFIG_DEBUG_FS is not set\n")
    a = expand(parse_job_spec("thpscale[cmdline=movablecore=256M]"))[0]
    b = expand(parse_job_spec("thpscale[cmdline=movablecore=512M,max_threads=2]"))[0]
    ok = expand(parse_job_spec("thpscale[kconfig=tiny-guest,max_threads=3]"))[0]
    append, refused = knobs.boot_setup([a, b, ok], config)
    assert append == "movablecore=256M"
    why = dict((sj.name, reason) for sj, reason in refused)
    assert "'movablecore=256M' and 'movablecore=512M' in one boot" in why[b.name]
    # tiny-guest asks for much more than this config has
    assert why[ok.name].startswith("kconfig tiny-guest: CONFIG_")


def test_initramfs_carries_knobs_scenario_and_fragment(tmp_path):
    from stackbench.jobs.benchmarks.guest import initramfs

    subjobs = expand(parse_job_spec(SEED_001.replace("stress-highalloc", "thpscale")))
    out = initramfs.build_initramfs(tmp_path / "i.gz", subjobs, None, cache_dir=tmp_path / "bin")
    data = gzip.decompress(out.read_bytes())
    name = subjobs[0].name
    for entry in (
        b"stackbench/bin/fragment",
        b"stackbench/guest/scenario.sh",
        b"stackbench/knobs",
        f"stackbench/jobs/{name}.knobs".encode(),
        f"stackbench/jobs/{name}.cmdline".encode(),
    ):
        assert entry + b"\0" in data
    assert b"vm.compaction_proactiveness /proc/sys/vm/compaction_proactiveness 20\n" in data
    assert b"SCENARIO=fill-free-3of4\n" in data


# ---- collect ---------------------------------------------------------------------------------


BUDDY_FRESH = "Node 0, zone      DMA      1 1 1 1 1 1 1 1 1 1 2\n" + (
    "Node 0, zone    DMA32      2 3 4 5 6 7 8 9 10 11 200\n"
)
# every free page in blocks of order 7 and 8: nothing for a 2 MB allocation
BUDDY_FRAGMENTED = "Node 0, zone    DMA32      0 0 0 0 0 0 0 100 200 0 0\n"


def highalloc_run(root: Path, extra: dict[str, str | None]) -> c.RunData:
    sj = expand(parse_job_spec(SEED_001))[0]
    sj.resolved["PASSES"] = 1
    files = {
        "pass1.log": pass_log(3, 4),
        "knobs": "thp_enabled madvise\nthp_defrag madvise\nvm.compaction_proactiveness 20\n"
        "vm.min_free_kbytes 2\t8 0\n",
        "vmstat.scenario-before": "compact_daemon_migrate_scanned 5\ncompact_stall 1\n",
        "vmstat.before": "compact_daemon_migrate_scanned 905\ncompact_stall 3\n",
        "buddyinfo.scenario-before": BUDDY_FRESH,
        "buddyinfo.before": BUDDY_FRAGMENTED,
        "unusable_index.before": "Node 0, zone DMA32 0.000 0.000\n",
        "kcompactd.scenario-before": "(kcompactd0) 1 2\n",
        "kcompactd.before": "(kcompactd0) 40 213\n",
        "kcompactd.after": "(kcompactd0) 41 215\n",
        **extra,
    }
    write_run(root, sj, 0, files)
    return c.collect_run(root, sj, 0, kernel=KERNEL, machine=MACHINE)


def test_collect_stores_knobs_stages_and_fragmentation(tmp_path):
    r = highalloc_run(tmp_path, {})
    assert r.status == "done", r.error
    assert r.meta["knobs"]["vm.compaction_proactiveness"] == "20"
    assert r.sysstate["knobs"]["vm.min_free_kbytes"] == "2 8 0"
    assert r.samples["scenario-vmstat.compact_daemon_migrate_scanned"] == [900.0]
    assert r.samples["stress-highalloc.allocated-pass1"] == [3.0]
    assert r.samples["fragmentation.start.Node0-DMA32"] == [100.0]
    assert r.samples["fragmentation.scenario_start.Node0-DMA32"][0] < 10
    assert r.sysstate["scenario_start"]["/proc/buddyinfo"] == BUDDY_FRESH
    assert r.sysstate["start"]["/sys/kernel/debug/extfrag/unusable_index"].startswith("Node 0")
    # kcompactd's CPU time over the scenario stage and over the benchmark
    assert r.samples["scenario-kcompactd.cpu_s"] == [2.5]
    assert r.samples["kcompactd.cpu_s"] == [0.03]
    assert r.sysstate["start"]["kcompactd"] == "(kcompactd0) 40 213\n"
    frag = r.sysstate["fragmentation"]["start"]["Node0/DMA32"]
    assert frag["unusable_index"][9] == 1.0 and frag["unusable_index"][7] == 0.0
    # snapshots are state, not logs
    assert "knobs" in r.logs and not any(k.startswith("buddyinfo") for k in r.logs)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (
            {"knob-error": "knob vm.no_such: this kernel has no /proc/sys/vm/no_such\n"},
            "knob vm.no_such: this kernel has no /proc/sys/vm/no_such",
        ),
        (
            {"knobs": "thp_enabled always\nthp_defrag madvise\nvm.compaction_proactiveness 20\n"},
            "knob thp_enabled: asked for 'madvise', the kernel reads back 'always'",
        ),
        ({"knobs": None}, "knobs: the guest did not read the knobs back"),
        (
            {"scenario-error": "scenario: fragment: only 40000 kB available\n"},
            "scenario: fragment: only 40000 kB available",
        ),
        ({"buddyinfo.before": "Node 0 garbage\n"}, "line 1: not a buddyinfo line"),
    ],
)
def test_collect_fails_runs_whose_setup_went_wrong(tmp_path, extra, error):
    r = highalloc_run(tmp_path, extra)
    assert r.status == "failed"
    assert error in r.error


def test_fragmentation_figures_follow_the_kernel_definitions():
    counts = [0, 0, 0, 4, 0, 0, 0, 0, 0, 1, 0]  # 4 order-3 blocks, one 2 MB block
    assert buddyinfo.score(counts) == round(32 * 100 / 544, 2)
    assert buddyinfo.unusable_index(counts, 3) == 0.0
    assert buddyinfo.unusable_index(counts, 10) == 1.0
    assert buddyinfo.extfrag_index(counts, 9) == -1.0
    # order 10 fails: 544 free pages in 5 blocks; (1000 - (1000 + 531) // 5) / 1000
    assert buddyinfo.extfrag_index(counts, 10) == 0.694
    assert buddyinfo.score([0] * 11) == 0.0
    assert buddyinfo.extfrag_index([0] * 11, 3) == 0.0
    with pytest.raises(InputError, match="no zones"):
        buddyinfo.parse("\n")
