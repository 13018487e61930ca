"""Build steps: the fan-out triggers, the worker commands and the lost-attempt lookup (a
bare-metal box's own steps: jobs.executors.buildbot.box_steps).

Heavy work runs on workers as ``stackbench worker ...`` commands (argument lists, no shell);
the master only decides what to trigger and moves kernel artifacts between workers.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from buildbot.plugins import steps, util
from buildbot.process import buildstep
from buildbot.process.results import CANCELLED, FAILURE, RETRY, SUCCESS, WARNINGS
from buildbot.steps.worker import CompositeStepMixin
from twisted.internet import defer, error
from twisted.python.failure import Failure

from stackbench.jobs.executors.buildbot import kept_kernels, master_secrets
from stackbench.jobs.executors.buildbot.config import BuildbotConfig

# the job-spec module's splitter: the dispatcher joins a boot's jobs with it in mind. Imported
# with the master's configuration: imported in split_list, it held the master's one thread
# (every build, every worker's connection) for 0.7 s in the first fan-out of each master
from stackbench.jobs.executors.jobspecs import split_job_specs

ARTIFACT = "kernel.tar"
# stackbench's own commands that drive comparisons through this master
COMPARISONS = ("bisect", "nightly")


def split_list(value: Any) -> list[str]:
    """A property given as a list or as a comma/space separated string; a comma inside a job
    spec's brackets (``vm-scalability[test=anon-w-seq,mem_fraction=0.05]``) does not split."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return split_job_specs(str(value), spaces=True)


def build_scheduler(tree: str, config: str) -> str:
    return f"trigger-build-{tree}-{config}"


def bench_scheduler(kind: str) -> str:
    return f"trigger-bench-{kind}"


# properties handed down from a submission to every build and benchmark it causes
CARRIED = ("series", "submission", "jobs", "runs", "kinds", "min_cpus", "min_memory_mb",
           "title", "report_timeout", "rounds_by", "quarantined")  # fmt: skip

# what the dispatcher sets in a submission whose benchmarks it plans itself, in rounds of
# boots (see BootRounds); without it a kernel build fans out its benchmarks at once
ROUNDS_BY_DISPATCHER = "dispatcher"
# bench properties a boot of a round carries besides the carried ones
BOOT_PROPS = ("commit", "kernel_name", "position", "tree", "kernel_config", "artifact", "job",
              "machine_kind", "runs", "round", "first")  # fmt: skip


class FanOutBuilds(steps.Trigger):
    """One kernel build per (commit, kernel config) of a submission.

    The commits come from the ``commits`` property: the submitter resolved the series into
    its base and applied commits.
    """

    def __init__(self, cfg: BuildbotConfig, **kwargs: Any) -> None:
        self.cfg = cfg
        names = [build_scheduler(k.tree, k.config) for k in cfg.kernel_configs]
        kwargs.setdefault("name", "fan out kernel builds")
        super().__init__(schedulerNames=names, waitForFinish=False, **kwargs)

    def _commits(self) -> list[dict[str, str]]:
        commits = split_list(self.getProperty("commits"))
        names = split_list(self.getProperty("names"))
        if len(names) != len(commits):  # names are optional, and all or nothing
            names = [""] * len(commits)
        return [{"commit": c, "name": n} for c, n in zip(commits, names, strict=True)]

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


def benches_now(step: Any) -> bool:
    """doStepIf of FanOutBenches: not when the dispatcher plans the benchmarks in rounds."""
    return step.getProperty("rounds_by") != ROUNDS_BY_DISPATCHER


