"""The whole nightly path over a branch's history: six nights of a tracked branch whose
boots are dry (no kernel is built or booted) but whose numbers are stored real boots.

Each boot of a kernel draws its offset from the relative boot offsets of real LKP runs
(../shared/fixtures/lkp/stats_changed_stats: two kernels, 6 boots each), so the noise has the
spread and the tails of real boots (the lab's runs carry no boot id: each run is a boot). The branch moves two commits a night; the demo stack's 3/3 lands before night
4 and costs 5%. The first look (head against the last good baseline) opens the regression on
night 4 and bisects it; the change points date it to night 4 once three or four nights show the
new level (the quiet nights before it run to the verdict's cap of 10 boots), the baseline moves to that level, and no later night opens anything.
"""

from __future__ import annotations

import numpy as np
import yaml
from conftest import shared_fixtures
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_nightly import (
    BRANCH,
    METRIC,
    TREE,
    FakeLab,
    baseline_commit,
    mail_env,  # noqa: F401 (a fixture)
    night,
    outbox,
)

from stackbench.resultsdb.models import Bisect, Metric, Regression, Run, TrackedBranch

DEMO_3_3 = "mm/huge_memory: zero anonymous THPs before charging them"


def real_offsets() -> np.ndarray:
    doc = yaml.safe_load(
        shared_fixtures("lkp", "stats_changed_stats", "fxmark_small_diff.yaml").read_text()
    )
    out = []
    for side in ("matrix_a", "matrix_b"):
        for boots in doc[side].values():
            v = np.asarray(boots, dtype=float)
            out.extend(v / v.mean())
    return np.asarray(out)


class RealBoots:
    """The random source of FakeLab with its normal curve replaced: each value is its mean
    times a real boot's offset (FakeLab's runs carry no boot id: each run is a boot)."""

    def __init__(self, offsets: np.ndarray, seed: int):
        self.offsets = offsets
        self.rng = np.random.default_rng(seed)

    def normal(self, mean: float, _sd: float) -> float:
        return mean * float(self.rng.choice(self.offsets))


class RealBootLab(FakeLab):
    def __init__(self, offsets: np.ndarray, seed: int = 11, **kw):
        super().__init__(seed=seed, **kw)
        self.rng = RealBoots(offsets, seed)


def test_six_nights_open_one_regression_at_the_night_the_change_began(eng, mail_env):  # noqa: F811
    lab = RealBootLab(real_offsets(), n=12, bad_from=5, drop=0.05)
    lab.subjects[lab.history[5]] = DEMO_3_3
    reports = []
    for n in range(7):
        lab.head = 2 * n  # two commits a night: c5 (3/3) lands between nights 3 and 4
        reports.append(night(eng, lab)["branches"][0])
    states = [r["state"] for r in reports]
    assert states[:3] == ["baseline", "unchanged", "unchanged"], reports
    assert states[3] == "regressed" and len(reports[3]["regressions"]) == 1, reports[3]
    (rid,) = reports[3]["regressions"]
    # nights 5 to 7 open nothing and mail nothing more
    assert [r["regressions"] for r in reports[4:]] == [[], [], []]
    assert len(outbox(eng, "regression")) == 1
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Regression)) == 1
        assert s.scalar(select(func.count()).select_from(Bisect)) == 1
        reg = s.get(Regression, rid)
        assert reg.state == "bisected" and reg.culprit == lab.history[5]
        # dated by the change point to night 4 (index 3 of the history), not left open
        assert reg.meta["change_night"] == 3
        assert reg.meta["changepoint"]["night"] == 3
        assert reg.meta["changepoint"]["direction"] == "worse"
        assert -7 < reg.meta["changepoint"]["change_pct"] < -3
        hist = s.scalars(select(TrackedBranch)).one().meta["nights"]
        assert [h["head"] for h in hist] == [lab.history[2 * n] for n in range(7)]
    # the change point confirmed it on night 6 or 7, the third or fourth night at the new
    # level (the rounds are shuffled, so a night's boots, and with them the night a point
    # tips the test, vary from run to run), once: the branch's baseline is that level now,
    # so later nights compare with it
    confirmed = [i for i, r in enumerate(reports) if rid in r["confirmed"]]
    assert confirmed in ([5], [6]), reports
    assert baseline_commit(eng) == lab.history[12]
    mail = outbox(eng, "regression")[0]
    assert f"[{TREE}:{BRANCH}]" in mail.subject and METRIC in mail.subject

    # the mail names the night the change began and the commit range, and links the plot
    assert "began:  night 4 of the branch's history" in mail.body
    assert f"commits {lab.history[4][:12]}..{lab.history[6][:12]}" in mail.body
    assert "/branches/" in mail.body and "/history" in mail.body
    pages_show_the_history(eng, rid, lab)


