"""Build steps: the fan-out triggers, the worker commands and the lost-attempt lookup.

Heavy work runs on workers as ``stackbench worker ...`` commands (argument lists, no shell);
the master only decides what to trigger and moves kernel artifacts between workers.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from buildbot.plugins import steps, util
from buildbot.process import buildstep
from buildbot.process.results import RETRY, SUCCESS
from twisted.internet import defer

from stackbench.jobs.buildbot.config import BuildbotConfig

ARTIFACT = "kernel.tar"


def split_list(value: Any) -> list[str]:
    """A property given as a list or as a comma/space separated string."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [p for p in str(value).replace(",", " ").split() if p]


def build_scheduler(tree: str, config: str) -> str:
    return f"trigger-build-{tree}-{config}"


def bench_scheduler(kind: str) -> str:
    return f"trigger-bench-{kind}"


# properties handed down from a submission to every build and benchmark it causes
CARRIED = ("series", "submission", "jobs", "runs", "kinds", "min_cpus", "min_memory_mb", "title")


class FanOutBuilds(steps.Trigger):
    """One kernel build per (commit, kernel config) of a submission.

    The commits come from the ``commits`` property (the submitter resolved the series into
    its base and applied commits) or from a ``plan`` property written by a planning step.
    """

    def __init__(self, cfg: BuildbotConfig, **kwargs: Any) -> None:
        self.cfg = cfg
        names = [build_scheduler(k.tree, k.config) for k in cfg.kernel_configs]
        kwargs.setdefault("name", "fan out kernel builds")
        super().__init__(schedulerNames=names, waitForFinish=False, **kwargs)

    def _commits(self) -> list[dict[str, str]]:
        plan = self.getProperty("plan")
        if plan:
            data = json.loads(plan) if isinstance(plan, str) else plan
            return [{"commit": c["commit"], "name": c.get("name", "")} for c in data["commits"]]
        return [{"commit": c, "name": ""} for c in split_list(self.getProperty("commits"))]

    def getSchedulersAndProperties(self) -> list[dict[str, Any]]:
        submission = self.getProperty("submission") or uuid.uuid4().hex
        self.setProperty("submission", submission, "FanOutBuilds")
        carried = {p: self.getProperty(p) for p in CARRIED if self.getProperty(p) is not None}
        carried["submission"] = submission
        out = []
        for kc in self.cfg.kernel_configs:
            for position, item in enumerate(self._commits()):
                props = dict(carried)
                props.update(
                    commit=item["commit"],
                    kernel_name=item["name"],
                    position=position,
                    tree=kc.tree,
                    kernel_config=kc.config,
                )
                out.append(
                    {
                        "sched_name": build_scheduler(kc.tree, kc.config),
                        "props_to_set": props,
                        "unimportant": False,
                    }
                )
        return out


class FanOutBenches(steps.Trigger):
    """After a kernel is built: one benchmark build per (job, machine kind)."""

    def __init__(self, cfg: BuildbotConfig, kinds: list[str], **kwargs: Any) -> None:
        self.cfg = cfg
        self.kinds = kinds
        kwargs.setdefault("name", "fan out benchmarks")
        super().__init__(
            schedulerNames=[bench_scheduler(k) for k in kinds], waitForFinish=False, **kwargs
        )

    def getSchedulersAndProperties(self) -> list[dict[str, Any]]:
        jobs = split_list(self.getProperty("jobs")) or list(self.cfg.jobs)
        wanted = split_list(self.getProperty("kinds")) or list(self.kinds)
        kinds = [k for k in wanted if k in self.kinds]
        artifact = artifact_path(self.getProperty("buildername"), self.getProperty("buildnumber"))
        base = {p: self.getProperty(p) for p in CARRIED if self.getProperty(p) is not None}
        for p in ("commit", "kernel_name", "position", "tree", "kernel_config"):
            base[p] = self.getProperty(p)
        base["artifact"] = artifact
        base["runs"] = int(self.getProperty("runs") or self.cfg.runs)
        out = []
        for job in jobs:
            for kind in kinds:
                props = dict(base, job=job, machine_kind=kind)
                out.append(
                    {
                        "sched_name": bench_scheduler(kind),
                        "props_to_set": props,
                        "unimportant": False,
                    }
                )
        return out


