"""Kernel configurations: ``tinyconfig`` plus a fragment from ``kernels/configs/<name>.config``,
merged with the tree's own ``scripts/kconfig/merge_config.sh``.

A config name may stack fragments: ``tiny-guest+debug-vm`` is the guest's fragment with a
job's ``kconfig=debug-vm`` merged over it (:func:`compose`). It is a configuration of its own:
its own workspace, config hash and artifacts, so kernels with and without a job's fragment
are different builds and their runs are never pooled.

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


def compose(base: str, fragment: str) -> str:
    """The config name of ``base`` with a job's ``fragment`` merged over it."""
    return f"{base}+{fragment}" if fragment else base


def fragment_names(name: str) -> list[str]:
    """The fragments a config name stacks, base first (each one a known fragment)."""
    parts = name.split("+")
    for part in parts:
        fragment_path(part)
    return parts


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
    """Identity of what a config name means today (its fragments' text and the base target)."""
    data = BASE_TARGET.encode()
    for i, part in enumerate(fragment_names(name)):
        # a single fragment keeps the digest it always had (the artifact index stays valid)
        data += (b"\0" if i == 0 else f"\0+{part}\0".encode()) + fragment_path(part).read_bytes()
    return hashlib.sha256(data).hexdigest()


def wanted_values(name: str) -> dict[str, str]:
    """What a config name asks for: its fragments merged in order (the last one wins)."""
    out: dict[str, str] = {}
    for part in fragment_names(name):
        out.update(parse_fragment(fragment_path(part)))
    return out


def _owner(name: str, sym: str) -> str:
    """The fragment a requested symbol comes from (the last one that sets it)."""
    owner = ""
    for part in fragment_names(name):
        if sym in parse_fragment(fragment_path(part)):
            owner = part
    return owner


def tree_has_symbol(src: Path, sym: str) -> bool:
    """Whether any Kconfig file of the tree defines ``sym`` (``config X``/``menuconfig X``)."""
    bare = sym.removeprefix("CONFIG_")
    out = proc.run(
        ["grep", "-rqsE", "--include=Kconfig*", rf"^\s*(menu)?config\s+{bare}\s*$", str(src)],
        check=False,
    )
    return out.returncode == 0


def check(name: str, final: Path, src: Path | None = None) -> None:
    """ConfigError naming the fragment when ``final`` lost what ``name``'s fragments ask:
    a symbol the tree does not have, or one Kconfig dropped (unmet dependencies)."""
    wanted = wanted_values(name)
    got = parse_config(final)
    bad = []
    for sym, value in wanted.items():
        if got.get(sym, "n") == value:
            continue
        have = got.get(sym, "n")
        why = (
            "this tree has no such option"
            if src is not None and not tree_has_symbol(src, sym)
            else f"Kconfig gave {'unset' if have == 'n' else have} (unmet dependencies?)"
        )
        bad.append(f"fragment {_owner(name, sym)}: {sym}={value} requested, {why}")
    if bad:
        raise ConfigError(f"config {name}: not honoured by the kernel's Kconfig: " + "; ".join(bad))


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
    frags = [fragment_path(part) for part in fragment_names(name)]
    scratch.mkdir(parents=True, exist_ok=True)
    out = proc.run(make_argv(src, scratch, BASE_TARGET), env=env, check=False)
    text = out.stdout
    if out.returncode == 0:
        merge = src / "scripts" / "kconfig" / "merge_config.sh"
        # run in the object dir: the script keeps its temporary files in the working
        # directory and calls make there, where O= left a Makefile pointing at the source
        env2 = {**env, "ARCH": "x86_64"}
        out = proc.run(
            ["sh", merge, "-n", "-O", scratch, scratch / ".config", *frags],
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
    check(name, final, src)
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
