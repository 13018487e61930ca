"""How kernels are built and booted on this machine (the in-process executor's settings)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from stackbench.resultsdb.rundata import MachineSpec

DEFAULT_JOBS = ("vm-scalability", "thpscale", "stress-highalloc")
DEFAULT_RUNS = 3


@dataclass
class Settings:
    """How kernels are built and booted on this machine."""

    config: str = "tiny-guest"
    cpus: int = 2
    mem_mb: int = 1024
    accel: str = "auto"
    # the whole boot's limit; None: every run's own timeout summed, plus boot slack
    boot_timeout_s: float | None = None
    # a guest that has not printed its banner by then is a hung boot
    init_timeout_s: float = 180.0
    make_jobs: int | None = None
    machine_name: str | None = None
    # more rounds while a headline metric is undecided (jobs/driver/adaptive.py); off: the plan only
    adaptive: bool = True

    def machine(self, accel: str) -> MachineSpec:
        name = self.machine_name or (
            f"qemu-{accel}-{self.cpus}cpu-{self.mem_mb}M@{socket.gethostname()}"
        )
        return MachineSpec(name=name, kind="qemu", cpus=self.cpus, memory_mb=self.mem_mb)
