"""Upstream suites as a job's source (jobs/benchmarks/suites.py): choosing the source, fetching a pinned
commit, building static binaries, and running the upstream runners on the host with tiny
sizes through the same parsers as the builtin programs.

The upstream sources come from the git bundles in ../shared/upstream (the tests that need
them skip, with the reason, where that folder is absent); the failure paths use small git
repositories made here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SHARED

from stackbench import proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks import suites
from stackbench.jobs.benchmarks.guest import initramfs
from stackbench.jobs.benchmarks.parsers import thpscale, vm_scalability
from stackbench.jobs.executors.boot_stage import run_kernel
from stackbench.jobs.executors.jobspecs import parse_job_spec, plan_for
from stackbench.jobs.executors.settings import Settings

UPSTREAM = SHARED / "upstream"
VMS_COMMIT = "96c94369e0cb36933c462c400a0e9e01f1caaf49"
MMTESTS_COMMIT = "b0b1d143bba3c6e0bb28995997bfe1db96b37779"
MB = 1 << 20
BUSYBOX = shutil.which("busybox") or "/bin/busybox"


def need_bundles() -> Path:
    if not (UPSTREAM / "vm-scalability.bundle").is_file():
        pytest.skip(f"upstream bundles not present: {UPSTREAM} (../shared is not beside us)")
    return UPSTREAM


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No mirror, and both repositories pointed at paths that do not exist."""
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(suites.MIRROR_ENV, raising=False)
    monkeypatch.setenv("STACKBENCH_SUITE_URL_VM_SCALABILITY", str(tmp_path / "nowhere.git"))
    monkeypatch.setenv("STACKBENCH_SUITE_URL_MMTESTS", str(tmp_path / "nowhere.git"))
    suites._reachable.cache_clear()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both upstream suites fetched from the bundles and built, once for the module."""
    need_bundles()
    home = tmp_path_factory.mktemp("suites-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STACKBENCH_HOME", str(home))
        mp.setenv(suites.MIRROR_ENV, str(UPSTREAM))
        vms = suites.build("vm-scalability", d.load("vm-scalability").upstream)
        thp = suites.build("thpscale", d.load("thpscale").upstream)
    return {"home": home, "vm-scalability": vms, "thpscale": thp}


@pytest.fixture
def mirror(monkeypatch, built):
    monkeypatch.setenv("STACKBENCH_HOME", str(built["home"]))
    monkeypatch.setenv(suites.MIRROR_ENV, str(UPSTREAM))
    for var in ("STACKBENCH_SUITE_URL_VM_SCALABILITY", "STACKBENCH_SUITE_URL_MMTESTS"):
        monkeypatch.delenv(var, raising=False)
    suites._reachable.cache_clear()


def expand(spec: str) -> list[d.SubJob]:
    return plan_for([parse_job_spec(spec, 1)], Settings())


# ---- choosing the source --------------------------------------------------------------------


def test_definitions_pin_the_upstream_commits():
    assert d.load("vm-scalability").upstream.commit == VMS_COMMIT
    assert d.load("thpscale").upstream.commit == MMTESTS_COMMIT
    assert d.load("thpscale").upstream.repo == "mmtests"
    assert d.load("stress-highalloc").upstream is None


def test_offline_default_is_builtin_with_the_old_identity(offline):
    (sj,) = expand("vm-scalability[test=anon-w-seq]")
    assert sj.suite_source == "builtin"
    assert "suite_source" not in sj.params
    assert sj.suite_version == d.suite_version("vm-scalability")
    # the definition's size (512M, jobs/benchmarks/defs/vm-scalability.yaml) is part of the name
    assert sj.name == "vm-scalability.0.125-100%-30s-512M-anon-w-seq"
    assert "SB_RUNNER" not in sj.resolved


def test_upstream_asked_offline_is_one_clear_error(offline, tmp_path):
    with pytest.raises(InputError) as exc:
        expand("thpscale[suite_source=upstream]")
    msg = str(exc.value)
    assert "suite_source=upstream" in msg and str(tmp_path / "nowhere.git") in msg
    assert "suite_source=builtin runs offline" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("thpscale[suite_source=bundled]", "params.suite_source: 'bundled' is not one of"),
        ("stress-highalloc[suite_source=upstream]", "params.suite_source: unknown parameter"),
    ],
)
def test_bad_suite_source_is_refused(offline, spec, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        expand(spec)


def test_bad_upstream_block_is_refused():
    data = {"suite": "thpscale", "params": {}, "upstream": {"url": "x", "commit": "b0b1d143"}}
    with pytest.raises(InputError, match=r"upstream\.commit: 'b0b1d143' does not match"):
        d.parse(data)


def test_with_the_mirror_upstream_is_the_default_and_never_shares_a_job(mirror):
    up, builtin = expand("vm-scalability[test=anon-w-seq,suite_source=upstream|builtin]")
    (default,) = expand("vm-scalability[test=anon-w-seq]")
    assert default.suite_source == up.suite_source == "upstream"
    assert builtin.suite_source == "builtin"
    assert up.params["suite_source"] == "upstream" and "suite_source" not in builtin.params
    assert up.suite_version.startswith(f"upstream-1+{VMS_COMMIT}+")
    assert up.resolved["SB_RUNNER"] == "run-vm-scalability-upstream.sh"
    assert up.name != builtin.name
    a, b = up.job_spec(), builtin.job_spec()
    assert (a.params, a.suite_version) != (b.params, b.suite_version)
    (thp,) = expand("thpscale")
    assert MMTESTS_COMMIT in thp.suite_version


# ---- fetching and building ------------------------------------------------------------------


def make_repo(path: Path) -> str:
    proc.run(["git", "init", "-q", path])
    (path / "README").write_text("not a suite\n")
    proc.run(["git", "-C", path, "add", "README"])
    proc.run(["git", "-C", path, "-c", "user.name=t", "-c", "user.email=t@t",
              "commit", "-qm", "one"])  # fmt: skip
    return proc.run(["git", "-C", path, "rev-parse", "HEAD"]).stdout.strip()


def test_fetch_caches_by_commit_and_names_a_missing_commit(monkeypatch, tmp_path):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    repo = tmp_path / "thing.git"
    head = make_repo(repo)
    got = suites.fetch(suites.Upstream(url=str(repo), commit=head))
    assert (got / "README").read_text() == "not a suite\n"
    assert got == suites.checkout_dir(suites.Upstream(url=str(repo), commit=head))
    shutil.rmtree(repo)  # from the cache now: the source may go away
    assert suites.fetch(suites.Upstream(url=str(repo), commit=head)) == got
    assert suites.available(suites.Upstream(url=str(repo), commit=head)) == (True, "")

    make_repo(repo)
    missing = "0" * 40
    with pytest.raises(StackbenchError, match=f"thing: .* has no commit {missing}"):
        suites.fetch(suites.Upstream(url=str(repo), commit=missing))
    assert not suites.checkout_dir(suites.Upstream(url=str(repo), commit=missing)).exists()
    assert [p.name for p in (tmp_path / "home" / "suites").iterdir()] == [f"thing-{head}"]


def test_fetch_from_an_unreachable_url_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    up = suites.Upstream(url=str(tmp_path / "gone.git"), commit="1" * 40)
    ok, why = suites.available(up)
    assert not ok and "does not exist" in why
    with pytest.raises(StackbenchError, match="gone: cannot fetch"):
        suites.fetch(up)


def test_a_source_that_does_not_build_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    repo = tmp_path / "vm-scalability.git"
    head = make_repo(repo)  # no Makefile, no usemem.c
    with pytest.raises(StackbenchError, match="vm-scalability: building usemem failed"):
        suites.build("vm-scalability", suites.Upstream(url=str(repo), commit=head))
    cached = suites.cache_root() / f"vm-scalability-{head}"
    assert [p.name for p in cached.iterdir()] == ["src"]  # no half-built directory left


def test_upstream_binaries_are_static_and_cached(built, mirror):
    usemem = built["vm-scalability"]["vm-scalability/usemem"]
    thp = built["thpscale"]["thpscale/thpscale"]
    assert initramfs.is_static_elf(usemem) and initramfs.is_static_elf(thp)
    assert "vm-scalability/hw_vars" in built["vm-scalability"]
    assert len([k for k in built["vm-scalability"] if "/case-" in k]) > 60
    mtime = usemem.stat().st_mtime_ns
    assert (
        suites.build("vm-scalability", d.load("vm-scalability").upstream) == built["vm-scalability"]
    )
    assert usemem.stat().st_mtime_ns == mtime


def test_initramfs_carries_the_upstream_suite_for_upstream_jobs(built, mirror, tmp_path):
    plan = expand("vm-scalability[test=anon-w-seq,suite_source=upstream|builtin]")
    out = initramfs.build_initramfs(tmp_path / "i.gz", plan, None, cache_dir=tmp_path / "bin")
    listing = proc.run(["sh", "-c", f"zcat {out} | cpio -t --quiet"]).stdout.split()
    assert "stackbench/upstream/vm-scalability/usemem" in listing
    assert "stackbench/upstream/vm-scalability/case-anon-w-seq" in listing
    assert "stackbench/guest/run-vm-scalability-upstream.sh" in listing
    assert "stackbench/guest/upstream-bin/log_test" in listing
    assert "stackbench/bin/usemem" in listing  # the builtin job's program
    env = initramfs.env_text(plan[0])
    assert "SB_RUNNER=run-vm-scalability-upstream.sh" in env and VMS_COMMIT in env
    (builtin_only,) = expand("vm-scalability[test=anon-w-seq,suite_source=builtin]")
    assert initramfs.upstream_files([builtin_only]) == {}


# ---- the upstream runners on the host -------------------------------------------------------


def stage(files: dict[str, Path], dest: Path) -> Path:
    for rel, path in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / rel)
    return dest


def run_runner(script: str, env: dict[str, str]):
    full = {"SB_HOST_TEST": "1", "SB_GUEST": str(d.GUEST_DIR), **env}
    return proc.run([BUSYBOX, "sh", d.GUEST_DIR / script], env=full, check=False, timeout=120)


def test_upstream_vm_scalability_case_parses_like_builtin(built, tmp_path):
    up = stage(built["vm-scalability"], tmp_path / "upstream")
    work = tmp_path / "work"
    work.mkdir()
    env = {"TEST": "anon-w-seq", "NR_TASK": "2", "RUNTIME_S": "60", "SIZE_BYTES": "0",
           "MEM_PERMILLE": "1", "MEM_BYTES": str(8 * MB), "SB_WORK": str(work),
           "SB_UPSTREAM": str(up)}  # fmt: skip
    res = run_runner("run-vm-scalability-upstream.sh", env)
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert lines[0].endswith("  ./case-anon-w-seq"), lines[0]
    assert "./usemem --runtime 60 -n 2 2097152" in lines[1]  # LKP's log_test of usemem
    stats = dict(vm_scalability.parse(res.stdout))
    assert stats["throughput"] > 0
    # 2 tasks x unit_size/nr_task = 2 MB asked; upstream usemem counts a little more
    assert 2 * 2 * MB / 1024 <= stats["workload"] < 2 * 3 * MB / 1024
    # the builtin programs and runner on the same sizes give the same stat names
    sbin, cases = tmp_path / "sbin", tmp_path / "cases"
    sbin.mkdir()
    cases.mkdir()
    for name, path in initramfs.compile_programs(tmp_path / "bin").items():
        shutil.copy(path, sbin / name)
    for case in (d.WORKLOADS_DIR / "cases").glob("case-*.sh"):
        shutil.copy(case, cases / case.stem)
    benv = {**env, "SB_BIN": str(sbin), "SB_CASES": str(cases)}
    res = proc.run([BUSYBOX, "sh", d.GUEST_DIR / "run-vm-scalability.sh"], env=benv, timeout=120)
    assert [k for k, _ in vm_scalability.parse(res.stdout)] == list(stats)


def test_upstream_vm_scalability_repeats_per_unit_of_size(built, tmp_path):
    up = stage(built["vm-scalability"], tmp_path / "upstream")
    env = {"TEST": "anon-w-seq", "NR_TASK": "1", "RUNTIME_S": "60", "SIZE_BYTES": str(12 * MB),
           "MEM_PERMILLE": "1", "MEM_BYTES": str(8 * MB), "SB_WORK": str(tmp_path),
           "SB_UPSTREAM": str(up)}  # fmt: skip
    res = run_runner("run-vm-scalability-upstream.sh", env)
    assert res.returncode == 0, res.stdout
    assert "repeat count: 3" in res.stdout
    assert res.stdout.count("  ./case-anon-w-seq\n") == 3


def test_upstream_vm_scalability_missing_case_fails_the_run(built, tmp_path):
    up = stage(built["vm-scalability"], tmp_path / "upstream")
    env = {"TEST": "no-such-case", "NR_TASK": "1", "RUNTIME_S": "5", "SIZE_BYTES": "0",
           "MEM_PERMILLE": "1", "MEM_BYTES": str(8 * MB), "SB_WORK": str(tmp_path),
           "SB_UPSTREAM": str(up)}  # fmt: skip
    res = run_runner("run-vm-scalability-upstream.sh", env)
    assert res.returncode != 0
    assert "case-no-such-case" in res.stdout


def test_upstream_thpscale_logs_parse_like_builtin(built, tmp_path):
    up = stage(built["thpscale"], tmp_path / "upstream")
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {"THREADS": "1 2", "MAP_PERMILLE": "1", "MAP_BYTES": str(16 * MB), "MADVISE": "1",
           "SB_WORK": str(work), "SB_OUT": str(out), "SB_UPSTREAM": str(up)}  # fmt: skip
    res = run_runner("run-thpscale-upstream.sh", env)
    assert res.returncode == 0, res.stdout
    assert "Creating file" in res.stdout and "Starting 2/2" in res.stdout
    assert sorted(p.name for p in out.iterdir()) == ["threads-1.log", "threads-2.log"]
    assert list(work.iterdir()) == []  # the work file is removed
    text = (out / "threads-2.log").read_text()
    assert "fault 1 " in text, text[:400]
    names = set(thpscale.parse_dir(out))
    assert {"fault-both-1", "fault-both-2"} <= names or {"fault-both-1"} & names, names
    # the builtin program and runner, same sizes: the same metric names
    builtin = initramfs.compile_programs(tmp_path / "bin")["thpfaults"]
    sbin, bout = tmp_path / "sbin", tmp_path / "bout"
    sbin.mkdir()
    bout.mkdir()
    shutil.copy(builtin, sbin / "thpfaults")
    benv = {**env, "SB_BIN": str(sbin), "SB_OUT": str(bout)}
    res = proc.run([BUSYBOX, "sh", d.GUEST_DIR / "run-thpscale.sh"], env=benv, timeout=120)
    assert names == set(thpscale.parse_dir(bout))


def test_run_kernel_fails_upstream_jobs_whose_source_does_not_build(monkeypatch, tmp_path):
    from stackbench.resultsdb.rundata import KernelSpec

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    repo = tmp_path / "vm-scalability.git"
    head = make_repo(repo)  # a repository without usemem
    job = d.parse({
        "suite": "vm-scalability", "runs": 2,
        "params": {"test": "anon-w-seq", "suite_source": "upstream"},
        "upstream": {"url": str(repo), "commit": head},
    })  # fmt: skip
    plan = d.expand(job, guest_mem_mb=1024, guest_cpus=2)
    bzimage = tmp_path / "bzImage"
    bzimage.write_bytes(b"never booted")
    res, runs = run_kernel(
        bzimage, {}, plan, kernel=KernelSpec(commit="c" * 40),
        settings=Settings(accel="tcg"), workdir=tmp_path / "vm", boot_id="b1",
    )  # fmt: skip
    assert res is None  # nothing left to boot
    assert [(r.iteration, r.status) for r in runs] == [(0, "failed"), (1, "failed")]
    assert f"upstream vm-scalability at {head[:12]}:" in runs[0].error
    assert "building usemem failed" in runs[0].error
    assert runs[0].meta["suite_source"] == "upstream"
    assert runs[0].meta["upstream"] == {"url": str(repo), "commit": head}
    assert not (tmp_path / "vm").exists()


def test_upstream_and_builtin_runs_of_one_job_are_never_pooled(eng, monkeypatch, tmp_path):
    from stackbench.resultsdb.ingest import ingest
    from stackbench.resultsdb.rundata import KernelSpec, MachineSpec, RunData
    from stackbench.resultsdb.tables import render

    monkeypatch.delenv("STACKBENCH_SUITE_URL_VM_SCALABILITY", raising=False)
    monkeypatch.delenv(suites.MIRROR_ENV, raising=False)
    repo = tmp_path / "vm-scalability.git"
    head = make_repo(repo)  # reachable, so upstream may be asked for (nothing is built here)
    params = {"test": "anon-w-seq", "suite_source": ["upstream", "builtin"]}
    job = d.parse({"suite": "vm-scalability", "params": params,
                   "upstream": {"url": str(repo), "commit": head}})  # fmt: skip
    up, builtin = d.expand(job, guest_mem_mb=1024, guest_cpus=2)
    kernel = KernelSpec(commit="a" * 40, name="base")
    machine = MachineSpec(name="qemu-x", kind="qemu")
    runs = [
        RunData(job=sj.job_spec(), kernel=kernel, machine=machine, iteration=i,
                samples={"vm-scalability.throughput": [value]}, meta=sj.provenance())
        for sj, values in ((up, (1000, 1002)), (builtin, (5000, 5004)))
        for i, value in enumerate(values)
    ]  # fmt: skip
    ingest(eng, runs)
    warnings: list[str] = []
    out = render.render(eng, ["base"], style="lkp", all_rows=True, warn=warnings.append)
    assert warnings == []
    groups = [g for g in out.split("=" * 40) if "throughput" in g]
    assert len(groups) == 2, out
    up_group = next(g for g in groups if "suite_source" in g)
    bi_group = next(g for g in groups if "suite_source" not in g)
    assert head[:12] in up_group and "1001" in up_group and "5002" not in up_group
    assert "5002" in bi_group and "1001" not in bi_group


def thpscale_runs(up_version: str) -> list:
    from stackbench.resultsdb import ingest as ig

    out = []
    jobs = (
        (ig.JobSpec("thpscale", "thpscale", {"max_threads": 1, "suite_source": "upstream"},
                    up_version), 1000.0),
        (ig.JobSpec("thpscale", "thpscale", {"max_threads": 1},
                    d.suite_version("thpscale")), 5000.0),
    )  # fmt: skip
    for job, level in jobs:
        for it in range(2):
            faults = [level + it, level + 10 + it, level + 20 + it]
            samples = {"thpscale.fault-both-1": faults, "thpscale.fault-huge-1": faults}
            out.append(ig.RunData(job, ig.KernelSpec("b" * 40, name="base"),
                                  ig.MachineSpec("qemu-x"), it, samples))  # fmt: skip
    return out


def test_mmtests_tables_refuse_to_pool_upstream_and_builtin(eng, capsys):
    from stackbench import cli
    from stackbench.resultsdb import ingest as ig

    ig.ingest(eng, thpscale_runs(f"upstream-1+{MMTESTS_COMMIT}+0123456789ab"))
    assert cli.main(["compare", "--style", "mmtests", "base"]) != 0
    err = capsys.readouterr().err
    assert "thpscale: these kernels have runs of upstream and builtin thpscale" in err
    assert "--suite-source upstream" in err and "Traceback" not in err

    assert cli.main(["compare", "--style", "mmtests", "--suite-source", "upstream", "base"]) == 0
    up = capsys.readouterr().out
    assert cli.main(["compare", "--style", "mmtests", "--suite-source", "builtin", "base"]) == 0
    builtin = capsys.readouterr().out
    amean = [ln for ln in up.splitlines() if ln.startswith("Amean") and "fault-both-1" in ln]
    assert amean and "1010.50" in amean[0], up
    assert "5010.50" in builtin and "1010.50" not in builtin


def test_a_source_that_never_answers_is_unavailable_not_a_hang(monkeypatch, tmp_path):
    import socket
    import threading

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(suites, "LS_REMOTE_TIMEOUT_S", 2)
    suites._reachable.cache_clear()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(srv.accept()[0]), daemon=True).start()
    url = f"git://127.0.0.1:{srv.getsockname()[1]}/vm-scalability.git"
    try:
        ok, why = suites.available(suites.Upstream(url=url, commit="2" * 40))
    finally:
        for s in (*held, srv):
            s.close()
    assert not ok and why == f"cannot reach {url}: no answer in 2 s"


def test_upstream_runner_without_its_suite_fails_the_run(tmp_path):
    env = {"TEST": "anon-w-seq", "NR_TASK": "1", "RUNTIME_S": "5", "SIZE_BYTES": "0",
           "MEM_PERMILLE": "1", "MEM_BYTES": str(8 * MB), "SB_WORK": str(tmp_path),
           "SB_UPSTREAM": str(tmp_path / "absent")}  # fmt: skip
    res = run_runner("run-vm-scalability-upstream.sh", env)
    assert res.returncode == 2
    assert "absent/vm-scalability" in res.stdout
