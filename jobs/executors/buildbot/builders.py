"""Builders: the series fan-out, kernel builds per (tree, config), benchmarks per machine
kind, bisect and nightly.

The series coordinator, the rounds, the nightly run and a bisect only hand work to other
builds (the nightly's and a bisect's comparisons go through the master's REST API like a
series'), so they take no machine lock; kernel builds and benchmarks hold the per-worker
machine lock, which makes independent work spread over as many workers as exist while no
machine runs two heavy things at once.
"""

from __future__ import annotations

import json
from typing import Any

from buildbot.plugins import steps, util

from stackbench.jobs.executors.buildbot import box_steps
from stackbench.jobs.executors.buildbot import steps as sb
from stackbench.jobs.executors.buildbot import workers as wk
from stackbench.jobs.executors.buildbot.config import BuildbotConfig

SERIES = "series"
ROUNDS = "rounds"
NIGHTLY = "nightly"
BISECT = "bisect"


def built_kernel(rc: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The ``kernel`` property of a kernel build: the worker's last line (``kernel.json``'s
    keys), which the dispatcher records as soon as the build ends."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if rc != 0 or not lines:
        return {}
    try:
        last = json.loads(lines[-1])
    except ValueError:
        return {}
    return {"kernel": last["kernel"]} if isinstance(last, dict) and "kernel" in last else {}


def bench_builder(kind: str) -> str:
    return f"bench-{kind}"


def bench_kinds(cfg: BuildbotConfig) -> list[str]:
    """Machine kinds that have at least one worker (a builder needs one)."""
    return [k for k in cfg.kinds if cfg.workers_of(k)]


def _series_factory(cfg: BuildbotConfig) -> util.BuildFactory:
    f = util.BuildFactory()
    f.addStep(sb.FanOutBuilds(cfg))
    return f


def _nightly_factory(cfg: BuildbotConfig) -> util.BuildFactory:
    # the nightly compares each tracked head with its baseline and bisects, every comparison
    # driven like a series: its kernels built by the build builders, its rounds shared out
    # over every idle worker of the machine kind (``stackbench nightly --buildbot``)
    f = util.BuildFactory()
    f.addStep(sb.command(cfg, "nightly", "nightly run of tracked branches"))
    return f


def _build_factory(cfg: BuildbotConfig) -> util.BuildFactory:
    f = util.BuildFactory()
    f.addStep(
        steps.SetPropertyFromCommand(
            name="build kernel",
            command=sb.worker_command(cfg, "build"),
            extract_fn=built_kernel,
            haltOnFailure=True,
            timeout=cfg.step_timeout,
        )
    )
    f.addStep(
        steps.FileUpload(
            name="store kernel",
            workersrc=f"out/{sb.ARTIFACT}",
            masterdest=util.Interpolate(
                "artifacts/%(prop:buildername)s/%(prop:buildnumber)s/" + sb.ARTIFACT
            ),
            haltOnFailure=True,
        )
    )
    f.addStep(sb.FanOutBenches(cfg, bench_kinds(cfg), doStepIf=sb.benches_now))
    return f


def _rounds_factory() -> util.BuildFactory:
    f = util.BuildFactory()
    f.addStep(sb.BootRounds())
    return f


def _bench_factory(cfg: BuildbotConfig, kind: str = "qemu") -> util.BuildFactory:
    f = util.BuildFactory()
    if kind != "baremetal":
        # a build is one round of boots (or one boot): lost with its worker, it runs again
        # on another worker of the kind, once; then it fails and says so (all in RunBoots,
        # and each boot uploads its own runs: worker bench --upload, one interpreter less)
        f.addStep(sb.RunBoots(cfg))
        return f
    f.addStep(sb.FindLostAttempts())
    f.addStep(
        steps.FileDownload(
            name="fetch kernel",
            mastersrc=util.Property("artifact"),
            workerdest=sb.ARTIFACT,
            haltOnFailure=True,
        )
    )
    f.addStep(sb.command(cfg, "mark-lost", "mark lost runs", doStepIf=sb.has_lost_attempts))
    # the box runs the job itself after a kexec and uploads its runs; the master waits
    # for them through the API while the box is away
    f.addStep(box_steps.GiveUpAfterLostAttempts(cfg.baremetal_attempts))
    f.addStep(box_steps.queue_on_box(cfg))
    f.addStep(box_steps.AwaitReport(cfg))
    return f


def _bisect_factory(cfg: BuildbotConfig) -> util.BuildFactory:
    f = util.BuildFactory()
    f.addStep(sb.command(cfg, "bisect", "bisect"))
    return f


def coordinators(cfg: BuildbotConfig) -> list[str]:
    """Workers for the lock-free coordinating builders: not bare-metal boxes when there is
    anything else, because a box may reboot (kexec) while a coordinator runs on it."""
    steady = [w.name for w in cfg.workers if w.kind != "baremetal"]
    return steady or [w.name for w in cfg.workers]


def make(cfg: BuildbotConfig) -> list[Any]:
    everyone = [w.name for w in cfg.workers]
    lock = wk.machine_lock(cfg)
    heavy = [lock.access("exclusive")]
    calm = coordinators(cfg)
    out = [
        util.BuilderConfig(name=SERIES, workernames=calm, factory=_series_factory(cfg)),
        # takes no machine lock: it only waits for the rounds it hands to the workers
        util.BuilderConfig(name=ROUNDS, workernames=calm, factory=_rounds_factory()),
        # the nightly and a bisect only drive comparisons whose builds and rounds the other
        # builders run: no machine lock, which would keep their own rounds off their worker
        util.BuilderConfig(name=NIGHTLY, workernames=calm, factory=_nightly_factory(cfg)),
        util.BuilderConfig(name=BISECT, workernames=calm, factory=_bisect_factory(cfg)),
    ]
    for kc in cfg.kernel_configs:
        out.append(
            util.BuilderConfig(
                name=kc.builder,
                workernames=everyone,
                factory=_build_factory(cfg),
                locks=heavy,
                properties={"tree": kc.tree, "kernel_config": kc.config},
            )
        )
    for kind in bench_kinds(cfg):
        out.append(
            util.BuilderConfig(
                name=bench_builder(kind),
                workernames=[w.name for w in cfg.workers_of(kind)],
                factory=_bench_factory(cfg, kind),
                locks=heavy,
                canStartBuild=wk.can_start_build,
            )
        )
    return out
