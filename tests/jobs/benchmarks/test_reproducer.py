"""The reproducer a report attaches runs without stackbench: taken from the delivered mail,
run with a bare environment (no stackbench, no venv) against the series' built kernel under
QEMU, it prints the benchmark's headline metric."""

from __future__ import annotations

import email
import re
import subprocess
from email import policy

import pytest
from helpers.kernelkit import base_kernel
from sqlalchemy import text
from sqlalchemy.orm import Session

from stackbench.jobs.benchmarks import definitions
from stackbench.jobs.driver import lifecycle
from stackbench.mail import config, outbox
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.models import Patch, Series

pytestmark = pytest.mark.slow
PARAMS = {"test": "anon-w-seq", "runtime": "5s", "nr_task": 1, "mem_fraction": 0.2}
# case -> (test, params, a metric the series stored, the headline line the script prints)
CASES = {
    "vm-scalability": ("anon-w-seq", PARAMS, "vm-scalability.throughput",
                       r"^vm-scalability\.throughput: [1-9]\d*$"),
    "thpscale": ("thpscale", {"max_threads": 1, "mapsize_fraction": 0.15, "thp_enabled": "always"},
                 "thpscale.fault-both-1", r"^thpscale\.fault-both-1: \d+\.\d\d$"),
    "thpcompact": ("thpcompact", {"max_threads": 1, "anon_fraction": 0.15, "file_fraction": 0.05},
                   "thpcompact.fault-both-1", r"^thpcompact\.fault-both-1: \d+\.\d\d$"),
    "thpchallenge": ("thpchallenge", {"max_threads": 1, "mapsize_fraction": 0.15},
                     "thpchallenge.fault-both-1", r"^thpchallenge\.fault-both-1: \d+\.\d\d$"),
    "stress-highalloc": ("stress-highalloc", {"attempts": 20, "passes": 1, "load_fraction": 0,
                                              "pace_ms": 0},
                         "stress-highalloc.pass1", r"^stress-highalloc\.pass1: \d+$"),
}  # fmt: skip
# seed jobs as the driver stores them (their first matrix cell on this guest): 000 runs
# vm-scalability under THP always; 001 has a scenario stage before stress-highalloc; 002 a
# compile-like background load; 003 a spread-25 stage under that load or beside a 400 MB
# hogger (a ~1 GiB guest, as its job says); 004 runs thpscale at 1, 3 and 4 threads.
# case -> (metric, headline line, guest MB)
SEEDS = {
    "seed-000-thp-folio-compaction": ("vm-scalability.throughput",
                                      r"^vm-scalability\.throughput: [1-9]\d*$", 256),
    "seed-001-proactive-compaction": ("stress-highalloc.pass1", r"^stress-highalloc\.pass1: \d+$", 256),
    "seed-002-steady-state": ("stress-highalloc.pass1", r"^stress-highalloc\.pass1: \d+$", 256),
    "seed-003-compaction-build": ("stress-highalloc.pass1", r"^stress-highalloc\.pass1: \d+$", 256),
    "seed-003-compaction-hogger": ("stress-highalloc.pass1", r"^stress-highalloc\.pass1: \d+$", 1024),
    "seed-004-thpscale-compaction": ("thpscale.fault-both-4", r"^thpscale\.fault-both-4: \d+\.\d\d$", 256),
}  # fmt: skip
GUEST_MB = {name: mb for name, (_m, _l, mb) in SEEDS.items()}
for _name, (_metric, _line, _mb) in SEEDS.items():
    _sj = definitions.expand(definitions.load(_name), guest_mem_mb=_mb, guest_cpus=1)[0]
    CASES[_name] = (_sj.test, _sj.params, _metric, _line)


def _suite(case: str) -> str:
    return CASES[case][2].split(".", 1)[0]


def _series(eng, base: str, top: str, case: str = "vm-scalability") -> int:
    test, params, metric, _line = CASES[case]
    suite = _suite(case)
    for commit, name in ((base, "base"), (top, "1/1")):
        ig.ingest(
            eng,
            [
                ig.RunData(
                    job=ig.JobSpec(suite, test, params),
                    kernel=ig.KernelSpec(commit, name=name, config_name="tiny-guest"),
                    machine=ig.MachineSpec("qemu-tcg", cpus=1, memory_mb=GUEST_MB.get(case, 256)),
                    iteration=i,
                    samples={metric: [100.0 + i]},
                )
                for i in range(3)
            ],
        )
    with Session(eng) as s, s.begin():
        series = Series(title="mm: x", base_commit=base, state="done",
                        message_id="<c@example.org>", submitter_email="dev@example.org")  # fmt: skip
        series.patches.append(Patch(idx=1, total=1, subject="mm: x", commit_sha=top))
        s.add(series)
        s.flush()
        s.execute(text("UPDATE kernel_build SET series_id = :s"), {"s": series.id})
        return series.id


@pytest.mark.parametrize("case", list(CASES))
def test_the_attached_reproducer_prints_the_headline_metric(eng, monkeypatch, tmp_path, case):
    _repo, res = base_kernel(monkeypatch)
    bzimage = res.artifact_dir / "bzImage"
    # the built base stands in for the series' top commit: same kernel, as a reader has it
    sid = _series(eng, "f" * 40, res.commit, case)
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "list@example.org")
    lifecycle.queue_report(eng, sid)
    cfg = config.from_env()
    cfg.dry_run_dir = str(tmp_path / "out")
    assert len(outbox.deliver(eng, cfg).sent) == 1
    (eml,) = (tmp_path / "out").glob("*.eml")
    msg = email.message_from_bytes(eml.read_bytes(), policy=policy.default)
    (att,) = msg.iter_attachments()
    script = tmp_path / att.get_filename()
    script.write_text(att.get_content())
    if "scenario" in CASES[case][1]:  # the seed's stage is set up before the benchmark
        assert f"export SCENARIO={CASES[case][1]['scenario']}" in script.read_text()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # nothing of stackbench
    if _suite(case) == "stress-highalloc":
        # the module the kernel build made against its own object dir (reused by then)
        env["MODULE"] = str(res.artifact_dir / "modules" / "stackbench_highalloc.ko")
    out = subprocess.run(
        ["sh", str(script), str(bzimage)],
        env=env,
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(CASES[case][3], out.stdout, re.MULTILINE), out.stdout
