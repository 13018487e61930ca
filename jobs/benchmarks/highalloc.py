"""Build stackbench's highalloc kernel module against one kernel build.

The module is compiled out of tree (``make -C <objdir> M=<copy> modules``) against the
kernel's own object dir, so it matches that exact kernel; the sources are copied first so
the package folder stays clean and parallel builds for different kernels do not collide.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from stackbench import proc
from stackbench.errors import InputError, StackbenchError
from stackbench.jobs.benchmarks.definitions import WORKLOADS_DIR

MODULE_DIR = WORKLOADS_DIR / "highalloc"
MODULE_KO = "stackbench_highalloc.ko"
MODULE_SOURCES = ("stackbench_highalloc.c", "Kbuild", "Makefile")
STAMP = ".stackbench_highalloc.stamp"


def _kernel_config(kernel_obj: Path) -> str:
    cfg = kernel_obj / ".config"
    try:
        return cfg.read_text()
    except OSError:
        raise InputError(cfg, "kernel object dir has no .config (not a configured build)") from None


def _stamp(kernel_obj: Path, config_text: str) -> str:
    return _stamp_of(config_text, kernel_obj / "System.map")


def _stamp_of(config_text: str, smap: Path) -> str:
    h = hashlib.sha256()
    for name in MODULE_SOURCES:
        h.update(name.encode() + b"\0" + (MODULE_DIR / name).read_bytes() + b"\0")
    h.update(config_text.encode())
    # System.map changes with every rebuilt kernel image: a stale module is never reused
    if smap.is_file():
        h.update(smap.read_bytes())
    return h.hexdigest()


def module_current(art: Path) -> bool:
    """Whether the module in a kernel artifact (``art/modules``) was built from today's
    sources for that kernel: the artifact keeps the kernel's config and System.map, so
    the build's stamp can be checked without its object dir."""
    try:
        config_text = (art / "config").read_text()
        stamp = (art / "modules" / STAMP).read_text()
    except OSError:
        return False
    return _stamp_of(config_text, art / "System.map") == stamp


def build_module(kernel_src: Path, kernel_obj: Path, out_dir: Path) -> Path:
    """``out_dir/stackbench_highalloc.ko`` built for the kernel in ``kernel_obj``."""
    kernel_src, kernel_obj, out_dir = Path(kernel_src), Path(kernel_obj), Path(out_dir)
    config_text = _kernel_config(kernel_obj)
    if "CONFIG_MODULES=y" not in config_text.splitlines():
        raise InputError(kernel_obj / ".config", "CONFIG_MODULES is not set: cannot load modules")
    out = out_dir / MODULE_KO
    stamp = _stamp(kernel_obj, config_text)
    stamp_path = out_dir / STAMP
    if out.is_file() and stamp_path.is_file() and stamp_path.read_text() == stamp:
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="highalloc-") as tmp:
        mdir = Path(tmp) / "highalloc"
        mdir.mkdir()
        for name in MODULE_SOURCES:
            shutil.copy2(MODULE_DIR / name, mdir / name)
        if (kernel_obj / "Makefile").is_file():
            argv = ["make", "-C", kernel_obj, f"M={mdir}", "modules"]
        else:
            # an in-tree build (objdir == source) or an objdir without its wrapper Makefile
            argv = ["make", "-C", kernel_src, f"O={kernel_obj}", f"M={mdir}", "modules"]
        log = Path(tmp) / "build.log"
        res = proc.run(argv, log_path=log, check=False, timeout=600)
        built = mdir / MODULE_KO
        if res.returncode != 0 or not built.is_file():
            tail = "\n".join(res.stdout.strip().splitlines()[-15:])
            raise StackbenchError(f"highalloc module build against {kernel_obj} failed:\n{tail}")
        tmp_out = out_dir / f".{MODULE_KO}.{os.getpid()}"
        shutil.copy2(built, tmp_out)
        os.replace(tmp_out, out)
    stamp_path.write_text(stamp)
    return out


# kernels/build.py asks the builder whether a kept artifact's module is still current
build_module.current = module_current  # type: ignore[attr-defined]
