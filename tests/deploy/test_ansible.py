"""Ansible: the playbook parses and lints; the qemu_worker role really runs against this
machine (connection local, offline, everything under a temporary prefix) and the worker it
set up then executes a job; the bare-metal kexec and boot-and-report helpers run with stub
kexec/systemctl programs (a real kexec would reboot this machine)."""

from __future__ import annotations

import getpass
import grp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent
FILES = ANSIBLE / "roles" / "baremetal_worker" / "files"


def ansible_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_ROLES_PATH=str(ANSIBLE / "roles"),
        ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
    )
    return env


def local_vars(prefix: Path) -> dict:
    """Role variables for installing into a temporary prefix as the current user, with the
    venv running the tests and no packages, services or downloads."""
    return {
        "stackbench_prefix": str(prefix),
        "stackbench_offline": True,
        "stackbench_require_packages": False,
        "stackbench_install": False,
        "stackbench_venv": sys.prefix,
        "stackbench_python": sys.executable,
        "stackbench_create_user": False,
        "stackbench_user": getpass.getuser(),
        "stackbench_group": grp.getgrgid(os.getgid()).gr_name,
        "stackbench_manage_services": False,
    }


def playbook_tool() -> str:
    tool = BIN / "ansible-playbook"
    if not tool.exists():
        pytest.skip("ansible-core is not installed in this environment")
    return str(tool)


def test_site_playbook_syntax(tmp_path):
    out = subprocess.run(
        [playbook_tool(), "--syntax-check", "-i", "inventories/example/hosts.yml", "site.yml"],
        cwd=ANSIBLE,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ansible_lint(tmp_path):
    lint = BIN / "ansible-lint"
    if not lint.exists():
        pytest.skip("ansible-lint is not installed (pip install ansible-lint)")
    out = subprocess.run(
        [str(lint), "site.yml", "roles", "inventories"],
        cwd=ANSIBLE,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def run_role(tmp_path: Path, role: str, extra: dict) -> str:
    play = tmp_path / "play.yml"
    play.write_text(
        f"- name: {role} on this machine\n  hosts: localhost\n  connection: local\n"
        f"  gather_facts: false\n  roles:\n    - {role}\n"
    )
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    out = subprocess.run(
        [
            playbook_tool(),
            "-i",
            "localhost,",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-e",
            f"@{vars_file}",
            str(play),
        ],
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    return out.stdout


def read_env(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return env


def test_qemu_worker_role_sets_up_a_worker_that_runs_a_job(db_url, eng, tmp_path):
    pytest.importorskip("buildbot")
    from stackbench.jobs.executors import services
    from stackbench.jobs.executors.buildbot import client

    name = "ci-qemu"
    master_base = tmp_path / "master"
    cfg = services.create_master(
        master_base,
        [{"name": name, "kind": "qemu", "cpus": 2, "memory_mb": 2048}],
        extra={
            "dry_kernel": True,
            "jobs": ["dry-vm"],
            "runs": 1,
            "kernel_configs": [{"tree": "linux-6.1", "config": "tiny-guest"}],
        },
    )
    prefix = tmp_path / "prefix"
    extra = {
        **local_vars(prefix),
        "stackbench_fetch_upstream": False,
        "stackbench_prepare_guest": False,
        "stackbench_worker_name": name,
        "stackbench_worker_cpus": 2,
        "stackbench_worker_memory_mb": 2048,
        "stackbench_worker_password": services.worker_password(master_base, name),
        "stackbench_master_host": "127.0.0.1",
        "stackbench_master_pb_port": cfg["pb_port"],
        "stackbench_database_url": db_url,
    }
    first = run_role(tmp_path, "qemu_worker", extra)
    assert "failed=0" in first
    worker_dir = prefix / "var/lib/stackbench/buildbot" / f"worker-{name}"
    env_file = prefix / "etc/stackbench" / f"worker-{name}.env"
    unit = prefix / "etc/systemd/system" / f"stackbench-worker-{name}.service"
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert oct((worker_dir / "buildbot.tac").stat().st_mode & 0o777) == "0o600"
    assert (
        f"ExecStart={sys.prefix}/bin/buildbot-worker start --nodaemon {worker_dir}"
        in unit.read_text()
    )
    # a second run changes nothing
    second = run_role(tmp_path, "qemu_worker", extra)
    assert "changed=0" in second, second[-3000:]

    env = read_env(env_file)
    assert env["STACKBENCH_DATABASE_URL"] == db_url
    try:
        services.start_master(master_base)
        services.start_worker(worker_dir, env=env)
        master = client.embedded_master_at(master_base)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(w["connected_to"] for w in master.get("workers")["workers"]):
                break
            time.sleep(0.3)
        client.submit(master, commits=["e" * 40], title="ansible worker check")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            reqs = master.get("buildrequests")["buildrequests"]
            if len(reqs) == 3 and all(r["complete"] for r in reqs):
                break
            time.sleep(0.5)
        assert [r["results"] for r in reqs] == [0, 0, 0], reqs
    finally:
        services.stop_worker(worker_dir)
        services.stop_master(master_base)
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT m.name, m.kind, r.status, k.commit FROM run r "
                "JOIN machine m ON m.id = r.machine_id JOIN kernel_build k ON k.id = r.build_id"
            )
        ).all()
    assert rows == [(name, "qemu", "done", "e" * 40)]


# -- bare metal: the kexec step and the boot-and-report service ------------------------------


def stub(bin_dir: Path, name: str, log: Path, rc: int = 0) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(log)!r}, 'a').write(' '.join([{name!r}] + sys.argv[1:]) + '\\n')\n"
        f"sys.exit({rc})\n"
    )
    path.chmod(0o755)


