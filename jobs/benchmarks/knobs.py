"""System knobs and the scenario stage: parameters any job may carry besides its suite's.

A job's system parameters (schema.yaml's ``system``) say how the guest is set up before each
run: THP modes, any ``vm.*`` sysctl, kernel command line additions, a kernel configuration
fragment the kernel must satisfy, and a scenario stage (fragmented memory, a hogger, a
background load) that runs before the benchmark and holds its state through it.

This module owns the two formats between host and guest:

- ``/stackbench/jobs/<name>.knobs``: ``<knob> <path> <value>`` per line, what the guest's
  /init writes before each run (and restores to the boot-time value before the next job);
- ``<run>/knobs``: ``<knob> <value>`` per line, what the guest read back after writing,
  plus a fixed set of knobs every run records whether or not the job set them.

A knob the kernel lacks (no such file) or refuses (the write fails, or reads back another
value) fails the run with that reason; it never silently runs on the kernel's default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

THP = "/sys/kernel/mm/transparent_hugepage"
# knob -> the file the guest writes; vm.* sysctls map to /proc/sys/vm/<name>
FILES = {
    "thp_enabled": f"{THP}/enabled",
    "thp_defrag": f"{THP}/defrag",
    "khugepaged_defrag": f"{THP}/khugepaged/defrag",
}
# stage parameters: not files, but what the scenario stage does
STAGE_PARAMS = ("scenario", "hogger", "bgload", "settle")
# knobs every run records, set or not: the state seed 000/001 experiments depend on
RECORDED = (
    "thp_enabled",
    "thp_defrag",
    "khugepaged_defrag",
    "vm.compaction_proactiveness",
    "vm.extfrag_threshold",
    "vm.min_free_kbytes",
    "vm.watermark_scale_factor",
    "vm.watermark_boost_factor",
)
_SYSCTL = re.compile(r"^vm\.([a-z0-9_]+)$")


def knob_path(name: str) -> str:
    """The guest file behind a knob name (``thp_enabled``, ``vm.compaction_proactiveness``)."""
    if name in FILES:
        return FILES[name]
    m = _SYSCTL.match(name)
    if not m:
        raise KeyError(name)
    return f"/proc/sys/vm/{m.group(1)}"


@dataclass
class SystemSetup:
    """A sub-job's system parameters, split by where they act."""

    knobs: dict[str, str] = field(default_factory=dict)  # written in the guest before a run
    cmdline: str = ""  # on the kernel command line of the boot
    kconfig: str = ""  # a fragment the kernel's .config must satisfy
    stage: dict[str, Any] = field(default_factory=dict)  # the scenario stage's parameters

    def env(self) -> dict[str, Any]:
        """The scenario stage's resolved parameters (shell variables for scenario.sh)."""
        if not self.stage:
            return {}
        return {
            "SCENARIO": self.stage.get("scenario", "none"),
            "HOGGER_MB": self.stage.get("hogger", 0),
            "BGLOAD": self.stage.get("bgload", "none"),
            "SETTLE_S": self.stage.get("settle", 0),
        }


def split(params: dict[str, Any]) -> SystemSetup:
    """The system part of a sub-job's params (the suite's own params are left alone)."""
    out = SystemSetup()
    for key, value in params.items():
        if key in STAGE_PARAMS:
            out.stage[key] = value
        elif key == "cmdline":
            out.cmdline = str(value)
        elif key == "kconfig":
            out.kconfig = str(value)
        elif key in FILES or _SYSCTL.match(key):
            out.knobs[key] = str(value)
    return out


def knobs_text(knobs: dict[str, str]) -> str:
    """``<name>.knobs`` for the guest: ``<knob> <path> <value>`` per line."""
    return "".join(f"{k} {knob_path(k)} {v}\n" for k, v in sorted(knobs.items()))


def all_paths_text(plan_knobs: list[dict[str, str]]) -> str:
    """``/stackbench/knobs``: every knob any job of the boot sets or every run records,
    ``<knob> <path>``; /init saves their boot-time values and restores them between jobs."""
    names = set(RECORDED)
    for k in plan_knobs:
        names |= set(k)
    return "".join(f"{n} {knob_path(n)}\n" for n in sorted(names))


def plan_cmdline(cmdlines: list[str]) -> str:
    """The command line additions of one boot: every sub-job's words, once each. Two jobs
    that set the same parameter differently cannot share a boot."""
    seen: dict[str, str] = {}
    for line in cmdlines:
        for word in line.split():
            key = word.split("=", 1)[0]
            if key in seen and seen[key] != word:
                raise ValueError(
                    f"kernel command line: {seen[key]!r} and {word!r} in one boot; "
                    "run these jobs separately"
                )
            seen[key] = word
    return " ".join(seen.values())


def parse_readback(text: str) -> dict[str, str]:
    """``<run>/knobs``: ``<knob> <value>`` per line (the value may hold spaces)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if name:
            out[name] = " ".join(value.split())
    return out


def mismatches(wanted: dict[str, str], got: dict[str, str]) -> list[str]:
    """Knobs whose read-back value is not what the job asked for, as readable lines."""
    bad = []
    for k, v in sorted(wanted.items()):
        seen = got.get(k)
        if seen is None:
            bad.append(f"knob {k}: not read back")
        elif " ".join(str(v).split()) != seen:
            bad.append(f"knob {k}: asked for {v!r}, the kernel reads back {seen!r}")
    return bad


def kconfig_problems(fragment: str, config_path: Path) -> list[str]:
    """What the kernel's configuration (an artifact's ``config``) lacks of a fragment."""
    from stackbench.kernels import config as kconfig

    wanted = kconfig.parse_fragment(kconfig.fragment_path(fragment))
    if not config_path.is_file():
        return [f"kconfig {fragment}: the kernel's configuration is not available to check"]
    final = kconfig.parse_config(config_path)
    return [f"kconfig {fragment}: {m}" for m in kconfig.find_mismatches(wanted, final)]


def boot_setup(plan: list[Any], config_path: Path) -> tuple[str, list[tuple[Any, str]]]:
    """For one boot of ``plan`` (sub-jobs): the kernel command line additions, and the
    sub-jobs that cannot run on this kernel with the reason (a config fragment it does not
    satisfy, a command line parameter another job of the boot sets differently)."""
    refused: list[tuple[Any, str]] = []
    accepted: list[str] = []
    for sj in plan:
        setup: SystemSetup = sj.setup
        if setup.kconfig:
            problems = kconfig_problems(setup.kconfig, config_path)
            if problems:
                refused.append((sj, "; ".join(problems)))
                continue
        try:
            plan_cmdline([*accepted, setup.cmdline])
        except ValueError as exc:
            refused.append((sj, str(exc)))
            continue
        accepted.append(setup.cmdline)
    return plan_cmdline(accepted), refused
