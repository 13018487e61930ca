"""The Debian guest image (jobs/benchmarks/guest/image.py) and thpscale run by mmtests' own
run-mmtests.sh inside it (jobs/benchmarks/guest/mmtests_image.py).

Fast tests: the cache key, the debian-guest kernel config staying a superset of tiny-guest,
job expansion with ``image=debian``, and an image build that fails for real (a mirror that
does not exist). Slow tests build the image with mmdebstrap (or reuse the shared cache),
boot it under QEMU with a debian-guest kernel from the shared kernel cache, and run
run-mmtests.sh's thpscale next to the plain upstream thpscale in one boot.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers.kernelkit import require_kernel_tools, use_kernel_cache
from test_suites import MMTESTS_COMMIT, UPSTREAM, need_bundles

from stackbench.errors import InputError
from stackbench.jobs.benchmarks import definitions as d
from stackbench.jobs.benchmarks import suites
from stackbench.jobs.benchmarks.guest import image, mmtests_image
from stackbench.kernels import config as kconfig

GUEST_MEM_MB = 1024
GUEST_CPUS = 2


def cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stackbench", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_key_is_content():
    assert image.key() == image.key()
    assert image.key(image.packages()) == image.key()
    assert image.key([*image.packages(), "vim"]) != image.key()
    # the order of the list is not content
    assert image.key(list(reversed(image.packages()))) == image.key()


def test_image_carries_what_the_jobs_need():
    pkgs = set(image.packages())
    for need in ("bash", "perl", "kexec-tools", "python3", "openssh-server", "gawk", "numactl"):
        assert need in pkgs


def test_debian_guest_config_keeps_every_tiny_guest_line():
    tiny = kconfig.parse_fragment(kconfig.fragment_path("tiny-guest"))
    deb = kconfig.parse_fragment(kconfig.fragment_path("debian-guest"))
    assert {k: deb.get(k) for k in tiny} == tiny
    for sym in ("CONFIG_VIRTIO_BLK", "CONFIG_EXT4_FS", "CONFIG_KEXEC", "CONFIG_VIRTIO_NET"):
        assert deb[sym] == "y"


def _upstream_env(monkeypatch) -> None:
    need_bundles()
    monkeypatch.setenv(suites.MIRROR_ENV, str(UPSTREAM))
    suites._reachable.cache_clear()


def _expand(params: dict) -> list[d.SubJob]:
    defn = d.load("thpscale")
    data = {
        "suite": "thpscale",
        "runs": 1,
        "timeout": 600,
        "params": params,
        "upstream": {"url": defn.upstream.url, "commit": defn.upstream.commit},
    }
    job = d.parse(data, path="thpscale.yaml")
    return d.expand(job, guest_mem_mb=GUEST_MEM_MB, guest_cpus=GUEST_CPUS)


def test_image_job_runs_mmtests_in_the_image(monkeypatch):
    _upstream_env(monkeypatch)
    plain = _expand({"max_threads": 2})[0]
    in_image = _expand({"max_threads": 2, "image": "debian"})[0]
    assert in_image.resolved["SB_RUNNER"] == mmtests_image.RUNNER
    assert in_image.resolved["SB_IMAGE"] == "debian"
    assert in_image.setup.kconfig == "debian-guest"
    assert in_image.params["image"] == "debian"
    assert in_image.name != plain.name
    assert MMTESTS_COMMIT in in_image.suite_version
    assert image.key() in in_image.suite_version
    assert in_image.job_spec().params != plain.job_spec().params  # never the same job
    assert in_image.provenance()["upstream"]["commit"] == MMTESTS_COMMIT


def test_image_job_needs_the_upstream_source():
    with pytest.raises(InputError, match="suite_source=upstream"):
        _expand({"max_threads": 2, "image": "debian", "suite_source": "builtin"})


def test_unknown_image_is_refused_by_the_schema():
    with pytest.raises(InputError, match="image"):
        _expand({"max_threads": 2, "image": "ubuntu"})


def test_path_of_an_image_not_built(tmp_path):
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "STACKBENCH_KERNEL_CACHE": str(tmp_path),
           "STACKBENCH_HOME": str(tmp_path / "home")}  # fmt: skip
    out = cli("image", "path", env=env)
    assert out.returncode == 1
    assert "not built yet" in out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap not installed")
def test_build_with_a_mirror_that_does_not_exist(tmp_path):
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "STACKBENCH_KERNEL_CACHE": str(tmp_path),
           "STACKBENCH_HOME": str(tmp_path / "home"),
           image.MIRROR_ENV: f"file://{tmp_path}/no-such-mirror"}  # fmt: skip
    out = cli("image", "build", env=env)
    assert out.returncode != 0
    assert "stackbench: error: image debian: mmdebstrap failed" in out.stderr
    assert "Traceback" not in out.stderr
    # nothing half-built is taken for an image; the log stays for reading
    assert not list((tmp_path / "images").glob("*/debian.ext4"))
    assert (tmp_path / "images" / "failed-build.log").is_file()
    assert cli("image", "path", env=env).returncode == 1


def test_plan_without_a_buildable_image_fails_only_its_jobs(monkeypatch, tmp_path):
    _upstream_env(monkeypatch)
    plain = _expand({"max_threads": 2})[0]
    in_image = _expand({"max_threads": 2, "image": "debian"})[0]
    monkeypatch.setenv("STACKBENCH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no mmdebstrap on PATH
    extra, failed = mmtests_image.plan_drives([plain, in_image])
    assert extra == []
    assert [sj for sj, _ in failed] == [in_image]
    assert "needs mmdebstrap" in failed[0][1]
    assert mmtests_image.plan_drives([plain]) == ([], [])


# ---- slow: the real image under QEMU ---------------------------------------------------------


def debian_kernel(monkeypatch):
    """The default tree's base built with the debian-guest config (shared kernel cache)."""
    from stackbench.kernels import build, trees

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    res = build.build(repo, tree.default_base, config="debian-guest")
    assert res.status == "built", res.log_tail
    return res