def helper_env(tmp_path: Path, kexec_rc: int = 0) -> tuple[dict[str, str], Path]:
    log = tmp_path / "calls.log"
    stub(tmp_path / "bin", "kexec", log, kexec_rc)
    stub(tmp_path / "bin", "systemctl", log)
    env = dict(os.environ)
    env.update(
        KEXEC=str(tmp_path / "bin" / "kexec"),
        SYSTEMCTL=str(tmp_path / "bin" / "systemctl"),
        STACKBENCH_BAREMETAL_DIR=str(tmp_path / "spool"),
    )
    return env, log


def job_dir(tmp_path: Path, job: dict) -> Path:
    # the worker stages jobs under SPOOL/incoming; the helper takes nothing from elsewhere
    d = tmp_path / "spool" / "incoming" / "job"
    d.mkdir(parents=True)
    (d / "bzImage").write_bytes(b"kernel")
    (d / "job.json").write_text(json.dumps(job))
    return d


def test_kexec_step_queues_the_job_and_kexecs(tmp_path):
    env, log = helper_env(tmp_path)
    d = job_dir(
        tmp_path, {"id": "42", "kernel": "bzImage", "bench_argv": ["true"], "upload_argv": ["true"]}
    )
    out = subprocess.run(
        [str(FILES / "stackbench-kexec"), str(d)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    current = tmp_path / "spool" / "current"
    assert (current / "job.json").exists() and not d.exists()
    calls = log.read_text().splitlines()
    assert calls[0].startswith(f"kexec -l {current / 'bzImage'} --append=")
    assert calls[0].endswith("stackbench.job=42")
    assert calls[1] == "systemctl kexec"


def test_kexec_with_delay_leaves_the_kexec_to_a_systemd_timer(tmp_path):
    env, log = helper_env(tmp_path)
    stub(tmp_path / "bin", "systemd-run", log)
    env["SYSTEMD_RUN"] = str(tmp_path / "bin" / "systemd-run")
    d = job_dir(
        tmp_path, {"id": "43", "kernel": "bzImage", "bench_argv": ["true"], "upload_argv": ["true"]}
    )
    out = subprocess.run(
        [str(FILES / "stackbench-kexec"), "--delay", "15", str(d)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert calls[1] == (
        f"systemd-run --on-active=15 --unit=stackbench-kexec-43 {env['SYSTEMCTL']} kexec"
    )


@pytest.mark.parametrize(
    "where, job, message",
    [
        ("outside", {"id": "1", "kernel": "bzImage"}, "must be directly under"),
        ("incoming", {"id": "a b", "kernel": "bzImage"}, "job id 'a b' must be"),
        ("incoming", {"id": "1", "kernel": "../../../etc/passwd"}, "kernel image not found"),
    ],
)
def test_kexec_refuses_jobs_it_must_not_boot(tmp_path, where, job, message):
    env, log = helper_env(tmp_path)
    d = (tmp_path / "elsewhere") if where == "outside" else (tmp_path / "spool/incoming/j")
    d.mkdir(parents=True)
    (d / "bzImage").write_bytes(b"kernel")
    (d / "job.json").write_text(json.dumps({**job, "bench_argv": [], "upload_argv": []}))
    out = subprocess.run(
        [str(FILES / "stackbench-kexec"), str(d)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert (d / "job.json").exists() and not (tmp_path / "spool" / "current").exists()
    assert not log.exists()


def test_kexec_failure_leaves_the_job_where_it_was(tmp_path):
    env, log = helper_env(tmp_path, kexec_rc=1)
    d = job_dir(
        tmp_path, {"id": "7", "kernel": "bzImage", "bench_argv": ["true"], "upload_argv": ["true"]}
    )
    out = subprocess.run(
        [str(FILES / "stackbench-kexec"), str(d)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 1
    assert out.stderr.startswith("stackbench-kexec: error: kexec -l failed")
    assert (d / "job.json").exists() and not (tmp_path / "spool" / "current").exists()
    assert "systemctl" not in log.read_text()


def test_boot_report_runs_the_queued_job_reports_and_returns(eng, tmp_path, monkeypatch):
    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    env, log = helper_env(tmp_path)
    sb = str(BIN / "stackbench")
    current = tmp_path / "spool" / "current"
    current.mkdir(parents=True)
    # the artifact a 'stackbench worker build' made, then the job the kexec step queued
    subprocess.run(
        [sb, "worker", "build", "--commit", "9" * 40, "--dry-kernel"],
        cwd=current,
        check=True,
        env=env,
    )
    job = {
        "id": "1234",
        "kernel": "out/kernel.tar",
        "no_cmdline_check": True,  # this machine did not really kexec into the job's kernel
        "bench_argv": [
            sb,
            "worker",
            "bench",
            "--kernel",
            "out/kernel.tar",
            "--job",
            "dry-vm",
            "--submission",
            "bm",
            "--kind",
            "baremetal",
            "--machine",
            "box1",
            "--runs",
            "2",
            "--dry-kernel",
        ],
        "upload_argv": [sb, "worker", "upload", "--results", "results"],
    }
    (current / "job.json").write_text(json.dumps(job))
    out = subprocess.run(
        [str(FILES / "stackbench-boot-report")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, (
        out.stdout + out.stderr + (tmp_path / "spool/done/1234/boot-report.log").read_text()
    )
    status = json.loads((tmp_path / "spool" / "done" / "1234" / "status.json").read_text())
    assert status["result"] == "reported"
    assert not current.exists()
    assert log.read_text().splitlines() == ["systemctl reboot"]
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT m.name, m.kind, count(*) FROM run r JOIN machine m ON m.id = r.machine_id GROUP BY 1, 2"
            )
        ).all()
    assert rows == [("box1", "baremetal", 2)]
    # booted without a queued job: nothing to do, no reboot
    again = subprocess.run(
        [str(FILES / "stackbench-boot-report")], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and "no queued job" in again.stdout
    assert log.read_text().splitlines() == ["systemctl reboot"]


def test_boot_report_refuses_the_wrong_kernel(tmp_path):
    env, log = helper_env(tmp_path)
    current = tmp_path / "spool" / "current"
    current.mkdir(parents=True)
    (current / "job.json").write_text(
        json.dumps(
            {"id": "55", "kernel": "bzImage", "bench_argv": ["false"], "upload_argv": ["false"]}
        )
    )
    out = subprocess.run(
        [str(FILES / "stackbench-boot-report")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 1
    status = json.loads((tmp_path / "spool" / "done" / "55" / "status.json").read_text())
    assert status["result"] == "wrong-kernel"
    assert log.read_text().splitlines() == ["systemctl reboot"]
    assert shutil.which("true")


def test_every_long_running_unit_is_restarted_and_the_answering_ones_are_probed():
    """systemd restarts each service that fails; the web and the master, which can stop
    answering while they run, each have a health-check unit that restarts them."""
    import re

    units = sorted((ANSIBLE / "roles").glob("*/templates/*.service.j2"))
    long_running = [u for u in units if "Type=oneshot" not in u.read_text()]
    assert len(long_running) >= 8, long_running
    for unit in long_running:
        text = unit.read_text()
        assert re.search(r"^Restart=(always|on-failure)$", text, re.M), unit
        assert re.search(r"^RestartSec=\d+$", text, re.M), unit
    probed = {}
    for unit in long_running:
        m = re.search(r"health-check --systemd --probe (\S+?)=(.+)$", unit.read_text(), re.M)
        if m:
            probed[m.group(1)] = m.group(2)
    assert set(probed) == {"stackbench-web.service", "stackbench-buildbot.service"}
    assert probed["stackbench-web.service"].endswith("/healthz")
    for name in probed:
        assert any((ANSIBLE / "roles").glob(f"*/templates/{name}.j2")), name
    dropin = (ANSIBLE / "roles/results_db/tasks/main.yml").read_text()
    assert "postgresql@.service.d" in dropin and "Restart=on-failure" in dropin
