"""thpchallenge and thpcompact as suites: their definitions, their builtin program and
runners on the host, their upstream programs built from the pinned mmtests commits (from
../shared/upstream's bundle) and run by our runners of mmtests' procedure, and the configs
our Debian-image runners hand to mmtests' own run-mmtests.sh. Logs of every source go
through the one thpscale parser (mmtests' rules) and must give the same metric names."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from test_suites import UPSTREAM, need_bundles, run_runner, stage

from stackbench import proc
from stackbench.errors import InputError
from stackbench.jobs.benchmarks import collect as c
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks import suites
from stackbench.jobs.benchmarks.guest import initramfs, mmtests_image
from stackbench.jobs.benchmarks.parsers import thpscale

BUSYBOX = shutil.which("busybox") or "/bin/busybox"
MB = 1 << 20
SUITES = ("thpchallenge", "thpcompact")
COMMITS = {
    "thpchallenge": "638401e07e70d67fa5a1e6295e1315ae0af831b2",
    "thpcompact": "526d31382fe0d067fbe69a15a913bd8c315abf39",
}


def _job(suite: str, **params) -> d.JobDef:
    return d.parse({"suite": suite, "params": {**params, "suite_source": "builtin"}}, path="x")


# ---- definitions ------------------------------------------------------------------------------


def test_shipped_definitions_expand_for_the_tiny_guest():
    got = {}
    for suite in SUITES:
        defn = d.load(suite)
        assert defn.suite == suite and defn.upstream.commit == COMMITS[suite]
        (sj,) = d.expand(defn, guest_mem_mb=1024, guest_cpus=2)
        got[suite] = (sj.name, sj.params, sj.resolved)
    assert got["thpchallenge"] == (
        "thpchallenge.0-0.3-4",
        {"max_threads": 4, "mapsize_fraction": 0.3, "madvise": False},
        {"THREADS": "1 3 4", "MAP_PERMILLE": 300, "MADVISE": 0},
    )
    assert got["thpcompact"][0] == "thpcompact.0.3-0.075-0-4"
    assert got["thpcompact"][2] == {
        "THREADS": "1 3 4",
        "ANON_PERMILLE": 300,
        "FILE_PERMILLE": 75,
        "MADVISE": 0,
    }


def test_defaults_are_mmtests_own():
    (ch,) = d.expand(_job("thpchallenge"), guest_mem_mb=8192, guest_cpus=2)
    (co,) = d.expand(_job("thpcompact"), guest_mem_mb=8192, guest_cpus=2)
    # 4 x CPUs threads, 0.8 of memory, the file a quarter of the anonymous size, no madvise
    assert ch.resolved == {"THREADS": "1 3 5 7 8", "MAP_PERMILLE": 800, "MADVISE": 0}
    assert co.resolved["ANON_PERMILLE"] == 800 and co.resolved["FILE_PERMILLE"] == 200


@pytest.mark.parametrize(
    ("suite", "params", "message"),
    [
        ("thpchallenge", {"mapsize_fraction": 0.01}, r"params\.mapsize_fraction: .* need 8 MB"),
        ("thpcompact", {"anon_fraction": 0.01}, r"params\.anon_fraction: .* need 8 MB"),
        ("thpcompact", {"mapsize_fraction": 0.3}, r"params\.mapsize_fraction: unknown parameter"),
        ("thpchallenge", {"madvise": "yes"}, r"params\.madvise: 'yes' is not of type 'boolean'"),
    ],
)
def test_bad_parameters_are_one_clear_error(suite, params, message):
    with pytest.raises(InputError, match=message):
        d.expand(_job(suite, **params), guest_mem_mb=1024, guest_cpus=2)


# ---- builtin program and runners on the host -------------------------------------------------


@pytest.fixture(scope="module")
def thpfaults(tmp_path_factory):
    return initramfs.compile_programs(tmp_path_factory.mktemp("guest-bin"))["thpfaults"]


def _builtin_env(tmp_path, thpfaults) -> dict[str, str]:
    sbin, out, work = tmp_path / "bin", tmp_path / "out", tmp_path / "work"
    for p in (sbin, out, work):
        p.mkdir()
    shutil.copy(thpfaults, sbin / "thpfaults")
    return {"THREADS": "1 2", "MADVISE": "1", "SB_BIN": str(sbin), "SB_WORK": str(work),
            "SB_OUT": str(out), "MAP_PERMILLE": "1", "MAP_BYTES": str(32 * MB),
            "ANON_PERMILLE": "1", "ANON_BYTES": str(32 * MB), "FILE_PERMILLE": "1",
            "FILE_BYTES": str(8 * MB)}  # fmt: skip


@pytest.mark.parametrize("suite", SUITES)
def test_builtin_runner_logs_parse_with_mmtests_rules(thpfaults, tmp_path, suite):
    env = _builtin_env(tmp_path, thpfaults)
    res = proc.run([BUSYBOX, "sh", d.GUEST_DIR / f"run-{suite}.sh"], env=env, timeout=120)
    assert res.returncode == 0, res.stdout
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["threads-1.log", "threads-2.log"]
    assert list((tmp_path / "work").iterdir()) == []
    text = (out / "threads-2.log").read_text()
    # mmtests' format: fileinit lines only where a file is read (thpcompact)
    assert ("fileinit 1 " in text) == (suite == "thpcompact")
    # every thread faults half its share: 32 MB / 2 threads / 2 MB / 2 = 4 faults each
    sj = d.expand(_job(suite, max_threads=2), guest_mem_mb=1024, guest_cpus=1)[0]
    samples = c.samples_thpscale(out, sj)
    assert len(samples[f"{suite}.fault-both-2"]) == 8
    assert len(samples[f"{suite}.fault-both-1"]) == 8
    assert 0 <= samples[f"{suite}.Percentage huge-1"][0] <= 100


def test_thpfaults_refuses_bad_arguments(thpfaults, tmp_path):
    for argv in (["challenge", "0", "1000000", "0"], ["compact", "1", "1", "1", "f", "0"], []):
        res = proc.run([thpfaults, *argv], check=False, timeout=30)
        assert res.returncode == 2
        assert "thpfaults" in res.stdout + res.stderr


def test_a_log_cut_short_fails_the_run(thpfaults, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "threads-1.log").write_text("Running with 1 thread\n\nanoninit 0 12\n")
    sj = d.expand(_job("thpchallenge", max_threads=1), guest_mem_mb=1024, guest_cpus=1)[0]
    with pytest.raises(c.RunFailed, match=r"threads-1\.log: no fault lines \(thpchallenge"):
        c.samples_thpscale(out, sj)


# ---- upstream programs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    need_bundles()
    home = tmp_path_factory.mktemp("suites-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STACKBENCH_HOME", str(home))
        mp.setenv(suites.MIRROR_ENV, str(UPSTREAM))
        return {s: suites.build(s, d.load(s).upstream) for s in SUITES}


@pytest.mark.parametrize("suite", SUITES)
def test_upstream_logs_parse_like_builtin(built, thpfaults, tmp_path, suite):
    files = built[suite]
    assert list(files) == [f"{suite}/{suite}"]
    up = stage(files, tmp_path / "upstream")
    benv = _builtin_env(tmp_path, thpfaults)
    uout = tmp_path / "uout"
    uout.mkdir()
    res = run_runner(
        f"run-{suite}-upstream.sh", {**benv, "SB_OUT": str(uout), "SB_UPSTREAM": str(up)}
    )
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(uout.iterdir()))
    assert res.returncode == 0, res.stdout + res.stderr + logs
    assert re.search(r"^Starting (thpchallenge )?2/2", res.stdout, re.M), res.stdout
    assert sorted(p.name for p in uout.iterdir()) == ["threads-1.log", "threads-2.log"]
    assert list((tmp_path / "work").iterdir()) == []
    res = proc.run([BUSYBOX, "sh", d.GUEST_DIR / f"run-{suite}.sh"], env=benv, timeout=120)
    assert res.returncode == 0
    upstream, builtin = thpscale.parse_dir(uout), thpscale.parse_dir(tmp_path / "out")
    assert set(upstream) == set(builtin)
    # the same sizes give the same number of faults
    for n in (1, 2):
        assert len(upstream[f"fault-both-{n}"]) == len(builtin[f"fault-both-{n}"])


# upstream's program as a script that dies of SIGSEGV on its first CRASHES calls (the
# thread-stack race of docs/suites.md "Known limits"), then writes a log naming its call
FAKE_UPSTREAM = """#!/bin/sh
n=$(($(cat "$CALLS" 2>/dev/null || echo 0) + 1))
echo "$n" > "$CALLS"
[ "$n" -gt "$CRASHES" ] || kill -SEGV $$
echo "call $n threads $1"
"""


@pytest.mark.parametrize("suite", ("thpscale", "thpcompact"))
@pytest.mark.parametrize("crashes", (1, 2))
def test_upstream_runner_runs_a_thread_count_killed_by_sigsegv_once_more(tmp_path, suite, crashes):
    prog = tmp_path / "upstream" / suite / suite
    prog.parent.mkdir(parents=True)
    prog.write_text(FAKE_UPSTREAM)
    prog.chmod(0o755)
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {"THREADS": "2", "MADVISE": "1", "SB_WORK": str(work), "SB_OUT": str(out),
           "SB_UPSTREAM": str(prog.parent.parent), "CALLS": str(tmp_path / "calls"),
           "CRASHES": str(crashes), "MAP_PERMILLE": "1", "MAP_BYTES": str(4 * MB),
           "ANON_PERMILLE": "1", "ANON_BYTES": str(4 * MB), "FILE_PERMILLE": "1",
           "FILE_BYTES": str(2 * MB)}  # fmt: skip
    res = run_runner(f"run-{suite}-upstream.sh", env)
    assert (tmp_path / "calls").read_text() == "2\n"  # never a third call
    # proc.run gives the runner's stderr in stdout
    assert f"{suite}: 2 threads crashed (SIGSEGV, upstream's stack race)" in res.stdout
    assert res.stdout.count("Starting 2/2") == 2
    assert list(work.iterdir()) == []
    if crashes == 1:
        assert res.returncode == 0, res.stdout
        assert (out / "threads-2.log").read_text() == "call 2 threads 2\n"
        assert "failed" not in res.stdout
    else:
        assert res.returncode == 1
        assert f"{suite}: 2 threads failed (exit 139)" in res.stdout


# ---- the Debian image's runners -----------------------------------------------------------------


def _mmtests_tree(tmp_path, suite: str):
    need_bundles()
    tree = tmp_path / "mmtests"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(UPSTREAM / "mmtests.bundle"), tree],
                   check=True)  # fmt: skip
    subprocess.run(["git", "-C", tree, "checkout", "-q", "--detach", COMMITS[suite]], check=True)
    return tree


@pytest.mark.parametrize("suite", SUITES)
def test_image_runner_config_names_what_mmtests_reads(tmp_path, suite):
    """The image runner's config (run-mmtests.sh is run in the image, not here): every
    variable it exports is one the pinned commit's benchmark script or driver reads, the
    benchmark is the one the commit ships, and the install directory it pre-fills is the
    one the bench script checks."""
    runner = (d.GUEST_DIR / mmtests_image.RUNNERS[suite]).read_text()
    config = runner.split("stackbench.config << EOF2\n", 1)[1].split("\nEOF2\n", 1)[0]
    exported = re.findall(r"^export ([A-Z_]+)=", config, re.M)
    assert exported[0] == "MMTESTS" and f'MMTESTS="{suite}"' in config
    tree = _mmtests_tree(tmp_path, suite)
    bench = tree / "shellpack_src" / "src" / suite / f"{suite}-bench"
    readers = bench.read_text() + (tree / "drivers" / f"driver-{suite}.sh").read_text()
    for var in exported:
        if var in ("MMTESTS", "RUN_MONITOR"):
            assert var in (tree / "run-mmtests.sh").read_text()
        else:
            assert var in readers, f"{var} is read by neither {bench.name} nor its driver"
    assert f"check_install_required{'_continue' if suite == 'thpchallenge' else ''} {suite}-" in (
        bench.read_text()
    )
    # the runner library pre-fills the install directory of the suite it is given
    library = (d.GUEST_DIR / mmtests_image.LIBRARY).read_text()
    assert re.search(rf"^mmtests_install {suite}\b", runner, re.M)
    assert "work/sources/$suite-0-installed" in library
    assert mmtests_image.LIBRARY in initramfs.RUNNERS
    assert re.search(rf"^###SHELLPACK preamble {suite}-bench 0$", bench.read_text(), re.M)
    for script in (mmtests_image.RUNNERS[suite], mmtests_image.LIBRARY):
        res = proc.run(["sh", "-n", d.GUEST_DIR / script], check=False)
        assert res.returncode == 0, res.stderr


def test_image_jobs_take_their_suite_runner(monkeypatch, tmp_path):
    monkeypatch.setenv(suites.MIRROR_ENV, str(need_bundles()))
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path))
    suites._reachable.cache_clear()
    for suite in SUITES:
        defn = d.load(suite)
        data = {"suite": suite, "params": {**defn.params, "image": "debian"},
                "upstream": {"url": defn.upstream.url, "commit": defn.upstream.commit}}  # fmt: skip
        (sj,) = d.expand(d.parse(data, path="x"), guest_mem_mb=1024, guest_cpus=2)
        assert sj.resolved["SB_RUNNER"] == f"run-{suite}-mmtests.sh"
        assert sj.setup.kconfig == mmtests_image.KCONFIG
        assert COMMITS[suite] in sj.suite_version and "+debian-" in sj.suite_version
