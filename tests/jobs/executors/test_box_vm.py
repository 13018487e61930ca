"""The bare-metal flow for real, with a QEMU VM playing the box (tests/boxvm.py): the Debian
image booted with a debian-guest production kernel (the base), reached over ssh, given the
baremetal_worker role by ansible-playbook. The kernel under test is a commit of its own on
the base (series_commit), built with the same config. On the box,
`stackbench worker baremetal` queues the job and the real stackbench-kexec loads the kernel
under test with kexec-tools and kexecs into it; after that boot stackbench-boot-report runs
the job natively (jobs/executors/native.py), uploads through the real web API to PostgreSQL on the
host, and reboots into the production kernel. The host side waits with
`stackbench worker await-box`.

Then a kernel that cannot come up on the box (tiny-guest has no disk driver: it panics for
want of an init and hangs) ends as one lost run with the reason and the console tail,
and none of its runs stored.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import pytest
from helpers.boxvm import ENV_FILE, SPOOL, VENV, BoxVM, apply_role, make_key, make_seed
from helpers.kernelkit import require_kernel_tools, use_kernel_cache
from sqlalchemy import select
from test_buildbot_fanout import start_web, worker_token

from stackbench.jobs.benchmarks.guest import image
from stackbench.jobs.executors import services
from stackbench.resultsdb import db
from stackbench.resultsdb.models import Machine, Run

JOB = "thpscale[max_threads=2,mapsize_fraction=0.05,suite_source=builtin]"
PY = sys.executable


def sb(*args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [PY, "-m", "stackbench", *args], capture_output=True, text=True, timeout=timeout
    )
    if check and out.returncode != 0:
        raise AssertionError(f"stackbench {args}: {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


def series_commit() -> str:
    """A commit of its own on the base, as a series' kernel is: one comment added to
    mm/compaction.c, made with fixed dates so its sha (and its cached build) never changes;
    only compaction.o and the link are rebuilt."""
    from stackbench.kernels import trees

    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    base = trees.resolve(repo, tree.default_base)
    env = {
        **os.environ,
        "GIT_INDEX_FILE": tempfile.mktemp(suffix=".index"),
        "GIT_AUTHOR_NAME": "stackbench",
        "GIT_AUTHOR_EMAIL": "box@stackbench.invalid",
        "GIT_COMMITTER_NAME": "stackbench",
        "GIT_COMMITTER_EMAIL": "box@stackbench.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }

    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    text = git("show", f"{base}:mm/compaction.c") + "\n/* the box test's kernel under test */\n"
    blob = git("hash-object", "-w", "--stdin", stdin=text)
    git("read-tree", base)
    git("update-index", "--cacheinfo", f"100644,{blob},mm/compaction.c")
    tree_sha = git("write-tree")
    os.unlink(env["GIT_INDEX_FILE"])
    return git("commit-tree", tree_sha, "-p", base, "-m", "box test: the kernel under test")


def kernel_tar(tmp_path, config: str, commit: str | None = None) -> str:
    from stackbench.kernels import trees

    tree = trees.load_tree("linux-6.1")
    repo = trees.ensure_repo(tree)
    commit = commit or trees.resolve(repo, tree.default_base)
    out = tmp_path / f"kernel-{config}-{commit[:12]}"
    sb("worker", "build", "--commit", commit, "--config", config, "--out", str(out))
    return str(out / "kernel.tar")


def queue(vm: BoxVM, tar: str, submission: str) -> dict:
    """What Buildbot's 'queue job and kexec' step runs on the box: the worker's own account
    with its environment file, reaching stackbench-kexec through the role's sudoers rule."""
    vm.scp(tar, "/var/lib/stackbench/kernel.tar")
    vm.ssh("chown stackbench: /var/lib/stackbench/kernel.tar")
    cmd = (
        f"set -a; . {ENV_FILE}; set +a; cd /var/lib/stackbench && stackbench worker baremetal "
        f"--kernel kernel.tar --job '{JOB}' --submission {submission} --kind baremetal "
        f"--machine box1 --cpus 2 --memory-mb 1024 --runs 2 --kexec-delay 3"
    )
    out = vm.ssh(f"su -s /bin/sh stackbench -c {shlex.quote(cmd)}", timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def await_box(tmp_path, queued: dict, tar: str, submission: str, url: str, vm: BoxVM, timeout):
    qfile = tmp_path / f"queued-{submission}.json"
    qfile.write_text(json.dumps(queued))
    return sb(
        "worker", "await-box", "--queued", str(qfile), "--timeout", str(timeout), "--poll", "3",
        "--url", url, "--console", str(vm.console), "--kernel", tar, "--job", JOB,
        "--submission", submission, "--kind", "baremetal", "--machine", "box1",
        check=False, timeout=timeout + 300,
    )  # fmt: skip


def runs_with(keys) -> list[Run]:
    with db.session() as s:
        return list(s.scalars(select(Run).where(Run.idempotency_key.in_(list(keys)))))


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(3600)
def test_vm_plays_a_bare_metal_box(tmp_path, monkeypatch, eng):
    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    if not image.find("debian"):
        image.ensure("debian")
    img = image.find("debian")
    assert img is not None
    monkeypatch.chdir(tmp_path)
    prod_tar = kernel_tar(tmp_path, "debian-guest")
    under_test = series_commit()
    test_tar = kernel_tar(tmp_path, "debian-guest", under_test)
    hang_tar = kernel_tar(tmp_path, "tiny-guest")
    prod_kernel = tmp_path / "prod"
    prod_kernel.mkdir()
    subprocess.run(["tar", "-xf", prod_tar, "-C", prod_kernel], check=True)

    server, url = start_web(tmp_path)
    box_url = url.replace("127.0.0.1", "10.0.2.2")  # the host as QEMU's user network sees it
    token = worker_token("box1")
    pubkey = make_key(tmp_path)
    t0 = time.monotonic()
    seed = make_seed(tmp_path / "seed.ext4", pubkey)
    print(f"seed disk: {time.monotonic() - t0:.1f} s")
    vm = BoxVM(tmp_path, prod_kernel / "artifact" / "bzImage", img.path, seed, services.free_port())
    vm.start()
    try:
        t0 = time.monotonic()
        vm.wait_console("box-seed: ready", timeout=300)
        vm.ssh("true", timeout=120)
        print(f"box up (production kernel, ssh): {time.monotonic() - t0:.1f} s")

        # -- the baremetal_worker role, over ssh, as in production ---------------------------
        t0 = time.monotonic()
        role_vars = {
            "stackbench_offline": True,  # no network for apt: check the packages instead
            "stackbench_require_packages": True,
            "stackbench_install": False,
            "stackbench_venv": VENV,
            "stackbench_manage_services": False,  # no systemd: the seed plays its units
            "stackbench_fetch_upstream": False,
            "stackbench_worker_name": "box1",
            "stackbench_worker_cpus": 2,
            "stackbench_worker_memory_mb": 1024,
            "stackbench_worker_password": "unused-here",
            "stackbench_master_host": "10.0.2.2",
            "stackbench_api_url": box_url,
            "stackbench_worker_token": token,
        }
        played = apply_role(vm, tmp_path, role_vars)
        assert played.returncode == 0, played.stdout[-5000:] + played.stderr[-2000:]
        print(f"role applied: {time.monotonic() - t0:.1f} s")
        again = apply_role(vm, tmp_path, role_vars)
        assert again.returncode == 0, again.stdout[-5000:]
        assert "changed=0" in again.stdout, again.stdout[-3000:]
        assert (
            "NOPASSWD: /usr/local/libexec/stackbench/stackbench-kexec"
            in vm.ssh("cat /etc/sudoers.d/stackbench-kexec").stdout
        )

        # -- a job: kexec, native runs, upload, back on the production kernel --------------
        t0 = time.monotonic()
        queued = queue(vm, test_tar, "box-sub-1")
        assert queued["commit"] == under_test
        assert not queued["already"] and len(queued["keys"]) == 2
        print(f"queued: {time.monotonic() - t0:.1f} s")
        done = await_box(tmp_path, queued, test_tar, "box-sub-1", url, vm, timeout=1200)
        assert done.returncode == 0, done.stdout + done.stderr + vm.text()[-4000:]
        print(f"reported: {time.monotonic() - t0:.1f} s: {done.stdout.strip()}")
        # first boot, the kexec'd kernel, and the production kernel again
        vm.wait_console("box-seed: ready", count=3, timeout=600)
        print(f"back on the production kernel: {time.monotonic() - t0:.1f} s")
        console = vm.text()
        assert "box: kexec -e" in console and "box: reboot" in console
        assert f"stackbench.job={queued['job_id']}" in console
        assert "stackbench.job=" not in vm.ssh("cat /proc/cmdline").stdout
        status = json.loads(vm.ssh(f"cat {SPOOL}/done/{queued['job_id']}/status.json").stdout)
        assert status["result"] == "reported"
        assert vm.ssh(f"test -e {SPOOL}/current", check=False).returncode != 0
        stored = runs_with(queued["keys"])
        assert sorted(r.status for r in stored) == ["done", "done"], [r.error for r in stored]
        with db.session() as s:
            for r in stored:
                m = s.get(Machine, r.machine_id)
                assert (m.name, m.kind) == ("box1", "baremetal")
                assert r.meta["suite_source"] == "builtin"
                assert r.meta["resolved"]["THREADS"] == "1 2"

        # -- a kernel that hangs after the kexec: lost, with the console tail ------------
        # the waiting side (the master) stores the lost attempt with a token of its own
        monkeypatch.setenv("STACKBENCH_WORKER_TOKEN", worker_token("master"))
        t0 = time.monotonic()
        lost_q = queue(vm, hang_tar, "box-sub-2")
        lost = await_box(tmp_path, lost_q, hang_tar, "box-sub-2", url, vm, timeout=150)
        print(f"lost after {time.monotonic() - t0:.1f} s: {lost.stdout.strip()}")
        assert lost.returncode == 1, lost.stdout + lost.stderr
        assert "Traceback" not in lost.stderr
        assert "did not report within 150 s" in lost.stdout
        assert runs_with(lost_q["keys"]) == []  # nothing half-stored
        with db.session() as s:
            marked = s.scalars(select(Run).where(Run.status == "lost")).all()
            assert len(marked) == 1
            assert "did not report within 150 s" in marked[0].error
            assert "--- console ---" in marked[0].error
            # tiny-guest has no disk driver: it panics for want of an init, and hangs
            assert "Kernel panic - not syncing" in marked[0].error
            assert marked[0].meta["box_job"] == lost_q["job_id"]
    finally:
        vm.stop()
        server.shutdown()
