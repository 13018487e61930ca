"""Nightly and bisect on real kernels: a tracked scratch branch of the cached Linux 6.1 tree
gets six commits, one of which plants a large regression in the anonymous fault path and one
of which does not build; the nightly run detects the regression against the baseline and the
bisect names the planted commit, building at most ceil(log2(n)) + 2 kernels.

The commits are written with git plumbing (no checkout of the shared repository) and carry a
fresh nonce, so every run really builds them; they rebuild incrementally (a few files each)
in the shared object dir. Their artifacts and the branch are removed afterwards.

Run figures (kernels built, bisect seconds, wall time) are printed; see them with -s.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers.kernelkit import require_kernel_tools, use_kernel_cache
from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench import proc
from stackbench.jobs.executors.settings import Settings
from stackbench.jobs.tracking import nightly
from stackbench.jobs.tracking.comparison import ThisMachine
from stackbench.resultsdb.models import Bisect, KernelBuild, MailOutbox, Metric, Regression
from stackbench.resultsdb.verdict import DEFAULT, Policy

# boots are the verdict's unit: every kernel of the nightly, every step and the confirmation
# boot at least 3 times (two runs each), about 25 s a boot under TCG on the shared host: 18
# minutes on a 2-core CI machine, so it runs where that time was asked for
pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(2400)]

TREE = "linux-6.1"
# one short vm-scalability case: two usemem tasks write a quarter of the guest's memory
JOB = "vm-scalability[test=anon-w-seq,runtime=5s,mem_fraction=0.25]"
METRIC = "vm-scalability.throughput"
# The verdict rule of this test, stated: 3 runs per kernel first, then 6, at most 10; a change
# has to reach 50% to count. Runs of this tiny job last about a second under TCG, and on a
# shared 2-core host they scatter by +-25% (measured: 100k-160k KB/s on one kernel), so only
# a wide band lets neutral commits be called "unchanged" within a few runs; the planted
# regression costs about 80% (measured: 24k KB/s), far outside it.
POLICY = Policy(
    start_runs=3,
    looks=(3, 6, 10),
    max_runs=10,
    min_effect={
        **DEFAULT.min_effect,
        "throughput": 0.5,
        "latency": 0.5,
        "duration": 0.5,
        "count": 0.5,
        "": 0.5,
        "variability": 50.0,
        "percent": 50.0,
    },
)

# the planted regression: every new anonymous page waits 150 us per base page (a THP waits
# for all of its 512), whichever fault path mapped it
PLANT_INCLUDE = (
    "#include <linux/mm_inline.h>\n",
    "#include <linux/mm_inline.h>\n#include <linux/delay.h>\n",
)
PLANT_FN = (
    "\t__mod_lruvec_page_state(page, NR_ANON_MAPPED, nr);\n"
    "\t__page_set_anon_rmap(page, vma, address, 1);\n",
    "\t__mod_lruvec_page_state(page, NR_ANON_MAPPED, nr);\n"
    "\t__page_set_anon_rmap(page, vma, address, 1);\n"
    "\t/* let the new mapping settle (stackbench's planted regression) */\n"
    "\tudelay(150 * nr);\n",
)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Stackbench Test",
    "GIT_AUTHOR_EMAIL": "test@stackbench.invalid",
    "GIT_COMMITTER_NAME": "Stackbench Test",
    "GIT_COMMITTER_EMAIL": "test@stackbench.invalid",
}


def git(repo: Path, *args: str, **kw) -> str:
    return proc.run(["git", "-C", repo, *args], env=GIT_ENV, **kw).stdout.strip()


def commit_edit(repo: Path, parent: str, path: str, edit, message: str, index: Path) -> str:
    """A commit on ``parent`` whose only change is ``edit(old text) -> new text`` of ``path``,
    written without touching any checkout (a private index)."""
    old = git(repo, "show", f"{parent}:{path}")
    new = edit(old + "\n")
    assert new != old + "\n", f"edit of {path} changed nothing"
    blob = git(repo, "hash-object", "-w", "--stdin", input=new)
    env = {**GIT_ENV, "GIT_INDEX_FILE": str(index)}
    proc.run(["git", "-C", repo, "read-tree", parent], env=env)
    proc.run(["git", "-C", repo, "update-index", "--cacheinfo", f"100644,{blob},{path}"], env=env)
    tree = proc.run(["git", "-C", repo, "write-tree"], env=env).stdout.strip()
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message)


def replace_once(old: str, new: str):
    def edit(text: str) -> str:
        assert text.count(old) == 1, f"anchor not found once: {old!r}"
        return text.replace(old, new)

    return edit


def prepend_after_first_line(line: str):
    def edit(text: str) -> str:
        first, rest = text.split("\n", 1)
        return f"{first}\n{line}\n{rest}"

    return edit


def make_history(repo: Path, base: str, nonce: str, tmp: Path) -> list[tuple[str, str]]:
    """Six commits on ``base``: (sha, what) oldest first; the fifth is the planted one."""
    idx = tmp / "index"
    plan = [
        ("mm/mmzone.c", prepend_after_first_line(f"/* stackbench bisect test run {nonce} */"),
         f"mm/mmzone: note test run {nonce}", "neutral"),
        ("mm/compaction.c", prepend_after_first_line("/* compaction: see Documentation/mm */"),
         "mm/compaction: point at the documentation", "neutral"),
        ("mm/compaction.c", replace_once('#include "internal.h"\n', '#include "internal.h"\nint stackbench_broken = ;\n'),
         "mm/compaction: add a broken declaration", "broken"),
        ("mm/compaction.c", replace_once("int stackbench_broken = ;\n", ""),
         "mm/compaction: fix the build", "neutral"),
        ("mm/rmap.c", lambda t: replace_once(*PLANT_FN)(replace_once(*PLANT_INCLUDE)(t)),
         "mm/rmap: let new anonymous mappings settle", "planted"),
        ("mm/mmzone.c", prepend_after_first_line("/* zones: see include/linux/mmzone.h */"),
         "mm/mmzone: point at the header", "neutral"),
    ]  # fmt: skip
    out, parent = [], base
    for path, edit, message, what in plan:
        parent = commit_edit(repo, parent, path, edit, message, idx)
        out.append((parent, what))
    return out


@pytest.fixture
def scratch_branch(monkeypatch, tmp_path):
    from stackbench.kernels import build as kbuild
    from stackbench.kernels import trees

    require_kernel_tools()
    use_kernel_cache(monkeypatch)
    tree = trees.load_tree(TREE)
    repo = trees.ensure_repo(tree)
    base = trees.resolve(repo, tree.default_base)
    nonce = uuid.uuid4().hex[:10]
    branch = f"sbtest/bisect-{nonce}"
    git(repo, "update-ref", f"refs/heads/{branch}", base)
    created: list[str] = []
    try:
        yield repo, base, branch, nonce, created
    finally:
        git(repo, "update-ref", "-d", f"refs/heads/{branch}", check=False)
        for sha in created:  # the nonce makes them unique to this run: nobody else needs them
            art = kbuild.find_artifact(TREE, sha)
            if art is not None:
                shutil.rmtree(art, ignore_errors=True)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def test_nightly_detects_and_bisect_names_the_planted_commit(
    eng, scratch_branch, tmp_path, monkeypatch
):
    repo, base, branch, nonce, created = scratch_branch
    monkeypatch.setenv("STACKBENCH_MAIL_LIST", "linux-mm@kvack.example")
    started = time.monotonic()
    settings = Settings(cpus=2, mem_mb=1024, init_timeout_s=180, accel="tcg")
    lab = ThisMachine(settings=settings)
    tracked = [nightly.Tracked(tree=TREE, branch=branch, jobs=[JOB])]

    # night 1: the branch is at the base, which becomes the baseline
    s1 = nightly.run_nightly(eng, lab=lab, policy=POLICY, tracked=tracked, progress=say)
    (b1,) = s1["branches"]
    assert b1["state"] == "baseline", b1
    assert b1["head"] == base

    history = make_history(repo, base, nonce, tmp_path)
    created += [sha for sha, _ in history]
    git(repo, "update-ref", f"refs/heads/{branch}", history[-1][0])
    planted = next(sha for sha, what in history if what == "planted")
    broken = next(sha for sha, what in history if what == "broken")

    # night 2: the head regressed; the regression is recorded, bisected and mailed
    s2 = nightly.run_nightly(eng, lab=lab, policy=POLICY, tracked=tracked, progress=say)
    (b2,) = s2["branches"]
    assert b2["state"] == "regressed", b2
    with Session(eng) as s:
        found = {
            name: reg
            for reg, name in s.execute(
                select(Regression, Metric.name).join(Metric, Metric.id == Regression.metric_id)
            ).all()
        }
        seen = {n: (r.change_pct, r.state, r.culprit) for n, r in found.items()}
        assert METRIC in found, (seen, b2["jobs"], b2["bisects"])
        reg = found[METRIC]
        assert reg.change_pct < -50, reg.change_pct
        assert reg.state == "bisected", (reg.state, reg.meta)
        assert reg.culprit == planted
        bis = s.scalars(select(Bisect).where(Bisect.regression_id == reg.id)).one()
        assert bis.state == "found" and bis.culprit == planted
        assert bis.confidence is not None and bis.confidence > 0.95
        steps = {st["commit"]: st["verdict"] for st in bis.steps}
        assert steps.get(broken, "skip") == "skip"  # a build failure is never "bad"
        failed = s.scalars(select(KernelBuild).where(KernelBuild.commit == broken)).first()
        if broken in steps:
            assert failed is not None and failed.status == "build-failed"
        n = len(history)
        assert bis.kernels_built <= math.ceil(math.log2(n)) + 2, bis.steps
        # the other metrics' bisects reuse what the first one built and ran
        others = list(s.scalars(select(Bisect).where(Bisect.id != bis.id)))
        mails = list(s.scalars(select(MailOutbox).where(MailOutbox.kind == "regression")))
    subjects = [m.subject for m in mails]
    # one culprit, one test: one mail (the other metrics are listed in it)
    assert len(mails) == 1, subjects
    want = f"[{TREE}:{branch}] [mm/rmap] {planted[:10]}: {METRIC} -"
    assert any(sub.startswith(want) and sub.endswith("% regression") for sub in subjects), subjects
    body = next(m.body for m in mails if m.subject.startswith(want))
    assert "worse: higher is better for this metric" in body
    assert "stackbench bisect --tree linux-6.1" in body

    wall = time.monotonic() - started
    figures = {
        "commits": len(history),
        "kernels_built_by_bisect": bis.kernels_built,
        "kernels_built_total_night2": b2["kernels_built"],
        "bisect_steps": len(bis.steps),
        "bisect_seconds": bis.meta.get("seconds"),
        "regressions": len(b2["regressions"]),
        "other_bisects": [(o.state, o.kernels_built) for o in others],
        "wall_s": round(wall, 1),
        "change_pct": round(reg.change_pct, 1),
    }
    print(f"\nbisect e2e figures: {figures}", flush=True)
    out = os.environ.get("STACKBENCH_E2E_FIGURES")
    if out:
        Path(out).write_text(repr(figures) + "\n")
