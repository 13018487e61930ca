"""The live verdict pairs by round: runs stored with their round and worker (as the plan's
executors store them) are compared by round, so an offset a round's boots share (its box, a
host-load period, a host's drift) cancels, on several boxes or one; rounds that miss a kernel
hold nothing of the pair; with fewer than ``blocks.MIN_ROUNDS`` complete rounds the pair is
compared unpaired and the table says so. The other kernels of a page never enter a pair's
verdict."""

from __future__ import annotations

import numpy as np

from stackbench import cli
from stackbench.resultsdb import blocks, query
from stackbench.resultsdb import ingest as ig
from stackbench.resultsdb.tables import verdict as table

pytest_plugins = ["helpers.web"]

JOB = ig.JobSpec("vm-scalability", "anon-w-seq-mt", {"test": "anon-w-seq-mt", "size": "8T"})
BASE, PATCH = "a" * 40, "b" * 40
METRIC = "vm-scalability.throughput"
# four boxes of one kind, each with its own offset: the spread swamps a 3% change unpaired
BOX_OFFSET = {"w1": 0.04, "w2": -0.04, "w3": 0.02, "w4": -0.03}


def _runs(
    commit: str,
    level: float,
    rounds: list[int],
    *,
    seed: int,
    load: dict[int, float] | None = None,
    with_rounds: bool = True,
    boot_cov: float = 0.003,
) -> list[ig.RunData]:
    """Two runs per boot, one boot per round; round r ran on box w(1 + r % 4), whose offset
    (and the round's host load) every kernel of the round shares."""
    rng = np.random.default_rng(seed)
    out = []
    for rnd in rounds:
        worker = f"w{1 + rnd % 4}"
        shared = 1 + BOX_OFFSET[worker] + (load or {}).get(rnd, 0.0)
        boot = shared * (1 + boot_cov * rng.normal())
        meta = {"boot_id": f"series-1-r{rnd}-{commit[:12]}"}
        if with_rounds:
            meta |= {"boot_round": rnd, "worker": worker, "series": 1}
        for i in range(2):
            value = level * boot * (1 + 0.001 * rng.normal())
            out.append(
                ig.RunData(
                    JOB, ig.KernelSpec(commit), ig.MachineSpec("qemu-vm"),
                    2 * rnd + i, {METRIC: [value]}, meta=dict(meta),
                )
            )  # fmt: skip
    return out


def _verdict(eng) -> table.verdict.Verdict:
    with eng.connect() as conn:
        ds = query.load(conn, query.kernels_by_id(conn, _build_ids(conn)))
    ((_job, _kernel, rows),) = table.compare(ds)
    (v,) = [r[3] for r in rows if r[0] == METRIC]
    return v


def _build_ids(conn) -> list[int]:
    from sqlalchemy import text

    rows = conn.execute(
        text("SELECT b.id FROM kernel_build b ORDER BY b.commit = :base DESC, b.id"),
        {"base": BASE},
    )
    return [r[0] for r in rows]


PAIRED_4 = f"{blocks.PAIRED} (4 boxes)"


def test_box_offsets_cancel_when_the_round_is_the_block(eng):
    rounds = list(range(1, 7))
    ig.ingest(eng, _runs(BASE, 100000.0, rounds, seed=1))
    ig.ingest(eng, _runs(PATCH, 97000.0, rounds, seed=2))  # 3% slower
    v = _verdict(eng)
    assert v.test == PAIRED_4
    assert v.label == "worse" and (v.n_base, v.n_new, v.runs_base, v.runs_new) == (6, 6, 12, 12)
    assert -3.5 < v.change_pct < -2.5
    assert v.ci_high_pct < 0 and v.level == table.verdict.DEFAULT.spending()[1] * -1 + 1


def test_without_rounds_the_same_boots_are_compared_unpaired(eng):
    rounds = list(range(1, 7))
    ig.ingest(eng, _runs(BASE, 100000.0, rounds, seed=1, with_rounds=False))
    ig.ingest(eng, _runs(PATCH, 97000.0, rounds, seed=2, with_rounds=False))
    v = _verdict(eng)
    # the box spread (about 3.5%) hides the change: more boots wanted
    assert v.test == "yuen-welch" and v.outcome == "undecided" and v.runs_wanted == 10


def test_on_one_box_the_pair_is_paired_by_round_too(eng):
    def one_box(commit: str, level: float, seed: int) -> list[ig.RunData]:
        out = _runs(commit, level, list(range(1, 7)), seed=seed, boot_cov=0.01)
        for r in out:
            r.meta["worker"] = "w1"
        return out

    ig.ingest(eng, one_box(BASE, 100000.0, 3))
    ig.ingest(eng, one_box(PATCH, 100000.0, 4))
    v = _verdict(eng)
    # a host's drift falls on both kernels of a round as a box's offset does
    assert v.test == f"{blocks.PAIRED} (1 box)" and (v.n_base, v.n_new) == (6, 6)