def built_image(monkeypatch) -> image.Image:
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap not installed (apt install mmdebstrap)")
    use_kernel_cache(monkeypatch)
    img = image.ensure("debian")
    print(f"image {img.path}: {'cached' if img.reused else 'built'} "
          f"build_s={img.build_s} size={img.size_bytes} used={img.used_bytes}")  # fmt: skip
    return img


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(1800)
def test_image_boots_with_its_tools(monkeypatch, tmp_path):
    from stackbench.kernels import qemu

    img = built_image(monkeypatch)
    res = debian_kernel(monkeypatch)
    boot = qemu.boot(
        res.bzimage,
        None,
        workdir=tmp_path / "vm",
        cpus=GUEST_CPUS,
        mem_mb=GUEST_MEM_MB,
        timeout_s=600,
        accel="tcg",
        append="root=/dev/vda rw init=/sbin/stackbench-init sb.check",
        extra=image.drive_args(img.path),
        expect="stackbench-image: up",
        expect_within_s=300,
    )
    console = boot.console_path.read_text(errors="replace")
    assert boot.status == "ok", boot.reason + "\n" + boot.console_tail
    print(f"boot under {boot.accel_used} in {boot.duration_s:.1f} s")
    for tool in ("bash 5.", "perl v5.", "Python 3.11", "kexec-tools", "OpenSSH_9"):
        assert tool in console, tool
    assert "stackbench-image: check done" in console
    assert "/usr/bin/gawk" in console and "/usr/sbin/chroot" in console


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(2400)
def test_run_mmtests_thpscale_in_the_image(monkeypatch, tmp_path):
    from stackbench.jobs.executors.boot_stage import run_kernel
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.rundata import KernelSpec

    _upstream_env(monkeypatch)
    built_image(monkeypatch)
    res = debian_kernel(monkeypatch)
    plan = [
        *_expand({"max_threads": 2, "mapsize_fraction": 0.1}),
        *_expand({"max_threads": 2, "mapsize_fraction": 0.1, "image": "debian"}),
    ]
    kernel = KernelSpec(
        commit=res.commit, name="base", config_hash=res.config_hash, compiler=res.compiler,
        config_name="debian-guest",
    )  # fmt: skip
    settings = Settings(cpus=GUEST_CPUS, mem_mb=GUEST_MEM_MB, accel="tcg")
    boot, runs = run_kernel(
        res.bzimage, res.modules, plan, kernel=kernel, settings=settings,
        workdir=tmp_path / "vm", boot_id="image-test",
    )  # fmt: skip
    assert boot is not None and boot.status == "ok", boot and boot.console_tail
    problems = [
        (r.job.params, r.status, r.error.splitlines()[:3], r.logs.get("stderr", b"")[-2000:])
        for r in runs
        if r.status != "done"
    ]
    assert len(runs) == 2 and all(r.status == "done" for r in runs), problems
    plain, mm = sorted(runs, key=lambda r: "image" in r.job.params)
    assert mm.job.params["image"] == "debian"
    names = {k for k in mm.samples if k.startswith("thpscale.")}
    assert names and names == {k for k in plain.samples if k.startswith("thpscale.")}
    assert 0 <= mm.samples["thpscale.Percentage huge-1"][0] <= 100
    assert mm.meta["upstream"]["commit"] == MMTESTS_COMMIT
    # what run-mmtests.sh itself left, as it left it: its timestamps, the gzipped logs and
    # the per-thread /usr/bin/time files
    assert "mmtests/iter-0/tests-timestamp" in mm.logs
    assert "mmtests/iter-0/thpscale/logs/threads-1.log.gz" in mm.logs
    assert any(k.startswith("mmtests/iter-0/thpscale/logs/threads-1") and k.endswith(".time")
               for k in mm.logs), sorted(mm.logs)  # fmt: skip


def test_image_job_on_a_kernel_without_disk_support_fails_with_the_reason(monkeypatch, tmp_path):
    from stackbench.jobs.executors.boot_stage import run_kernel
    from stackbench.jobs.executors.settings import Settings
    from stackbench.resultsdb.rundata import KernelSpec

    _upstream_env(monkeypatch)
    in_image = _expand({"max_threads": 2, "image": "debian"})
    art = tmp_path / "art"
    (art / "modules").mkdir(parents=True)
    # a tiny-guest kernel's configuration: no block layer, no virtio disk, no ext4
    (art / "config").write_text(
        "".join(f"{k}={v}\n" for k, v in kconfig.parse_fragment(
            kconfig.fragment_path("tiny-guest")).items() if v != "n")
    )  # fmt: skip
    (art / "bzImage").write_bytes(b"not booted: the job is refused before")
    kernel = KernelSpec(commit="1" * 40, name="tiny", config_hash="c" * 64, compiler="gcc")
    settings = Settings(accel="tcg")
    boot, runs = run_kernel(
        art / "bzImage", {}, in_image, kernel=kernel, settings=settings,
        workdir=tmp_path / "vm", boot_id="refused",
    )  # fmt: skip
    assert boot is None
    assert [r.status for r in runs] == ["failed"]
    assert "kconfig debian-guest" in runs[0].error
    assert "CONFIG_VIRTIO_BLK=y requested, got unset" in runs[0].error
