"""A QEMU VM that plays a bare-metal box for the tests: the Debian image (jobs/benchmarks/guest/image.py)
as its disk, a debian-guest kernel as its production kernel, QEMU's user network with ssh
forwarded to a port on 127.0.0.1, and a seed disk (image-init.sh's ``sb.seed``) that gives
it root's ssh key, this worktree's stackbench (mounted at the same path, its venv's
site-packages added to Debian's python3), and what systemd would do on a real box:
``systemctl kexec|reboot`` and ``systemd-run --on-active`` as small shims, and the
boot-and-report unit (stackbench-boot-report when a job is queued) run at every boot.

Unlike a test guest, the VM runs without -no-reboot: a reboot resets the machine into the
kernel given with -kernel, which is how the box returns to its production kernel.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from stackbench import proc
from stackbench.jobs.benchmarks.guest import image
from stackbench.kernels import qemu

ROOT = Path(__file__).resolve().parents[2]
BOOT_REPORT = ROOT / "ansible/roles/baremetal_worker/files/stackbench-boot-report"
SPOOL = "/var/lib/stackbench/baremetal"
SEED_SH = r"""#!/bin/bash
# the box's seed (tests/boxvm.py): run by /sbin/stackbench-init at every boot
set -u
# where the systemd shims below live; /sbin/stackbench-init's PATH does not have it
export PATH=/usr/local/sbin:/usr/local/bin:$PATH
mkdir -p /root/.ssh
install -m 600 /mnt/seed/authorized_keys /root/.ssh/authorized_keys
mkdir -p {root}
mountpoint -q {root} || mount --bind /mnt/seed/stackbench {root}
mkdir -p /usr/local/lib/python3.11/dist-packages
echo 'import site; site.addsitedir("{root}/.venv/lib/python3.11/site-packages")' \
    > /usr/local/lib/python3.11/dist-packages/stackbench-box.pth
cat > /usr/local/sbin/systemctl << 'EOF'
#!/bin/sh
# systemd's two verbs the box helpers use
sync
case "$1" in
kexec) echo "box: kexec -e"; exec kexec -e ;;
reboot) echo "box: reboot"; exec busybox reboot -f ;;
*) echo "systemctl shim: $*" >&2; exit 1 ;;
esac
EOF
cat > /usr/local/sbin/systemd-run << 'EOF'
#!/bin/sh
# systemd-run --on-active=N --unit=NAME CMD...: CMD after N seconds, detached
delay=0
while [ $# -gt 0 ]; do
    case "$1" in
    --on-active=*) delay=${{1#--on-active=}} ;;
    --unit=*) ;;
    *) break ;;
    esac
    shift
done
setsid sh -c "sleep $delay; exec \"\$@\"" sh "$@" > /dev/console 2>&1 < /dev/null &
EOF
chmod 755 /usr/local/sbin/systemctl /usr/local/sbin/systemd-run
# the role installs nothing with pip here (stackbench_install: false): its venv is made
# from Debian's python3 and the worktree's site-packages above
if [ ! -e {venv}/bin/python3 ]; then
    python3 -m venv --system-site-packages --without-pip {venv}
    printf '#!{venv}/bin/python3\nimport sys\nfrom stackbench.cli import main\nsys.exit(main())\n' \
        > {venv}/bin/stackbench
    printf '#!{venv}/bin/python3\nfrom buildbot_worker.scripts.runner import run\nrun()\n' \
        > {venv}/bin/buildbot-worker
    chmod 755 {venv}/bin/stackbench {venv}/bin/buildbot-worker
fi
echo "box-seed: ready on $(uname -r): $(cat /proc/cmdline)"
# what the role's stackbench-boot-report.service does at boot: EnvironmentFile=, ExecStart=
env={env}
if [ -e {spool}/current/job.json ] && [ -e $env ]; then
    set -a
    . $env
    set +a
    /usr/local/libexec/stackbench/stackbench-boot-report
