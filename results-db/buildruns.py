"""The stored runs of one kernel build under one job: how many finished, on how many boots,
one value per run or per boot for a metric, the metrics every build has. Bisection and the
nightly verdicts read their evidence through these queries."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from stackbench.resultsdb import metrics as metric_rules
from stackbench.resultsdb.models import Metric


def metric_row(eng: Engine, name: str) -> Metric:
    """The metric by name, created from the naming rules when no sample has it yet."""
    with Session(eng, expire_on_commit=False) as s, s.begin():
        row = s.scalars(select(Metric).where(Metric.name == name)).one_or_none()
        if row is None:
            mi = metric_rules.info(name)
            row = Metric(
                name=name, unit=mi.unit, higher_is_better=mi.higher_is_better, kind=mi.kind
            )
            s.add(row)
            s.flush()
        return row


def direction(eng: Engine, name: str) -> bool | None:
    """Whether higher is better for metric NAME: its row's, else the declared rules'."""
    with Session(eng) as s:
        row = s.scalars(select(Metric).where(Metric.name == name)).one_or_none()
    return row.higher_is_better if row is not None else metric_rules.info(name).higher_is_better


# A run's boot: the run.boot_id column of the rounds-of-boots plan (migration 0003), else
# meta.boot_id (the pipeline and the labs set it), else the run alone (an import, a synthetic
# lab). The column is read through to_jsonb so this works before and after the migration.
_BOOT_SQL = "coalesce(to_jsonb(r)->>'boot_id', r.meta->>'boot_id', 'run-' || r.id::text)"


def done_boots(eng: Engine, build_id: int, job_id: int) -> int:
    """Boots of the kernel with at least one finished run of the job: the verdict's unit."""
    with eng.connect() as conn:
        return conn.execute(
            text(
                f"SELECT count(DISTINCT {_BOOT_SQL}) FROM run r WHERE r.build_id = :b "
                "AND r.job_id = :j AND r.status = 'done'"
            ),
            {"b": build_id, "j": job_id},
        ).scalar_one()


def per_boot_values(
    eng: Engine, build_id: int, job_id: int, metric_id: int
) -> dict[str, list[float]]:
    """{boot: one value per finished run (the mean of its samples)}, boots in the order they
    ran, runs in run order: what :func:`verdict.judge` takes as one side."""
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT {_BOOT_SQL}, avg(s.value) FROM run r JOIN sample s ON s.run_id = r.id "
                "WHERE r.build_id = :b AND r.job_id = :j AND r.status = 'done' "
                "AND s.metric_id = :m GROUP BY r.id ORDER BY r.id"
            ),
            {"b": build_id, "j": job_id, "m": metric_id},
        ).all()
    out: dict[str, list[float]] = {}
    for boot, v in rows:
        if v is not None:
            out.setdefault(boot, []).append(float(v))
    return out


def coarse_clock(eng: Engine, build_id: int, job_id: int) -> str:
    """Why the kernel's latencies in the job cannot be trusted: the first finished run whose
    guest clock was coarse (jobs/benchmarks/collect.py: clock_state), "" when none was."""
    with eng.connect() as conn:
        why = conn.execute(
            text(
                "SELECT r.sysstate->'clock'->>'coarse' FROM run r WHERE r.build_id = :b "
                "AND r.job_id = :j AND r.status = 'done' "
                "AND coalesce(r.sysstate->'clock'->>'coarse', '') <> '' ORDER BY r.id LIMIT 1"
            ),
            {"b": build_id, "j": job_id},
        ).scalar()
    return str(why or "")


def metrics_of(eng: Engine, build_ids: list[int], job_id: int) -> list[Metric]:
    """Metrics with samples in done runs of the job on every one of the builds."""
    with Session(eng, expire_on_commit=False) as s:
        rows = s.execute(
            text(
                "SELECT s.metric_id FROM sample s JOIN run r ON r.id = s.run_id "
                "WHERE r.job_id = :j AND r.status = 'done' AND r.build_id = ANY(:b) "
                "GROUP BY s.metric_id HAVING count(DISTINCT r.build_id) = :n"
            ),
            {"j": job_id, "b": build_ids, "n": len(set(build_ids))},
        ).all()
        ids = [r[0] for r in rows]
        return list(s.scalars(select(Metric).where(Metric.id.in_(ids)).order_by(Metric.name)))


