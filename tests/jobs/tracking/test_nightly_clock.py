"""The nightly and bisection never act on a latency timed with a coarse guest clock (issue 26):
its verdict stays ``undecided (coarse clock)``, no regression opens on it, and a bisection of
it cannot judge a step. The same latency timed with a fine clock does open one."""

from __future__ import annotations

import zlib

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_nightly import BRANCH, JOB, TREE, FakeLab, mail_env, night  # noqa: F401

from stackbench.jobs.tracking import bisect_runner as br
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.models import KernelBuild, Regression, Run

LATENCY = "thpscale.fault-both-1"  # a headline latency (lower is better)
JIFFIES = {
    "clock": {"source": "refined-jiffies", "coarse": "jiffies clocksource (refined-jiffies)"}
}


class LatencyLab(FakeLab):
    """Runs whose only metric is a latency: 1000 us, and 1500 us from ``bad_from`` on, timed with
    a jiffies clock when ``coarse``."""

    def __init__(self, coarse: bool, **kw):
        super().__init__(**kw)
        self.coarse = coarse

    def run(self, eng, tree, build_id, job, runs, boot=None):
        self.boots += 1
        with Session(eng) as s:
            commit = s.get(KernelBuild, build_id).commit
            have = s.scalar(select(func.count()).select_from(Run).where(Run.build_id == build_id))
        bad = self.bad_from is not None and self.history.index(commit) >= self.bad_from
        ((name, spec),) = br.job_spec_strings(job)
        ig.ingest(
            eng,
            [
                ig.RunData(
                    job=spec,
                    kernel=ig.KernelSpec(
                        commit, config_name="fake", config_hash="fake", compiler="fake", tree=tree
                    ),
                    machine=ig.MachineSpec(self.machine, kind="qemu", cpus=2, memory_mb=1024),
                    iteration=have + i,
                    samples={LATENCY: [float(self.rng.normal(1500.0 if bad else 1000.0, 10.0))]},
                    source="fake",
                    sysstate=JIFFIES if self.coarse else {},
                    meta={**self.boot_meta(boot), "subjob": name},
                    idempotency_key=f"lat-{commit}-{zlib.crc32(job.encode()):08x}-{have + i}",
                )
                for i in range(runs)
            ],
        )


def _regressions(eng) -> int:
    with Session(eng) as s:
        return s.scalar(select(func.count()).select_from(Regression))


def test_a_latency_on_a_coarse_clock_opens_no_regression(eng, mail_env):  # noqa: F811
    lab = LatencyLab(coarse=True, n=2, bad_from=2)
    night(eng, lab)
    lab.head = 2
    (b,) = night(eng, lab)["branches"]
    assert b["regressions"] == [] and _regressions(eng) == 0, b
    assert b["jobs"][0]["verdicts"] == {"undecided": 1}, b["jobs"][0]


def test_the_same_latency_on_a_fine_clock_does(eng, mail_env):  # noqa: F811
    lab = LatencyLab(coarse=False, n=2, bad_from=2)
    night(eng, lab)
    lab.head = 2
    (b,) = night(eng, lab)["branches"]
    assert _regressions(eng) == 1 and b["state"] == "regressed", (b["state"], b["jobs"])


def test_a_bisection_of_a_coarse_latency_judges_no_step(eng):
    lab = LatencyLab(coarse=True, n=3, bad_from=2)
    said: list[str] = []
    done = br.run_bisect(
        eng, lab, tree=TREE, good=lab.history[0], bad=lab.history[3], job=JOB, metric=LATENCY,
        progress=said.append,
    )  # fmt: skip
    assert done.result.culprit is None and done.result.state != "found", done.result
    assert any("jiffies clocksource" in line and "cannot be judged" in line for line in said)
