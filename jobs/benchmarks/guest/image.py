"""The Debian guest image: a Debian userland made from Debian packages with mmdebstrap and
written into an ext4 disk image, for jobs that need a real userland (mmtests' own
``run-mmtests.sh``) and for the VM that plays a bare-metal box.

The image is cached by content: its key hashes the Debian suite, the package list and this
recipe (the hook script and the format version), never the mirror or the time, so a second
build with the same inputs is a lookup. It lives under the kernel cache
(``<cache>/images/<key>/``, kernels/paths.py) beside the kernels it boots with, with
``build.json`` recording the packages, the build time and the sizes.

mmdebstrap always runs in its ``unshare`` mode, inside a mount namespace of its own that
``unshare --mount --propagation private`` made first: as root its default (``root`` mode)
would mount /proc, /sys and /dev of the chroot, and the hook's bind mount, in the host's
namespace, where a crash leaves them behind. The ext4 file is written by ``mke2fs -d`` inside
mmdebstrap's own hook, where the files already have root as owner. Nothing here needs network
beyond the Debian mirror.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stackbench import config, proc
from stackbench.errors import InputError, StackbenchError
from stackbench.kernels import paths

NAMES = ("debian",)
SUITE = "bookworm"
MIRROR_ENV = "STACKBENCH_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# bump when the recipe changes in a way the hook text does not show
RECIPE_VERSION = "image-1"
IMAGE_FILE = "debian.ext4"
INIT = Path(__file__).resolve().parent / "image-init.sh"
BUILD_TIMEOUT_S = 3600
# free room left in the ext4 image for runs' work files, logs and the box's spool
FREE_MB = 768
# what each package is for; the list is part of the cache key, so order does not matter
PACKAGES: dict[str, str] = {
    "bash": "upstream case scripts and mmtests' shellpacks",
    "busybox-static": "reboot -f for the image's init; the box's guest image is built with it",
    "perl": "mmtests' run-mmtests.sh helpers (install-depends, extract scripts)",
    "libfile-slurp-perl": "mmtests' perl modules",
    "gawk": "mmtests' run-mmtests.sh",
    "bc": "mmtests' shellpacks",
    "numactl": "mmtests' run-mmtests.sh checks for it",
    "psmisc": "mmtests' killall of monitors",
    "time": "mmtests' per-test timing (/usr/bin/time)",
    "xz-utils": "mmtests' logs",
    "bzip2": "mmtests' logs",
    "gzip": "mmtests' logs",
    "hostname": "mmtests' run names",
    "procps": "vmstat, ps and sysctl for the suites and monitors",
    "sysstat": "mmtests' iostat monitor",
    "expect": "mmtests' unbuffer for monitors",
    "iproute2": "the box role's network setup",
    "kmod": "insmod for the highalloc module",
    "kexec-tools": "the box role: kexec into the kernel under test",
    "openssh-server": "the box role: Ansible and the master reach the box over ssh",
    "python3": "the box role: the stackbench worker and Ansible's modules",
    "python3-venv": "the box role: the worker's virtual environment",
    "python3-apt": "the box role: Ansible's package_facts checks an offline box's packages",
    "sudo": "the box role: the worker's sudoers rule for stackbench-kexec",
    "ca-certificates": "the box role: uploads over https",
    # the baremetal_worker role's packages (its offline check wants every one of them), and
    # what the worker on a box compiles the guest programs and upstream suites with
    "build-essential": "the box role: gcc -static for the guest programs",
    "libnuma-dev": "the box role: upstream thpscale links libnuma statically",
    "flex": "the box role (baremetal_worker packages)",
    "bison": "the box role (baremetal_worker packages)",
    "libelf-dev": "the box role (baremetal_worker packages)",
    "libssl-dev": "the box role (baremetal_worker packages)",
    "ccache": "the box role (baremetal_worker packages)",
    "cpio": "the box role (baremetal_worker packages)",
    "git": "the box role: upstream suites are fetched with git",
}
# run by mmdebstrap after the packages are in ("$1" is the root); writes the ext4 file to
# $SB_IMAGE_OUT with room to spare
HOOK = r"""set -eu
root="$1"
echo stackbench-guest > "$root/etc/hostname"
printf '/dev/vda / ext4 rw,relatime 0 1\n' > "$root/etc/fstab"
# no apt caches or lists in the image; nothing there fetches at run time
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*_Packages
mkdir -p "$root/stackbench" "$root/results"
install -m 755 "$SB_IMAGE_INIT" "$root/sbin/stackbench-init"
# host keys are made on the first boot (image-init.sh), not shared by every image
rm -f "$root"/etc/ssh/ssh_host_*
# mmdebstrap has /proc, /sys and /dev mounted in the root now; a plain (not recursive) bind
# mount shows the tree without them
view=$(mktemp -d)
mount --bind "$root" "$view"
trap 'umount "$view"; rmdir "$view"' EXIT
used=$(du -sm "$view" | cut -f1)
mke2fs -q -F -t ext4 -L stackbench -m 0 -E root_owner=0:0 -d "$view" "$SB_IMAGE_OUT" \
    "$((used * 12 / 10 + SB_FREE_MB))M"