class BootRounds(buildstep.BuildStep):
    """On the master: the boots of a plan's rounds (``boots``, a JSON list in the order they
    must run) as one benchmark build per round, all handed to the machine kind's builder at
    once.

    A round (every kernel booted once, in its shuffled order) runs whole on one worker, so a
    worker is a block: its offset falls on every kernel of the round alike, and host drift
    cannot line up with one kernel. Buildbot's own scheduling spreads the rounds over every
    idle worker of the kind (one at a time each: the machine lock). A failed boot does not
    stop the rounds (the dispatcher reads every benchmark build and says which failed).
    """

    name = "plan boots"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("haltOnFailure", True)
        super().__init__(**kwargs)

    @defer.inlineCallbacks
    def _measured(self) -> Any:
        """Boots an earlier attempt of this build already measured or still has queued (the
        master stopped while it ran, and Buildbot runs the request again; a queued round
        survives the restart and runs by itself): they are not booted twice."""
        from buildbot.data import resultspec

        done: set[tuple[str, ...]] = set()
        for req in self.build.requests:
            builds = yield self.master.data.get(("buildrequests", req.id, "builds"))
            for b in builds:
                if b["buildid"] == self.build.buildid:
                    continue
                sets = yield self.master.data.get(
                    ("buildsets",),
                    filters=[resultspec.Filter("parent_buildid", "eq", [b["buildid"]])],
                )
                self.rerun = True
                for bs in sets:
                    if not bs["complete"] or bs["results"] in (SUCCESS, WARNINGS):
                        props = yield self.master.db.buildsets.getBuildsetProperties(bs["bsid"])
                        flat = {k: v[0] for k, v in props.items()}
                        done.update(boot_key(b) for b in round_boots(flat))
        return done

    @defer.inlineCallbacks
    def run(self) -> Any:
        raw = self.getProperty("boots") or "[]"
        try:
            boots = json.loads(raw) if isinstance(raw, str) else list(raw)
        except ValueError:
            self.descriptionDone = ["boots is not JSON"]
            return FAILURE
        carried = {p: self.getProperty(p) for p in CARRIED if self.getProperty(p) is not None}
        self.rerun = False
        measured = yield self._measured()
        boots = [b for b in boots if boot_key(b) not in measured]
        if self.rerun:  # a round cut short with the earlier attempt keeps what it stored
            carried["skip_stored"] = True
        by_round: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        for b in boots:
            by_round.setdefault((str(b.get("machine_kind") or "qemu"), b.get("round")), []).append(
                b
            )
        if by_round:
            self.build.addStepsAfterCurrentStep([TriggerRounds(carried, by_round)])
        skipped = f", {len(measured)} measured or queued before" if measured else ""
        self.descriptionDone = [f"{len(boots)} boot(s) in {len(by_round)} round(s){skipped}"]
        return SUCCESS


class TriggerRounds(steps.Trigger):
    """One benchmark build per round, triggered together; waits for all of them."""

    def __init__(self, carried: dict[str, Any], by_round: dict[tuple[str, Any], list[dict]],
                 **kwargs: Any) -> None:  # fmt: skip
        self.carried = carried
        self.by_round = by_round
        kinds = sorted({kind for kind, _r in by_round})
        kwargs.setdefault("name", f"run {len(by_round)} round(s)")
        super().__init__(
            schedulerNames=[bench_scheduler(k) for k in kinds],
            waitForFinish=True,
            haltOnFailure=False,
            flunkOnFailure=True,
            **kwargs,
        )
        self.cut_by: Any = None

    def interrupt(self, reason: Any) -> Any:
        self.cut_by = reason
        return super().interrupt(reason)

    @defer.inlineCallbacks
    def run(self) -> Any:
        results = yield super().run()
        # a build its master's clean stop (the health check's restart, `stackbench down`)
        # or its worker's loss interrupts ends RETRY, to be run again; an interrupted
        # Trigger says CANCELLED, which is worse and won: the rounds build ended for good,
        # its request with it, and the rounds it waited for were never booted again
        if results == CANCELLED and runs_again_after(self.cut_by):
            return RETRY
        return results

    def getSchedulersAndProperties(self) -> list[dict[str, Any]]:
        out = []
        for (kind, rnd), boots in self.by_round.items():
            props = dict(self.carried)
            # what every boot of the round shares; the boots themselves in round_boots
            props.update(round=rnd, machine_kind=kind, job=boots[0].get("job"),
                         round_boots=json.dumps(boots), boots=len(boots))  # fmt: skip
            out.append(
                {"sched_name": bench_scheduler(kind), "props_to_set": props, "unimportant": False}
            )
        return out


def runs_again_after(reason: Any) -> bool:
    """Whether Buildbot runs a build again after a step interrupted for ``reason``: its
    master's clean stop (botmaster's quick shutdown, "Master Shutdown") or its worker's
    lost connection. Not a stop asked for (a cancel or stop through the REST API)."""
    if isinstance(reason, Failure):
        return reason.check(error.ConnectionLost) is not None
    return reason == "Master Shutdown"


