"""The patch stacks shipped with stackbench: ``git format-patch`` files against Linux 6.1.

``compaction-demo`` is what ``stackbench demo`` submits; ``broken-apply``, ``broken-build``,
``panic-boot`` and ``hang-boot`` each fail at one stage of the pipeline on purpose. Each
folder holds the patch files (cover letter first, as ``0000-cover-letter.patch``) and a
``stack.yaml`` describing the stack and the effects to expect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stackbench.errors import InputError, NotFoundError

STACKS_DIR = Path(__file__).resolve().parent


def list_stacks() -> list[str]:
    """Names of the shipped stacks, sorted."""
    return sorted(
        p.name for p in STACKS_DIR.iterdir() if p.is_dir() and (p / "stack.yaml").is_file()
    )


def stack_dir(name: str) -> Path:
    if name not in list_stacks():
        known = ", ".join(list_stacks())
        raise NotFoundError(f"no shipped stack {name!r} (known: {known})")
    return STACKS_DIR / name


def stack_files(name: str) -> list[Path]:
    """The stack's patch files in mbox order (``0000-cover-letter.patch`` first)."""
    files = sorted(stack_dir(name).glob("*.patch"))
    if not files:
        raise InputError(stack_dir(name), "stack has no .patch files")
    return files


def stack_info(name: str) -> dict[str, Any]:
    """The stack's ``stack.yaml``: name, description, tree, base, files, expected effects."""
    path = stack_dir(name) / "stack.yaml"
    try:
        info = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(path, f"invalid YAML: {exc}".splitlines()[0]) from exc
    if not isinstance(info, dict) or info.get("name") != name:
        raise InputError(path, f"expected a mapping with name: {name}")
    return info


def stack_mbox(name: str) -> bytes:
    """The whole stack as one mbox, cover letter first."""
    parts = []
    for f in stack_files(name):
        data = f.read_bytes().rstrip(b"\n")
        # a blank line after each mail keeps the next "From " separator unambiguous
        parts.append(data + b"\n\n")
    return b"".join(parts)