"""


@dataclass
class Image:
    """A built image: the ext4 file and what went into it."""

    name: str
    path: Path
    key: str
    packages: list[str]
    build_s: float
    size_bytes: int  # apparent size of the ext4 file
    used_bytes: int  # blocks it takes on the host (it is sparse)
    reused: bool = False


def packages() -> list[str]:
    return sorted(PACKAGES)


def key(pkgs: list[str] | None = None) -> str:
    """The content key of the image: suite, packages, recipe; 16 hex digits."""
    init = INIT.read_text()
    data = json.dumps([RECIPE_VERSION, SUITE, sorted(pkgs or packages()), HOOK, FREE_MB, init])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def images_dir() -> Path:
    path = paths.cache_root() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def mirror() -> str:
    return config.get(MIRROR_ENV)


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise InputError(name, f"no guest image named {name!r} (known: {', '.join(NAMES)})")


def find(name: str = "debian") -> Image | None:
    """The cached image for today's recipe, or None."""
    _check_name(name)
    d = images_dir() / key()
    meta_path = d / "build.json"
    if not (d / IMAGE_FILE).is_file() or not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    return Image(
        name=name,
        path=d / IMAGE_FILE,
        key=key(),
        packages=meta["packages"],
        build_s=meta["build_s"],
        size_bytes=meta["size_bytes"],
        used_bytes=meta["used_bytes"],
        reused=True,
    )


def ensure(name: str = "debian", *, log_path: Path | None = None) -> Image:
    """The image, from the cache or built now (about two minutes with a nearby mirror)."""
    _check_name(name)
    with paths.locked(f"image-{key()}"):
        found = find(name)
        if found is not None:
            return found
        return _build(name, log_path)


def _build(name: str, log_path: Path | None) -> Image:
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise StackbenchError("building the Debian image needs mmdebstrap (apt install mmdebstrap)")
    if shutil.which("mke2fs") is None and not Path("/sbin/mke2fs").exists():
        raise StackbenchError("building the Debian image needs mke2fs (apt install e2fsprogs)")
    pkgs = packages()
    final = images_dir() / key()
    tmp = Path(tempfile.mkdtemp(prefix=f".{key()}.", dir=images_dir()))
    out = tmp / IMAGE_FILE
    log_path = log_path or tmp / "build.log"
    env = {
        **os.environ,
        "SB_IMAGE_OUT": str(out),
        "SB_FREE_MB": str(FREE_MB),
        "SB_IMAGE_INIT": str(INIT),
    }
    unshare = shutil.which("unshare")
    if unshare is None:
        raise StackbenchError("building the Debian image needs unshare (apt install util-linux)")
    # every mount of the build (the chroot's /proc, /sys, /dev, the hook's bind) stays in a
    # private namespace that ends with the build; nothing can be left mounted on the host
    argv = [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        mmdebstrap,
        "--mode=unshare",
        "--variant=minbase",
        f"--include={','.join(pkgs)}",
        "--format=null",
        f"--customize-hook={HOOK}",
        SUITE,
        "/dev/null",
        f"deb {mirror()} {SUITE} main",
    ]
    started = time.monotonic()
    try:
        with open(log_path, "w") as log:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=BUILD_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise StackbenchError(
                    f"image {name}: mmdebstrap did not finish in {BUILD_TIMEOUT_S} s"
                ) from None
        if done.returncode != 0 or not out.is_file():
            kept = images_dir() / "failed-build.log"
            shutil.copyfile(log_path, kept)
            tail = proc.tail_text(log_path, 8).strip()
            raise StackbenchError(f"image {name}: mmdebstrap failed (log: {kept}):\n{tail}")
        build_s = time.monotonic() - started
        st = out.stat()
        meta = {
            "name": name,
            "key": key(),
            "suite": SUITE,
            "mirror": mirror(),
            "packages": pkgs,
            "build_s": round(build_s, 1),
            "size_bytes": st.st_size,
            "used_bytes": st.st_blocks * 512,
            "mmdebstrap": proc.run([mmdebstrap, "--version"]).stdout.strip(),
        }
        (tmp / "build.json").write_text(json.dumps(meta, indent=1) + "\n")
        if final.exists():  # a stale directory without an image (an old crash)
            shutil.rmtree(final)
        os.replace(tmp, final)
        (images_dir() / "failed-build.log").unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = find(name)
    assert found is not None
    found.reused = False
    return found


def drive_args(image: Path, *, snapshot: bool = True) -> list[str]:
    """QEMU arguments that attach ``image`` as the first virtio disk (/dev/vda). With
    ``snapshot`` the guest's writes go to a temporary overlay and the cached image stays as
    built, so every boot starts from the same bytes."""
    opts = f"file={image},format=raw,if=virtio"
    if snapshot:
        opts += ",snapshot=on"
    return ["-drive", opts]
