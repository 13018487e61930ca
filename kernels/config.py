"""Kernel configurations: ``tinyconfig`` plus a fragment from ``kernels/configs/<name>.config``,
merged with the tree's own ``scripts/kconfig/merge_config.sh``.

The config is generated in a scratch object dir (never the build's object dir), so the build's
``.config`` is only replaced, and its timestamp only moves, when the content really changed:
otherwise every commit of a stack would rebuild from scratch.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from stackbench import proc
from stackbench.errors import InputError, NotFoundError, StackbenchError

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
BASE_TARGET = "tinyconfig"

_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


class ConfigError(StackbenchError):
    """The merged configuration does not hold what the fragment asked for."""


def fragment_path(name: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise InputError(name, "not a valid config name")
    path = CONFIGS_DIR / f"{name}.config"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.config")))
        raise NotFoundError(f"no kernel config fragment named {name!r} (known: {known})")
    return path


def parse_fragment(path: Path) -> dict[str, str]:
    """``CONFIG_X -> value`` ('n' for ``# CONFIG_X is not set``); other comments are skipped,
    anything else is an InputError naming the line."""
    out: dict[str, str] = {}
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _UNSET.match(line):
            out[m.group(1)] = "n"
        elif m := _SET.match(line):
            out[m.group(1)] = m.group(2)
        elif line.startswith("#"):
            continue
        else:
            raise InputError(f"{path}:{no}", f"not a config line: {raw!r}")
    return out


def parse_config(path: Path) -> dict[str, str]:
    """A full .config as ``CONFIG_X -> value``; unset symbols are 'n'."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if m := _SET.match(line):
            out[m.group(1)] = m.group(2)
        elif m := _UNSET.match(line):
            out[m.group(1)] = "n"
    return out


def find_mismatches(wanted: dict[str, str], final: dict[str, str]) -> list[str]:
    """Fragment entries the final config did not honour (missing dependencies, renames)."""
    bad = []
    for sym, value in wanted.items():
        got = final.get(sym, "n")
        if got != value:
            bad.append(f"{sym}={value} requested, got {'unset' if got == 'n' else got}")
    return bad


def config_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fragment_digest(name: str) -> str:
    """Identity of what a config name means today (its fragment text and the base target)."""
    data = BASE_TARGET.encode() + b"\0" + fragment_path(name).read_bytes()
    return hashlib.sha256(data).hexdigest()


def make_argv(src: Path, obj: Path, *targets: str, jobs: int | None = None) -> list[str]:
    argv = ["make", "-C", str(src), f"O={obj}", "ARCH=x86_64"]
    if jobs:
        argv.append(f"-j{jobs}")
    return [*argv, *targets]


def generate(
    src: Path,
    scratch: Path,
    name: str,
    *,
    env: dict[str, str],
    log_path: Path | None = None,
) -> Path:
    """Write ``scratch/.config`` for the source tree ``src``: tinyconfig, then the fragment
    merged with merge_config.sh (allnoconfig fill, as tinyconfig itself does). Returns its
    path; ConfigError lists every fragment entry that did not survive."""
    frag = fragment_path(name)
    wanted = parse_fragment(frag)
    scratch.mkdir(parents=True, exist_ok=True)
    out = proc.run(make_argv(src, scratch, BASE_TARGET), env=env, check=False)
    text = out.stdout
    if out.returncode == 0:
        merge = src / "scripts" / "kconfig" / "merge_config.sh"
        # run in the object dir: the script keeps its temporary files in the working
        # directory and calls make there, where O= left a Makefile pointing at the source
        env2 = {**env, "ARCH": "x86_64"}
        out = proc.run(
            ["sh", merge, "-n", "-O", scratch, scratch / ".config", frag],
            cwd=scratch,
            env=env2,
            check=False,
        )
        text += out.stdout
    if log_path is not None:
        with open(log_path, "a") as fh:
            fh.write(text)
    if out.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise ConfigError(f"config {name}: generating the configuration failed:\n{tail}")
    final = scratch / ".config"
    bad = find_mismatches(wanted, parse_config(final))
    if bad:
        raise ConfigError(f"{frag}: not honoured by the kernel's Kconfig: " + "; ".join(bad))
    return final


def install(generated: Path, objdir: Path) -> bool:
    """Copy a generated config into the build's object dir only when it differs (keeping
    make's timestamps still for an unchanged config). True when it was replaced."""
    target = objdir / ".config"
    new = generated.read_bytes()
    try:
        if target.read_bytes() == new:
            return False
    except FileNotFoundError:
        pass
    objdir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(".config.stackbench-tmp")
    tmp.write_bytes(new)
    os.replace(tmp, target)
    return True
