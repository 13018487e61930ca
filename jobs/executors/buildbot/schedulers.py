"""Schedulers: submissions (force scheduler ``submit``, used by the web UI and
``stackbench buildbot submit`` through the REST API), the nightly run of tracked branches,
the admins' force scheduler, and the triggerable schedulers of the fan-out."""

from __future__ import annotations

from typing import Any

from buildbot.plugins import schedulers, util

from stackbench.jobs.executors.buildbot import builders as bl
from stackbench.jobs.executors.buildbot import steps as sb
from stackbench.jobs.executors.buildbot.config import BuildbotConfig

SUBMIT = "submit"
ROUNDS = "rounds"
FORCE = "force"
NIGHTLY = "nightly"
BISECT = "bisect"


def _text(name: str, label: str, default: str = "") -> Any:
    return util.StringParameter(name=name, label=label, default=default, size=60)


def submission_parameters() -> list[Any]:
    return [
        _text("series", "series id"),
        _text("commits", "commits (base first, space or comma separated)"),
        _text("names", "kernel names, one per commit (empty: commit prefixes)"),
        _text("jobs", "jobs (empty: the configured matrix)"),
        _text("kinds", "machine kinds (empty: all)"),
        _text("runs", "runs per benchmark (empty: default)"),
        _text("min_cpus", "minimum CPUs"),
        _text("min_memory_mb", "minimum memory (MiB)"),
        _text("submission", "submission key (empty: new)"),
        _text("title", "title"),
        _text("report_timeout", "bare-metal report timeout in seconds (empty: default)"),
        _text("rounds_by", "who plans the benchmarks ('dispatcher': in rounds; empty: at once)"),
    ]


def make(cfg: BuildbotConfig) -> list[Any]:
    out: list[Any] = [
        schedulers.ForceScheduler(
            name=SUBMIT,
            label="Submit a series",
            buttonName="Submit",
            builderNames=[bl.SERIES],
            codebases=[util.CodebaseParameter("", hide=True)],
            reason=util.StringParameter(name="reason", default="series submitted", size=60),
            properties=submission_parameters(),
        ),
        schedulers.ForceScheduler(
            name=ROUNDS,
            label="Rounds of boots (the dispatcher's)",
            buttonName="Run",
            builderNames=[bl.ROUNDS],
            codebases=[util.CodebaseParameter("", hide=True)],
            reason=util.StringParameter(name="reason", default="rounds of boots", size=60),
            properties=[
                _text("series", "series id"),
                _text("submission", "submission key"),
                _text("rounds_key", "this batch's key"),
                _text("boots", "boots (JSON list, in order)"),
                _text("quarantined", "workers the rounds keep off (quarantined machines)"),
            ],
        ),
        schedulers.ForceScheduler(
            name=FORCE,
            label="Force (admins)",
            builderNames=[b.name for b in bl.make(cfg)],
            properties=[
                *submission_parameters(),
                _text("commit", "commit (single build)"),
                _text("job", "job (single benchmark)"),
                _text("artifact", "kernel artifact on the master (single benchmark)"),
                _text("branches", "tracked branches TREE:BRANCH (nightly; empty: all)"),
            ],
        ),
        schedulers.ForceScheduler(
            name=BISECT,
            label="Bisect",
            builderNames=[bl.BISECT],
            codebases=[util.CodebaseParameter("", hide=True)],
            properties=[
                _text("good", "good"),
                _text("bad", "bad"),
                _text("job", "job"),
                _text("metric", "metric"),
                _text("tree", "kernel tree (empty: linux-6.1)"),
                _text("regression", "record it for regression id (optional)"),
            ],
        ),
        schedulers.Nightly(
            name=NIGHTLY,
            builderNames=[bl.NIGHTLY],
            hour=cfg.nightly_hour,
            minute=cfg.nightly_minute,
        ),
        schedulers.Triggerable(name="trigger-bisect", builderNames=[bl.BISECT]),
    ]
    for kc in cfg.kernel_configs:
        out.append(
            schedulers.Triggerable(
                name=sb.build_scheduler(kc.tree, kc.config), builderNames=[kc.builder]
            )
        )
    for kind in bl.bench_kinds(cfg):
        out.append(
            schedulers.Triggerable(
                name=sb.bench_scheduler(kind), builderNames=[bl.bench_builder(kind)]
            )
        )
    return out


def www(cfg: BuildbotConfig) -> dict[str, Any]:
    """The web UI and REST API, on the configured interface only, with its users and rules."""
    conf: dict[str, Any] = {
        "port": f"tcp:{cfg.www_port}:interface={cfg.bind}",
        "plugins": {"waterfall_view": {}, "console_view": {}} if _have_plugins() else {},
        "change_hook_dialects": {},
    }
    if cfg.users:
        conf["auth"] = util.UserPasswordAuth(dict(cfg.users))
        everyone = list(cfg.users)
        conf["authz"] = util.Authz(
            allowRules=[
                util.ForceBuildEndpointMatcher(builder=bl.SERIES, role="submitters"),
                util.ForceBuildEndpointMatcher(builder=bl.ROUNDS, role="submitters"),
                util.AnyControlEndpointMatcher(role="admins"),
            ],
            roleMatchers=[
                util.RolesFromUsername(roles=["admins", "submitters"], usernames=cfg.admins),
                util.RolesFromUsername(roles=["submitters"], usernames=everyone),
            ],
        )
    return conf


def _have_plugins() -> bool:
    import importlib.util

    return all(
        importlib.util.find_spec(m) is not None
        for m in ("buildbot_waterfall_view", "buildbot_console_view")
    )