def artifact_path(buildername: str, buildnumber: int) -> str:
    """Where the master keeps a built kernel (relative to its base directory)."""
    return f"artifacts/{buildername}/{buildnumber}/{ARTIFACT}"


class FindLostAttempts(buildstep.BuildStep):
    """On the master: earlier attempts of this build request that lost their worker.

    Buildbot retries a build whose worker vanished; this step names those attempts
    (``lost_attempts`` = ["buildid:worker", ...]) so the benchmark step can mark their runs.
    """

    name = "find lost attempts"

    @defer.inlineCallbacks
    def run(self) -> Any:
        lost = []
        for req in self.build.requests:
            builds = yield self.master.data.get(("buildrequests", req.id, "builds"))
            for b in builds:
                if b["buildid"] == self.build.buildid or b["results"] != RETRY:
                    continue
                wk = yield self.master.data.get(("workers", b["workerid"]))
                lost.append(f"{b['buildid']}:{wk['name'] if wk else b['workerid']}")
        self.setProperty("lost_attempts", lost, "FindLostAttempts")
        self.descriptionDone = [f"{len(lost)} lost attempt(s)"]
        return SUCCESS


def _opt(argv: list[str], flag: str, value: Any) -> None:
    if value not in (None, "", []):
        argv += [flag, str(value)]


def worker_command(cfg: BuildbotConfig, what: str) -> Any:
    """The argv (a renderer over build properties) of one ``stackbench worker`` command."""

    @util.renderer
    def render(props: Any) -> list[str]:
        p = props.getProperty
        # bisect is the bisect engineer's own command; the rest are worker-side commands
        argv = (
            [*cfg.stackbench, "bisect"] if what == "bisect" else [*cfg.stackbench, "worker", what]
        )
        if what == "build":
            argv += ["--commit", str(p("commit")), "--out", "out"]
            _opt(argv, "--tree", p("tree"))
            _opt(argv, "--config", p("kernel_config"))
            _opt(argv, "--series", p("series"))
            _opt(argv, "--name", p("kernel_name"))
        elif what in ("bench", "mark-lost"):
            argv += ["--kernel", ARTIFACT, "--job", str(p("job"))]
            argv += ["--submission", str(p("submission")), "--kind", str(p("machine_kind"))]
            argv += ["--machine", str(p("workername"))]
            _opt(argv, "--cpus", p("cpus"))
            _opt(argv, "--memory-mb", p("memory_mb"))
            _opt(argv, "--series", p("series"))
            build = props.getBuild()
            _opt(argv, "--buildbot-build", getattr(build, "buildid", None))
            if what == "bench":
                argv += ["--runs", str(p("runs") or cfg.runs), "--out", "results"]
            else:
                for attempt in p("lost_attempts") or []:
                    argv += ["--lost", str(attempt)]
        elif what == "upload":
            argv += ["--results", "results"]
        elif what == "plan":
            argv += ["--nightly"]
        elif what == "bisect":
            for name in ("good", "bad", "job", "metric"):
                _opt(argv, f"--{name}", p(name))
        if cfg.dry_kernel and what in ("build", "bench"):
            argv += ["--dry-kernel"]
            if cfg.dry_seconds:
                argv += ["--dry-seconds", str(cfg.dry_seconds)]
        return argv

    return render


def command(cfg: BuildbotConfig, what: str, name: str, **kwargs: Any) -> Any:
    kwargs.setdefault("haltOnFailure", True)
    return steps.ShellCommand(
        name=name,
        command=worker_command(cfg, what),
        timeout=cfg.step_timeout,
        **kwargs,
    )


def has_lost_attempts(step: Any) -> bool:
    return bool(step.getProperty("lost_attempts"))


def plan_from_output(rc: int, stdout: str, stderr: str) -> dict[str, Any]:
    """SetPropertyFromCommand extractor: the planning command prints one JSON document."""
    if rc != 0:
        return {}
    return {"plan": json.loads(stdout)}
