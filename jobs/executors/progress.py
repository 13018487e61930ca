"""Progress of a series on a terminal: events per stage and an ETA that corrects itself."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass
class ProgressEvent:
    stage: str  # apply | build | boot | run | ingest | done | failed
    step: int  # 1-based position within the stage
    total: int
    label: str  # the kernel (or series) this is about
    message: str = ""
    elapsed_s: float = 0.0
    eta_s: float | None = None  # time left for the whole series


ProgressFn = Callable[[ProgressEvent], None]


class Eta:
    """Remaining time from per-unit estimates, corrected by how fast units really went."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.pending: dict[str, float] = {}
        self.fraction: dict[str, float] = {}
        self.spent_est = 0.0
        self.spent_real = 0.0

    def plan(self, unit: str, estimate_s: float) -> None:
        self.pending[unit] = estimate_s

    def progress(self, unit: str, fraction: float) -> None:
        """Part of a unit is done (runs finished inside one boot)."""
        self.fraction[unit] = min(1.0, max(0.0, fraction))

    def finish(self, unit: str, real_s: float) -> None:
        est = self.pending.pop(unit, None)
        self.fraction.pop(unit, None)
        if est:
            self.spent_est += est
            self.spent_real += real_s

    def remaining(self) -> float | None:
        """Seconds left, or None before anything is planned."""
        if not self.pending:
            return None
        left = sum(est * (1 - self.fraction.get(u, 0.0)) for u, est in self.pending.items())
        if self.spent_est > 30:
            left *= min(3.0, max(0.3, self.spent_real / self.spent_est))
        return left

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class StderrProgress:
    """One line per event on stderr: ``[ 1m02s] build 2/4  label  message  (eta 3m10s)``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, ev: ProgressEvent) -> None:
        step = f" {ev.step}/{ev.total}" if ev.total else ""
        eta = f"  (eta {fmt_duration(ev.eta_s)})" if ev.eta_s is not None else ""
        msg = f"  {ev.message}" if ev.message else ""
        label = f"  {ev.label}" if ev.label else ""
        print(
            f"[{fmt_duration(ev.elapsed_s):>6}] {ev.stage}{step}{label}{msg}{eta}",
            file=self.stream,
            flush=True,
        )


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
