"""mmtests' THP benchmarks run by mmtests' own ``run-mmtests.sh`` in the Debian guest image
(``image=debian``): thpscale, thpchallenge and thpcompact, each with its runner here.

A job of one of them with ``image=debian`` (and ``suite_source=upstream``, the default where the
source is there) boots with the Debian image (image.py) as its disk; the initramfs carries
the whole mmtests tree of the pinned commit under /stackbench/upstream/mmtests, and
``run-<suite>-mmtests.sh`` runs mmtests' ``run-mmtests.sh`` on a config of that benchmark in a
chroot of the image. The parsers are the thpscale ones: same files, same metric names.

The job's identity carries ``image=debian`` (a separate job from plain upstream thpscale,
never pooled with it), its suite version the runner's hash and the image's content key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks import suites
from stackbench.jobs.benchmarks.guest import image

RUNNERS = {suite: f"run-{suite}-mmtests.sh" for suite in ("thpscale", "thpchallenge", "thpcompact")}
RUNNER = RUNNERS["thpscale"]
# what every runner sources: part of each one's version
LIBRARY = "mmtests-runner.sh"
SUITES = tuple(RUNNERS)
# the kernel config fragment that has what the image needs (virtio-blk, ext4)
KCONFIG = "debian-guest"
TREE_DIR = "mmtests"


def setup_subjob(
    suite: str,
    params: dict[str, Any],
    resolved: dict[str, Any],
    setup: Any,
    upstream: suites.Upstream | None,
    version: str,
    where: str,
) -> str:
    """Make a sub-job with ``params["image"]`` run in the image: its runner and disk in
    ``resolved``, the kernel config it needs in ``setup``; returns its suite version."""
    name = params["image"]
    if name not in image.NAMES:
        raise InputError(where, f"params.image: {name!r} is not one of {image.NAMES}")
    if suite not in SUITES:
        raise InputError(where, f"params.image: {suite} does not run in an image")
    if upstream is None:
        raise InputError(
            where,
            "params.image: the image runs mmtests' own run-mmtests.sh, which needs "
            "suite_source=upstream (and its source)",
        )
    resolved["SB_RUNNER"] = RUNNERS[suite]
    resolved["SB_IMAGE"] = name
    if not setup.kconfig:
        setup.kconfig = KCONFIG
    here = Path(__file__).resolve().parent
    h = hashlib.sha256((here / RUNNERS[suite]).read_bytes())
    h.update((here / LIBRARY).read_bytes())
    runner = h.hexdigest()[:8]
    return f"{version}+mmtests-{runner}+{name}-{image.key()}"


def wants_image(sj: Any) -> str | None:
    """The image a sub-job boots with, or None."""
    return sj.resolved.get("SB_IMAGE")


def tree_files(up: suites.Upstream) -> dict[str, Path]:
    """The upstream checkout (without .git) as guest files under /stackbench/upstream."""
    src = suites.fetch(up)
    out: dict[str, Path] = {}
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if rel.parts[0] == ".git" or not p.is_file():
            continue
        out[f"{TREE_DIR}/{rel.as_posix()}"] = p
    return out


def plan_drives(plan: list[Any]) -> tuple[list[str], list[tuple[Any, str]]]:
    """QEMU arguments for the disk the plan's sub-jobs need (the image built on first use),
    and the sub-jobs that cannot run with the reason (the image cannot be built here)."""
    users = [sj for sj in plan if wants_image(sj)]
    if not users:
        return [], []
    names = sorted({wants_image(sj) for sj in users})
    if len(names) > 1:
        why = f"one boot cannot attach several images: {', '.join(names)}"
        return [], [(sj, why) for sj in users]
    try:
        img = image.ensure(names[0])
    except StackbenchError as exc:
        why = f"image {names[0]}: {str(exc).splitlines()[0]}"
        return [], [(sj, why) for sj in users]
    return image.drive_args(img.path), []