def pages_show_the_history(eng, rid: int, lab: FakeLab) -> None:
    from stackbench.web import create_app

    app = create_app({"ENGINE": eng, "SECRET_KEY": "test-secret", "TESTING": True})
    c = app.test_client()
    with Session(eng) as s:
        tid = s.scalars(select(TrackedBranch)).one().id
    listing = c.get("/regressions").get_data(as_text=True)
    assert f"/branches/{tid}/history" in listing and "night 4" in listing
    page = c.get(f"/regressions/{rid}").get_data(as_text=True)
    assert "night 4 of the branch's history: a change point" in page
    hist = c.get(f"/branches/{tid}/history")
    assert hist.status_code == 200
    body = hist.get_data(as_text=True)
    assert METRIC in body and "<svg" in body
    # six nights of boots, two segments, and the regression's night marked
    assert body.count('class="mn"') == 2
    assert f"regression {rid} opened at night 4" in body
    assert f"{lab.history[4][:12]}..{lab.history[6][:12]}" in body
    assert c.get("/branches/999/history").status_code == 404


def test_a_shift_the_first_look_missed_is_opened_at_its_night_and_bisected(
    eng,
    mail_env,  # noqa: F811
    monkeypatch,
):
    """The first look is made blind (it never finds the head worse, as with a noisy baseline
    or a drift): the change point alone opens the regression, dated to night 4 and bisected
    between night 3's head and night 4's, once, however many nights follow."""
    from stackbench.jobs.tracking import nightly

    real = nightly.judge_job

    def blind(*a, **kw):
        out = real(*a, **kw)
        out.worse = []
        return out

    monkeypatch.setattr(nightly, "judge_job", blind)
    lab = RealBootLab(real_offsets(), n=14, bad_from=5, drop=0.05)
    reports = []
    for n in range(8):
        lab.head = 2 * n
        reports.append(night(eng, lab)["branches"][0])
    opened = [(i, r["regressions"]) for i, r in enumerate(reports) if r["regressions"]]
    # the third or fourth night at the new level (night 6 or 7: the shuffled rounds vary a
    # night's boots) opens it, and no later night opens anything
    assert [i for i, _ids in opened] in ([5], [6]), reports
    ((_i, (rid,)),) = opened
    with Session(eng) as s:
        assert s.scalar(select(func.count()).select_from(Regression)) == 1
        reg = s.get(Regression, rid)
        assert reg.meta["source"] == "changepoint" and reg.meta["change_night"] == 3
        assert reg.state == "bisected" and reg.culprit == lab.history[5]
        bis = s.scalars(select(Bisect)).one()
        assert (bis.good, bis.bad) == (lab.history[4], lab.history[6])
    assert len(outbox(eng, "regression")) == 1


class Faster:
    """A random source whose values are 50% higher than its base's: another host."""

    def __init__(self, base):
        self.base = base

    def normal(self, mean: float, sd: float) -> float:
        return float(self.base.normal(1.5 * mean, sd))


class HostMoves(FakeLab):
    """Every boot after the first three (night 1's first look of its head) lands on a host
    50% faster: the A/A's boots, a later night's boots of the same kernel."""

    def run(self, eng, tree, build_id, job, runs, boot=None):
        super().run(eng, tree, build_id, job, runs, boot=boot)
        if self.boots >= 3 and not isinstance(self.rng, Faster):
            self.rng = Faster(self.rng)


def test_a_nights_point_is_its_own_boots_not_the_aa_nor_later_top_ups(eng):
    """Night 1 measures its head c0 (3 boots, a night's start); its A/A boots c0 12 times more and night 2's
    first look tops c0 (the baseline) up beside c1, all on a faster host. Night 1's point of
    the history stays its 3 boots; night 2's is c1's boots of night 2."""
    from stackbench.jobs.tracking import history
    from stackbench.resultsdb import buildruns

    lab = HostMoves(n=2, noise=5.0)
    first = night(eng, lab, aa_boots=6)["branches"][0]
    assert first["state"] == "baseline"
    lab.head = 1
    second = night(eng, lab, aa_boots=6)["branches"][0]
    with Session(eng) as s:
        tid = s.scalars(select(TrackedBranch)).one().id
        metric = s.scalars(select(Metric).where(Metric.name == METRIC)).one().id
        jid = s.scalars(select(Run.job_id)).first()
    hist = history.nights(eng, tid)
    assert [n.head for n in hist] == [lab.history[0], lab.history[1]]
    (points,) = history.values(eng, hist, jid, metric).values()
    c0 = buildruns.boot_means_by_kind(eng, [hist[0].build_id], jid, metric)["qemu"]
    stored = c0[hist[0].build_id]
    # c0 holds night 1's first boots, its A/A's 12 and night 2's top-ups (all near 1500)
    own = first["jobs"][0]["runs_head"]
    assert len(stored) >= own + 12 and sum(v > 1400 for v in stored) >= 12
    assert len(points[0]) == own == 3
    assert all(abs(v - 1000) < 50 for v in points[0])  # night 1's host only
    # night 2: c1's boots of its first look, not those its own A/A added afterwards
    assert len(points[1]) == second["jobs"][0]["runs_head"]
    c1 = buildruns.boot_means_by_kind(eng, [hist[1].build_id], jid, metric)["qemu"]
    assert len(c1[hist[1].build_id]) == len(points[1]) + 12
    # the machine's A/A nights beside the history: the 12 boots each night's A/A added
    # after its first look, the faster host's
    (aa,) = history.aa_values(eng, hist, jid, metric).values()
    assert [len(x) for x in aa] == [12, 12]
    assert all(v > 1400 for v in aa[0])
