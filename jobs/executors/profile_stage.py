"""The CPU profile taken on the evidence boot (jobs/executors/coverage_stage.py): whether a
kernel can be profiled and with which symbols (:func:`symbols_for`), and keeping what the
guest's perf sampled during each job on the kernel (:func:`save`,
stackbench.resultsdb.profile_store). The measured boots never run perf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from stackbench.jobs.benchmarks import perfprof
from stackbench.resultsdb import profile_store

# the kernel config symbol perf in the guest needs (x86 selects it: every tiny guest has it)
PERF_EVENTS = "CONFIG_PERF_EVENTS"


def symbols_for(art: Path | None) -> tuple[Path | None, str]:
    """The System.map the evidence boot of the kernel artifact ``art`` symbolizes its
    profile with, or None and why the kernel cannot be profiled."""
    if art is None:
        return None, "the kernel's build artifacts are not kept"
    config = art / "config"
    lines = config.read_text(errors="replace").splitlines() if config.is_file() else []
    if f"{PERF_EVENTS}=y" not in lines:
        return None, f"this kernel was built without {PERF_EVENTS}: the guest cannot run perf"
    system_map = art / "System.map"
    if not system_map.is_file():
        return None, "the kernel's System.map is not kept with its build"
    why = perfprof.available()
    if why:
        return None, f"the host cannot give the guest perf: {why}"
    return system_map, ""


def profile_of(meta: dict[str, Any], why_not: str) -> dict[str, Any]:
    """What an evidence run's meta says of its profile (``why_not`` when none was taken)."""
    return meta.get("profile") or {"error": why_not or "the guest took no profile"}


def save(s: Session, build_id: int, job: str, counted: dict[str, Any]) -> None:
    """Keep the profile an evidence boot's ``job`` took (``counted["profile"]``; a boot
    that failed before it had a profile leaves its reason)."""
    profile = counted.get("profile")
    if profile is None and counted.get("error"):
        profile = {"error": counted["error"]}
    profile_store.save(s, build_id, job, profile)