def test_a_host_load_period_on_whole_rounds_makes_no_change(eng):
    rounds = list(range(1, 9))
    load = {2: -0.07, 5: -0.05}  # two rounds under load, every kernel of them alike
    ig.ingest(eng, _runs(BASE, 100000.0, rounds, seed=3, load=load))
    ig.ingest(eng, _runs(PATCH, 100000.0, rounds, seed=4, load=load))
    v = _verdict(eng)
    assert v.test == PAIRED_4 and v.label == "~"
    assert -2 < v.ci_low_pct < v.ci_high_pct < 2


def test_rounds_missing_a_kernel_pair_nothing(eng):
    # the base ran adaptive rounds 6-8 with another kernel; the patch's boot of round 3 was lost
    ig.ingest(eng, _runs(BASE, 100000.0, list(range(1, 9)), seed=5))
    ig.ingest(eng, _runs(PATCH, 97000.0, [1, 2, 4, 5, 6, 7], seed=6))
    v = _verdict(eng)
    assert v.test == PAIRED_4
    assert (v.n_base, v.n_new, v.runs_base, v.runs_new) == (6, 6, 12, 12)
    assert v.label == "worse"


def test_under_min_rounds_complete_the_pair_is_unpaired_and_says_so(eng, capsys):
    # two rounds hold both kernels; the others hold one kernel each
    ig.ingest(eng, _runs(BASE, 100000.0, [1, 2, 3, 4, 5], seed=7))
    ig.ingest(eng, _runs(PATCH, 100000.0, [1, 2, 6, 7, 8], seed=8))
    v = _verdict(eng)
    assert v.test == "yuen-welch, unpaired (2 rounds hold both kernels)"
    assert (v.n_base, v.n_new) == (5, 5)  # every boot, as without rounds
    assert cli.main(["compare", "--style", "stackbench", "--all", BASE, PATCH]) == 0
    out = capsys.readouterr().out
    assert (
        f"pairs: 0 of 1 rows paired by round, on 4 boxes (w1, w2, w3, w4); 1 "
        f"unpaired: fewer than {blocks.MIN_ROUNDS} rounds hold both kernels" in out
    )


def test_compare_and_the_page_say_how_many_boxes_and_whether_paired(eng, client, capsys):
    rounds = list(range(1, 7))
    ig.ingest(eng, _runs(BASE, 100000.0, rounds, seed=1))
    ig.ingest(eng, _runs(PATCH, 97000.0, rounds, seed=2))
    assert cli.main(["compare", "--style", "stackbench", BASE, PATCH]) == 0
    line = "pairs: 1 of 1 rows paired by round, on 4 boxes (w1, w2, w3, w4)"
    out = capsys.readouterr().out
    assert line in out and out.startswith("# 4 boxes contributed: w1, w2, w3, w4\n")
    # every style's first line names the boxes, the LKP table's too
    assert cli.main(["compare", BASE, PATCH]) == 0
    assert capsys.readouterr().out.startswith("# 4 boxes contributed: w1, w2, w3, w4\n")
    from test_compare_machines import _page, _sign_in

    _sign_in(eng, client)
    _url, page = _page(client, {"k": f"{BASE[:10]} {PATCH[:10]}"})
    assert '<p id="boxes">4 boxes contributed: w1, w2, w3, w4.</p>' in page
    assert f'<p id="blocking">Verdicts: {line}.</p>' in page


C, D = "c" * 40, "d" * 40


def _four_kernels(eng, d_rounds: list[int]) -> None:
    """The base, the patch 8% slower, an unchanged kernel and a noisier unchanged one (boot
    CoV 6%) in 10 rounds on the boxes, boot CoV 2%."""
    rounds = list(range(1, 11))
    for i, (commit, level, where, cov) in enumerate(
        [
            (BASE, 1e5, rounds, 0.02), (PATCH, 0.92e5, rounds, 0.02), (C, 1e5, rounds, 0.02),
            (D, 1e5, d_rounds, 0.06),
        ]
    ):  # fmt: skip
        ig.ingest(eng, _runs(commit, level, where, seed=140 + i, boot_cov=cov))


def _verdicts(eng, commits: set[str]) -> dict[str, table.verdict.Verdict]:
    with eng.connect() as conn:
        kernels = query.kernels_by_id(conn, _build_ids(conn))
        ds = query.load(conn, [k for k in kernels if k.commit in commits])
    return {k.commit: v for _j, k, rows in table.compare(ds) for *_x, v in rows}


def test_the_other_kernels_never_change_a_pairs_verdict(eng):
    _four_kernels(eng, [r for r in range(1, 11) if r != 4])  # D's boot of round 4 lost
    every = _verdicts(eng, {BASE, PATCH, C, D})
    for commit in (PATCH, C, D):
        # every field: label, interval, its level, q, boots, test
        assert _verdicts(eng, {BASE, commit})[commit] == every[commit]
    assert every[PATCH].label == "worse" and every[PATCH].test == PAIRED_4
    assert (every[PATCH].n_base, every[D].n_base) == (10, 9)
    # the noisier kernel's own spread, not its neighbours', sets its interval
    width = {c: every[c].ci_high_pct - every[c].ci_low_pct for c in (C, D)}
    assert width[D] > 2 * width[C] and every[D].outcome != "changed"