def round_boots(props: dict[str, Any]) -> list[dict[str, Any]]:
    """The boots a benchmark build runs: its round's (``round_boots``), else the one boot its
    own properties describe (a kernel build's fan-out, a forced benchmark)."""
    raw = props.get("round_boots")
    if raw:
        return list(json.loads(raw) if isinstance(raw, str) else raw)
    return [{k: props[k] for k in BOOT_PROPS if props.get(k) is not None}]


class RunBoots(CompositeStepMixin, buildstep.BuildStep):
    """On the master: fetch the round's kernels its worker does not keep (kept_kernels), boot
    them in order in one process; a retry records the lost attempt, skips what it stored,
    and after ``round_attempts`` lost attempts the round fails instead.

    The lost-attempt lookup and the give-up are this step's, not steps of their own as on a
    bare-metal box: every step costs the master a few database writes and the round's
    worker waits for them (two steps were 0.05-0.1 s of every round)."""

    name = "plan the round"
    logEnviron = False  # of the remote stat, glob and rmfile of kept_kernels

    def __init__(self, cfg: BuildbotConfig, **kwargs: Any) -> None:
        kwargs.setdefault("haltOnFailure", True)
        super().__init__(**kwargs)
        self.cfg = cfg

    @defer.inlineCallbacks
    def run(self) -> Any:
        try:
            boots = round_boots({k: v[0] for k, v in self.build.getProperties().asDict().items()})
        except ValueError:
            self.descriptionDone = ["round_boots is not JSON"]
            return FAILURE
        lost = yield find_lost_attempts(self)
        why = gave_up(lost, self.cfg.round_attempts)
        if why:
            self.descriptionDone = [why]
            return FAILURE
        named = {str(b.get("artifact")): b.get("kernel_name") or str(b.get("commit"))[:12]
                 for b in boots}  # fmt: skip
        artifacts = [str(b.get("artifact")) for b in boots]  # one per boot, in order
        tars, fetches = yield kept_kernels.plan_fetches(self, artifacts)
        failed = yield kept_kernels.fetch(self, fetches, named)
        if failed:
            self.descriptionDone = [f"fetching {failed} failed"]
            return FAILURE
        added: list[Any] = []
        if boots[0].get("evidence"):
            # the evidence round stores no run: nothing to mark lost, nothing to skip
            added.append(evidence_step(self.cfg, boots, tars))
            self.build.addStepsAfterCurrentStep(added)
            self.descriptionDone = [f"{len(boots)} evidence boot(s)"]
            return SUCCESS
        # an attempt a master's restart ended may have stored boots too: they are skipped
        retry = bool(lost or self.getProperty("spared_attempts")
                     or self.getProperty("skip_stored"))  # fmt: skip
        if lost:
            added.append(steps.ShellCommand(
                name="mark lost attempts",
                command=worker_command(self.cfg, "mark-lost", boots=boots[:1], kernels=tars),
                haltOnFailure=False, flunkOnFailure=False, timeout=600,
            ))  # fmt: skip
        # one process boots the round's kernels in order (a failed boot does not stop it)
        added.append(steps.ShellCommand(
            name="benchmark",
            command=worker_command(self.cfg, "bench", boots=boots, kernels=tars,
                                   skip_stored=retry),
            timeout=self.cfg.step_timeout,
        ))  # fmt: skip
        self.build.addStepsAfterCurrentStep(added)
        kept = len(boots) - len(fetches)
        self.descriptionDone = [
            f"{len(boots)} boot(s)"
            + (f", {kept} kernel(s) kept" if kept else "")
            + (f", {len(lost)} lost attempt(s)" if lost else "")
        ]
        return SUCCESS


# the round of a series' first batch that holds its evidence boots (coverage_stage)
EVIDENCE_ROUND = "evidence"