fi
"""
VENV = "/opt/stackbench/venv"
WORKER = "box1"
ENV_FILE = f"/etc/stackbench/worker-{WORKER}.env"


def make_seed(dest: Path, pubkey: str) -> Path:
    """An ext4 seed disk: seed.sh, root's authorized key and this worktree (hard links, so it
    costs no copy) under stackbench/."""
    stage = dest.with_suffix(".d")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    (stage / "seed.sh").write_text(SEED_SH.format(root=ROOT, spool=SPOOL, venv=VENV, env=ENV_FILE))
    (stage / "seed.sh").chmod(0o755)
    (stage / "authorized_keys").write_text(pubkey)
    proc.run(["cp", "-al", str(ROOT), str(stage / "stackbench")])
    used_mb = int(proc.run(["du", "-sm", str(stage)]).stdout.split()[0])
    proc.run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", str(stage), str(dest),
              f"{used_mb * 12 // 10 + 64}M"])  # fmt: skip
    shutil.rmtree(stage)
    return dest


class BoxVM:
    def __init__(self, workdir: Path, kernel: Path, img: Path, seed: Path, ssh_port: int):
        self.workdir = workdir
        self.console = workdir / "console.log"
        self.key = workdir / "id_ed25519"
        self.argv = [
            "qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "1024",
            "-nodefaults", "-display", "none", "-monitor", "none",
            "-serial", f"file:{self.console}",
            "-kernel", str(kernel),
            # the box's command line is the kexec'd kernel's too (stackbench-kexec)
            "-append", f"console=ttyS0 {qemu.TCG_CLOCK_CMDLINE} root=/dev/vda rw "
            "init=/sbin/stackbench-init sb.net sb.sshd sb.seed=/dev/vdb",
            *image.drive_args(img),
            "-drive", f"file={seed},format=raw,if=virtio,readonly=on",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
            "-device", "virtio-net-pci,netdev=n0",
        ]  # fmt: skip
        self.ssh_port = ssh_port
        self.vm: subprocess.Popen | None = None

    def start(self) -> None:
        self.console.unlink(missing_ok=True)
        self.console.touch()
        with open(self.workdir / "qemu.log", "wb") as log:
            self.vm = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        if self.vm is not None and self.vm.poll() is None:
            os.killpg(self.vm.pid, signal.SIGKILL)
            self.vm.wait()

    def text(self) -> str:
        return self.console.read_text(errors="replace")

    def wait_console(self, needle: str, count: int = 1, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.text().count(needle) >= count:
                return
            if self.vm is not None and self.vm.poll() is not None:
                raise AssertionError(f"the box VM exited\n{self.text()[-3000:]}")
            time.sleep(0.5)
        raise AssertionError(f"no {needle!r} (x{count}) on the box console\n{self.text()[-3000:]}")

    def ssh_argv(self, *cmd: str) -> list[str]:
        return [
            "ssh", "-i", str(self.key), "-p", str(self.ssh_port),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20", "-o", "BatchMode=yes",
            "root@127.0.0.1", *cmd,
        ]  # fmt: skip

    def ssh(self, *cmd: str, timeout: float = 600, check: bool = True):
        out = subprocess.run(self.ssh_argv(*cmd), capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"ssh {cmd}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
        return out

    def scp(self, src: Path, dest: str) -> None:
        subprocess.run(
            ["scp", "-q", "-i", str(self.key), "-P", str(self.ssh_port),
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", str(src), f"root@127.0.0.1:{dest}"],
            check=True, timeout=300,
        )  # fmt: skip


def make_key(workdir: Path) -> str:
    key = workdir / "id_ed25519"
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    return (workdir / "id_ed25519.pub").read_text()


def apply_role(vm: BoxVM, workdir: Path, role_vars: dict) -> subprocess.CompletedProcess:
    """Play the baremetal_worker role on the box over ssh, as production does."""
    import json

    play = workdir / "box-play.yml"
    play.write_text(
        "- name: A bare-metal box\n  hosts: box\n  gather_facts: true\n"
        "  roles:\n    - baremetal_worker\n"
    )
    inv = workdir / "box-hosts.yml"
    inv.write_text(json.dumps({"all": {"children": {"box": {"hosts": {WORKER: {
        "ansible_host": "127.0.0.1", "ansible_port": vm.ssh_port, "ansible_user": "root",
        "ansible_ssh_private_key_file": str(vm.key),
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    }}}}}}))  # fmt: skip
    (workdir / "box-vars.json").write_text(json.dumps(role_vars))
    env = dict(os.environ)
    env.update(
        ANSIBLE_ROLES_PATH=str(ROOT / "ansible" / "roles"),
        ANSIBLE_CONFIG=str(ROOT / "ansible" / "ansible.cfg"),
        ANSIBLE_HOME=str(workdir / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(workdir / "ansible-tmp"),
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_NOCOLOR="1",
    )
    playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run(
        [str(playbook), "-i", str(inv), "-e", f"@{workdir / 'box-vars.json'}", str(play)],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