@dataclass(frozen=True)
class BootMean:
    kind: str  # the machine kind ("" for a run on no machine row)
    build_id: int
    first_run: int  # the boot's first run id: run ids grow, so they say when it was booted
    mean: float  # of its runs' values


def boots_of(eng: Engine, build_ids: list[int], job_id: int, metric_id: int) -> list[BootMean]:
    """One mean per boot of the builds' finished runs of the job, in boot order: a branch's
    history in one query."""
    if not build_ids:
        return []
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT coalesce(m.kind, ''), r.build_id, {_BOOT_SQL} AS boot, r.id, "
                "avg(s.value) FROM run r JOIN sample s ON s.run_id = r.id "
                "LEFT JOIN machine m ON m.id = r.machine_id "
                "WHERE r.build_id = ANY(:b) AND r.job_id = :j AND r.status = 'done' "
                "AND s.metric_id = :m GROUP BY 1, 2, 3, r.id ORDER BY r.id"
            ),
            {"b": list(build_ids), "j": job_id, "m": metric_id},
        ).all()
    runs: dict[tuple[str, int, str], tuple[int, list[float]]] = {}
    for kind, bid, boot, rid, v in rows:
        if v is not None:
            runs.setdefault((kind, bid, boot), (rid, []))[1].append(float(v))
    return [
        BootMean(kind, bid, first, sum(vals) / len(vals))
        for (kind, bid, _boot), (first, vals) in runs.items()
    ]


def boot_means_by_kind(
    eng: Engine, build_ids: list[int], job_id: int, metric_id: int
) -> dict[str, dict[int, list[float]]]:
    """{machine kind: {build: one mean per boot}} of :func:`boots_of`, split by machine kind
    because kinds do not share a level."""
    out: dict[str, dict[int, list[float]]] = {}
    for b in boots_of(eng, build_ids, job_id, metric_id):
        out.setdefault(b.kind, {}).setdefault(b.build_id, []).append(b.mean)
    return out


def jobs_of(eng: Engine, build_ids: list[int]) -> list[int]:
    """The jobs with finished runs on any of the builds, by id."""
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT DISTINCT job_id FROM run WHERE build_id = ANY(:b) AND status = 'done' "
                "ORDER BY job_id"
            ),
            {"b": list(build_ids)},
        ).all()
    return [r[0] for r in rows]


def aa_boots(eng: Engine, job_id: int, metric_id: int, after_run: int = 0) -> list[BootMean]:
    """One mean per boot of the nightly A/A's finished runs of the job (the runs of series
    whose source is ``aa``, whatever kernel they booted) after run ``after_run``, in boot
    order: the machine's own step-free nights, beside a branch's history."""
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT coalesce(m.kind, ''), r.build_id, {_BOOT_SQL} AS boot, r.id, "
                "avg(s.value) FROM run r JOIN sample s ON s.run_id = r.id "
                "JOIN series se ON se.id::text = r.meta->>'series' AND se.source = 'aa' "
                "LEFT JOIN machine m ON m.id = r.machine_id "
                "WHERE r.job_id = :j AND r.status = 'done' AND s.metric_id = :m "
                "AND r.id > :after GROUP BY 1, 2, 3, r.id ORDER BY r.id"
            ),
            {"j": job_id, "m": metric_id, "after": after_run},
        ).all()
    runs: dict[tuple[str, int, str], tuple[int, list[float]]] = {}
    for kind, bid, boot, rid, v in rows:
        if v is not None:
            runs.setdefault((kind, bid, boot), (rid, []))[1].append(float(v))
    return [
        BootMean(kind, bid, first, sum(vals) / len(vals))
        for (kind, bid, _boot), (first, vals) in runs.items()
    ]