def reported_counts(rc: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The ``coverage`` property of an evidence round: the worker's last line.

    A line with profiles is far longer than the 4,096 characters a Buildbot log line holds,
    and the worker's cut loses text (worker.LINE_PIECE): the worker prints it in shorter
    pieces, joined again here from where the line starts."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith('{"coverage"')]
    try:
        last = json.loads("".join(lines[starts[-1] :])) if starts else None
    except ValueError:
        return {}
    return {"coverage": last["coverage"]} if isinstance(last, dict) and "coverage" in last else {}


def evidence_step(cfg: BuildbotConfig, boots: list[dict[str, Any]], tars: list[str]) -> Any:
    """The worker's evidence boots of the round's kernels; a failure warns and fails no
    series (the dispatcher says it on the series' page)."""
    return steps.SetPropertyFromCommand(
        name="evidence boots",
        command=worker_command(cfg, "bench", boots=boots, kernels=tars),
        extract_fn=reported_counts,
        haltOnFailure=False, flunkOnFailure=False, warnOnFailure=True,
        timeout=cfg.step_timeout,
    )  # fmt: skip


def boot_key(props: dict[str, Any]) -> tuple[str, ...]:
    """A planned boot's identity within its series' submission."""
    return tuple(str(props.get(k)) for k in ("commit", "job", "round", "first"))


def artifact_path(buildername: str, buildnumber: int) -> str:
    """Where the master keeps a built kernel (relative to its base directory)."""
    return f"artifacts/{buildername}/{buildnumber}/{ARTIFACT}"


# how Buildbot's Build ends a build whose worker went away once it ran (buildbot/process/
# build.py): "retry lost connection", or "retry <summary>" of a step that saw the machine go
# (a bare-metal box's wait); a master stopped cleanly ends its builds RETRY too, saying why
LOST_PREFIX = "retry"
MASTER_SHUTDOWN = "(Master Shutdown)"


def worker_went_away(build: dict[str, Any]) -> bool:
    """Whether an earlier attempt (a build of the master's REST/data API) ended because its
    worker went away while it ran, the one loss a round's kernel may have caused. Not
    counted: a master that was killed never finishes its builds (the next one's
    housekeeping ends them RETRY, their last state string, "building", "created", ... left
    as it was); one stopped cleanly says "(Master Shutdown)"; a worker gone before the
    build began ("worker not pinged/available/building") ran nothing of the round. None of
    these counts towards ``round_attempts``, the cap for a kernel that takes its machine
    down."""
    if build.get("results") != RETRY:
        return False
    state = str(build.get("state_string") or "")
    return state.startswith(LOST_PREFIX) and MASTER_SHUTDOWN not in state


@defer.inlineCallbacks
def find_lost_attempts(step: Any) -> Any:
    """Earlier attempts of ``step``'s build request that lost their worker, as
    ["buildid:worker", ...], set as the build's ``lost_attempts`` property: Buildbot retries
    a build whose worker vanished, and the retry marks their runs. Attempts ended RETRY for
    what the round did not cause (``worker_went_away``) are set apart as
    ``spared_attempts``: not lost, but what they stored is still skipped."""
    lost, spared = [], []
    for req in step.build.requests:
        builds = yield step.master.data.get(("buildrequests", req.id, "builds"))
        for b in builds:
            if b["buildid"] == step.build.buildid or b["results"] != RETRY:
                continue
            wk = yield step.master.data.get(("workers", b["workerid"]))
            named = f"{b['buildid']}:{wk['name'] if wk else b['workerid']}"
            (lost if worker_went_away(b) else spared).append(named)
    step.setProperty("lost_attempts", lost, type(step).__name__)
    step.setProperty("spared_attempts", spared, type(step).__name__)
    return lost


def gave_up(lost: list[str], limit: int) -> str:
    """Why a benchmark stops retrying ("" while it goes on): its earlier attempts, ``limit``
    or more, were all lost (e.g. a kernel that does not boot on a bare-metal box)."""
    return f"gave up: {len(lost)} attempt(s) lost" if len(lost) >= limit else ""


class FindLostAttempts(buildstep.BuildStep):
    """On the master: earlier attempts of this build request that lost their worker
    (``find_lost_attempts``), so the benchmark step can mark their runs."""

    name = "find lost attempts"

    @defer.inlineCallbacks
    def run(self) -> Any:
        lost = yield find_lost_attempts(self)
        self.descriptionDone = [f"{len(lost)} lost attempt(s)"]
        return SUCCESS


def _opt(argv: list[str], flag: str, value: Any) -> None:
    if value not in (None, "", []):
        argv += [flag, str(value)]


def worker_command(
    cfg: BuildbotConfig,
    what: str,
    *,
    boots: list[dict[str, Any]] | None = None,
    kernels: list[str] | None = None,
    skip_stored: bool = False,
) -> Any:
    """The argv (a renderer over build properties) of one ``stackbench worker`` command;
    ``boots``: a round's boots, whose own values come before the build's properties, and
    ``kernels`` their artifacts on the worker."""

    @util.renderer
    def render(props: Any) -> list[str]:
        def p(name: str) -> Any:
            if boots and boots[0].get(name) is not None:
                return boots[0][name]
            return props.getProperty(name)

        # bisect and nightly are stackbench's own commands, measuring on this master's
        # workers (master_secrets.master_env); the rest are worker-side steps
        if what in COMPARISONS:
            argv = [*cfg.stackbench, what, "--buildbot"]
        else:
            argv = [*cfg.stackbench, "worker", what]
        if what == "build":
            argv += ["--commit", str(p("commit")), "--out", "out"]
            _opt(argv, "--tree", p("tree"))
            _opt(argv, "--config", p("kernel_config"))
            _opt(argv, "--series", p("series"))
            _opt(argv, "--name", p("kernel_name"))
        elif what in ("bench", "baremetal", "mark-lost"):
            argv += ["--kernel", (kernels or [ARTIFACT])[0]]
            # a boot of the dispatcher's rounds runs every job of the series in one guest
            for job in split_list(p("job")) if what == "bench" else [str(p("job"))]:
                argv += ["--job", job]
            argv += ["--submission", str(p("submission")), "--kind", str(p("machine_kind"))]
            # a pool's boxes store their runs under the pool; every run names its worker
            argv += ["--machine", str(p("machine_pool") or p("workername"))]
            if what == "bench":
                argv += ["--worker", str(p("workername"))]
            # the worker's capacity; the guest's size is the request's (or the kind's default)
            _opt(argv, "--cpus", p("cpus"))
            _opt(argv, "--memory-mb", p("memory_mb"))
            _opt(argv, "--guest-cpus", p("min_cpus"))
            _opt(argv, "--guest-memory-mb", p("min_memory_mb"))
            _opt(argv, "--series", p("series"))
            build = props.getBuild()
            _opt(argv, "--buildbot-build", getattr(build, "buildid", None))
            if what == "bench" and p("evidence"):
                argv += ["--runs", "1", "--evidence", str(p("evidence"))]
                argv += [a for tar in (kernels or [])[1:] for a in ("--kernel", tar)]
            elif what == "bench":
                argv += ["--runs", str(p("runs") or cfg.runs), "--out", "results", "--upload"]
                # a boot of a round the dispatcher planned: its place in the kernel's runs
                _opt(argv, "--round", p("round"))
                _opt(argv, "--first", p("first"))
                for tar, boot in zip((kernels or [])[1:], (boots or [])[1:], strict=False):
                    argv += ["--kernel", tar, "--first", str(boot.get("first") or 0)]
                if boots and len(boots) > 1:  # a round: its boots numbered within the build
                    argv += ["--boot-index", "0"]
                if skip_stored:
                    argv += ["--skip-stored"]
            elif what == "baremetal":
                argv += ["--runs", str(p("runs") or cfg.runs)]
                argv += ["--kexec-delay", str(cfg.kexec_delay)]
            else:
                for attempt in p("lost_attempts") or []:
                    argv += ["--lost", str(attempt)]
        elif what == "upload":
            argv += ["--results", "results"]
        elif what == "bisect":
            for name in ("good", "bad", "job", "metric", "tree", "regression"):
                _opt(argv, f"--{name}", p(name))
        elif what == "nightly":
            # --now: a retried or forced night measures what is missing and judges again
            argv += ["--now"]
            for branch in split_list(p("branches")):
                argv += ["--branch", branch]
            if cfg.nightly_aa:
                # the night ends with each machine kind's A/A: its noise and quarantine
                argv += ["--aa", str(cfg.nightly_aa)]
        if cfg.dry_kernel and what in ("build", "bench", "baremetal"):
            argv += ["--dry-kernel"]
            if cfg.dry_seconds:
                argv += ["--dry-seconds", str(cfg.dry_seconds)]
        return argv

    return render


def command(cfg: BuildbotConfig, what: str, name: str, **kwargs: Any) -> Any:
    kwargs.setdefault("haltOnFailure", True)
    if what in COMPARISONS:
        kwargs["env"] = master_secrets.master_env(cfg)
    return steps.ShellCommand(
        name=name,
        command=worker_command(cfg, what),
        timeout=cfg.step_timeout,
        **kwargs,
    )


def has_lost_attempts(step: Any) -> bool:
    return bool(step.getProperty("lost_attempts"))
