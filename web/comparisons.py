"""Comparisons: a set of kernels (base first) and table options, saved under a permanent key.

The rendered tables, verdicts and plot data are kept in ``comparison.result`` together with a
fingerprint of the runs they came from; a page view recomputes only when runs were added or
removed since, so the comparison page costs two small queries once computed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from stackbench.errors import NotFoundError, StackbenchError
from stackbench.resultsdb import (
    comparisons_q,
    coverage_store,
    db,
    kernels_q,
    profile_store,
    query,
    storable,
)
from stackbench.resultsdb.metrics import is_counter
from stackbench.resultsdb.tables import coverage as coverage_table
from stackbench.resultsdb.tables import profile as profile_table
from stackbench.resultsdb.tables import render
from stackbench.resultsdb.tables.verdict import job_title as judged_title
from stackbench.resultsdb.verdict import is_headline

if TYPE_CHECKING:
    from stackbench.resultsdb.models import Comparison

log = logging.getLogger(__name__)

STYLES = ("lkp", "mmtests", "stackbench")
MMTESTS_VIEWS = (
    ("table", "latency"),
    ("table", "counts"),
    ("table", "locality"),
    ("monitor", "duration"),
    ("monitor", "vmstat"),
)


@dataclass(frozen=True)
class Options:
    all_rows: bool = False
    suite: str | None = None
    machine: str | None = None  # only this machine's runs
    pool_machines: bool = False  # pool the runs of several machines (the tables say so)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"all_rows": self.all_rows, "suite": self.suite}
        # only when set, so the keys of existing comparisons stay what they were
        if self.machine:
            out["machine"] = self.machine
        if self.pool_machines:
            out["pool_machines"] = True
        return out

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> Options:
        p = params or {}
        return cls(
            all_rows=bool(p.get("all_rows")),
            suite=p.get("suite"),
            machine=p.get("machine"),
            pool_machines=bool(p.get("pool_machines")),
        )


def comparison_key(build_ids: list[int], opts: Options) -> str:
    return comparisons_q.key_for(build_ids, opts.as_dict())


def resolve_builds(s: Session, refs: list[str]) -> list[int]:
    """Build ids for refs: ``#ID`` or a commit, unique prefix or name (query's rules)."""
    ids = []
    conn = s.connection()
    for ref in refs:
        ref = ref.strip()
        if not ref:
            continue
        if ref.startswith("#") and ref[1:].isdigit():
            # no id column holds more than ten digits: longer is unknown, not a query
            build_id = int(ref[1:]) if ref.isascii() and len(ref) <= 11 else None
            if (
                build_id is None
                or storable.int_problem(build_id)
                or kernels_q.get(s, build_id) is None
            ):
                raise NotFoundError(f"unknown kernel build {ref[:24]}")
            ids.append(build_id)
        else:
            ids.append(query.resolve_kernel(conn, ref).id)
    if not ids:
        raise StackbenchError("pick at least one kernel (base first)")
    if len(set(ids)) != len(ids):
        raise StackbenchError("a kernel appears twice in the comparison")
    return ids


class QuotaExceeded(StackbenchError):
    """The user started too many new comparisons lately (HTTP 429)."""


def get_or_create(
    s: Session, build_ids: list[int], opts: Options, *, owner_id: int | None = None
) -> Comparison:
    key = comparison_key(build_ids, opts)
    params = {**opts.as_dict(), "owner_id": owner_id}
    return comparisons_q.get_or_create(s, key, build_ids, params)


def create_for(
    s: Session, user_id: int, refs: list[str], opts: Options, *, max_kernels: int
) -> Comparison:
    """A comparison a signed-in user asks for: at most ``max_kernels`` kernels (the cost
    grows with each), and a new one only within the user's quota; asking again for a
    comparison that exists costs nothing."""
    from stackbench.web import ratelimit

    ids = resolve_builds(s, refs)
    if len(ids) > max_kernels:
        raise StackbenchError(f"{len(ids)} kernels: at most {max_kernels} per comparison")
    key = comparison_key(ids, opts)
    found = comparisons_q.by_key(s, key)
    if found is not None:
        return found
    msg = ratelimit.check_comparison(s, user_id)
    if msg:
        raise QuotaExceeded(msg)
    return get_or_create(s, ids, opts, owner_id=user_id)


def _render_tables(
    ds: query.Dataset, opts: Options, flags: dict[int, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every table the page shows, each made as ``stackbench compare`` makes it (``flags``:
    the coverage notes on the stackbench table's kernel lines)."""
    tables: dict[str, Any] = {"mmtests": []}
    errors: dict[str, str] = {}
    for style in ("lkp", "stackbench"):
        try:
            # as the CLI prints them: LKP's changed rows and the headline verdicts by
            # default, every row with all_rows
            kw = {"flags": flags} if style == "stackbench" else {}
            tables[style] = render.table_of(ds, style, all_rows=opts.all_rows, **kw)
        except StackbenchError as exc:
            errors[style] = str(exc)
    msgs = []
    for kind, name in MMTESTS_VIEWS:
        try:
            kw = {"table": name} if kind == "table" else {"monitor": name}
            out = render.table_of(ds, "mmtests", **kw)
        except StackbenchError as exc:
            msgs.append(f"{name}: {exc}")
            continue
        if out.strip() and all(out != t["text"] for t in tables["mmtests"]):
            tables["mmtests"].append({"name": f"{kind} {name}", "text": out})
    if not tables["mmtests"] and msgs:
        # every view says the same thing when the suites are missing: say it once
        errors["mmtests"] = msgs[0].split(": ", 1)[-1]
    tables["seeds"] = _seed_tables(ds)
    return tables, errors


def _seed_tables(ds: query.Dataset) -> list[dict[str, str]]:
    """The seeds' layouts (001's latency percentiles, 003's Success/Success(N)) that these
    results can fill; none when the comparison has no such runs."""
    out = []
    for style in ("alloc-latency", "order-success"):
        try:
            out.append({"style": style, "text": render.table_of(ds, style)})
        except StackbenchError:
            continue
    return out


def _per_run(ds: query.Dataset, job_id: int, metric_id: int) -> list[list[float]]:
    """Per kernel, one value per run (the mean of that run's samples), in run order."""
    per_build = ds.values.get((job_id, metric_id), {})
    out = []
    for k in ds.kernels:
        runs = per_build.get(k.id, {})
        order = sorted(runs, key=lambda rid: (ds.runs[rid].iteration, rid))
        out.append([sum(runs[r]) / len(runs[r]) for r in order if runs[r]])
    return out


def verdict_section(rows: list[dict[str, Any]], all_rows: bool) -> tuple[list[dict], str]:
    """The verdict section's rows: changed and undecided headline metrics and changed
    THP/compaction counters (any later kernel), largest change first, and the line that counts the rest; every row with
    ``all_rows``."""
    if all_rows:
        return rows, ""

    def size(r: dict[str, Any]) -> float:
        changes = [abs(v["change_pct"]) for v in r["verdicts"] if v.get("change_pct") is not None]
        return max(changes, default=0.0)

    def open_(r: dict[str, Any]) -> bool:
        return any(v.get("outcome") in ("changed", "undecided") for v in r["verdicts"])

    def listed(r: dict[str, Any]) -> bool:
        # a counter is listed once it changed (its own family: tables.verdict.group)
        if r.get("counter") and not r.get("headline"):
            return any(v.get("outcome") == "changed" for v in r["verdicts"])
        return bool(r.get("headline")) and open_(r)

    shown = sorted((r for r in rows if listed(r)), key=lambda r: -size(r))
    rest = [r for r in rows if not listed(r)]
    if not rest:
        return shown, ""
    changed = sum(1 for r in rest if r.get("cls"))
    undecided = sum(1 for r in rest if open_(r) and not r.get("cls"))
    other = len(rest) - changed - undecided
    line = (
        f"{len(rest)} more metrics not shown: {changed} changed and {undecided} undecided "
        f"counters, durations or metrics without a direction, {other} unchanged or n/a"
    )
    return shown, line


def compute(eng: Engine, build_ids: list[int], opts: Options) -> dict[str, Any]:
    """Tables, verdicts and per-run values of the kernels, as stored in comparison.result."""
    with db.session(eng) as s:
        fp = comparisons_q.fingerprint(s, build_ids)
        conn = s.connection()
        kernels = query.kernels_by_id(conn, build_ids)
        ds = query.load(conn, kernels, suite=opts.suite, machine=opts.machine)
        covered = coverage_store.load(conn, kernels)
        profiled = profile_store.load(conn, kernels)
    result: dict[str, Any] = {
        "fingerprint": fp,
        "format": RESULT_FORMAT,
        "kernels": [{"id": k.id, "commit": k.commit, "label": k.label} for k in kernels],
        "tables": {},
        "errors": {},
        "metrics": [],
        "coverage": [r.as_dict() for r in covered],
        "coverage_text": coverage_table.render(covered),
        "profile": [r.as_dict() for r in profiled],
        "profile_text": profile_table.render(profiled),
    }
    if not ds.runs:
        on = f" on machine {opts.machine}" if opts.machine else ""
        result["errors"]["all"] = f"no finished runs stored for these kernels{on} yet"
        return result
    result["machines"] = render.machines_of(ds)
    result["boxes"] = ds.boxes()
    try:
        render.mixed_clocks_error(ds)
    except StackbenchError as exc:
        result["errors"]["all"] = str(exc)
        return result
    result["warnings"] = render.coarse_clock_notes(ds)
    coarse_jobs: dict[int, str] = {}
    for (job_id, _build), why in sorted(ds.coarse_clocks().items()):
        coarse_jobs.setdefault(job_id, why)
    if ds.pooled_machines():
        if not opts.pool_machines:
            result["errors"]["all"] = (
                f"runs of these kernels come from {len(result['machines'])} machines "
                f"({', '.join(result['machines'])}): runs are compared per machine; pick "
                "one machine, or pool them (the tables then say so)"
            )
            return result
        result["pooled"] = (
            f"runs pooled across {len(result['machines'])} machines: "
            f"{', '.join(result['machines'])}"
        )
    flags = {r.kernel_id: r.flag for r in covered if r.flag}
    result["tables"], result["errors"] = _render_tables(ds, opts, flags)
    if result["tables"].get("stackbench"):
        result["tables"]["stackbench"] += result["coverage_text"] + result["profile_text"]
    if result.get("pooled"):
        head = render.check_machines(ds, pool=True)  # the CLI's first line
        for style in ("lkp", "stackbench"):
            if result["tables"].get(style):
                result["tables"][style] = head + result["tables"][style]
        for t in result["tables"]["mmtests"]:
            t["text"] = head + t["text"]
    from stackbench.web import verdicts

    rows = []
    for (job_id, metric_id), _ in sorted(ds.values.items()):
        job = ds.jobs[job_id]
        met = ds.metrics[metric_id]
        rows.append(
            {
                "job": f"{job.suite}/{job.test}" if job.test else job.suite,
                # the job with its parameters: two sub-jobs of a suite share metric names
                "subjob": judged_title(job),
                "job_id": job_id,
                "metric": met.name,
                "metric_id": metric_id,
                "unit": met.unit,
                "higher_is_better": met.higher_is_better,
                "kind": met.kind,
                "counter": is_counter(met.name),
                # timed with a coarse clock: marked, and the verdict stays undecided
                "coarse_clock": coarse_jobs.get(job_id, "") if met.kind == "latency" else "",
                "headline": is_headline(met.name, met.kind, met.higher_is_better),
                "values": _per_run(ds, job_id, metric_id),
                "verdicts": [],
            }
        )
    verdicts.judge_rows(ds, rows)
    result["metrics"] = rows
    if len(ds.kernels) > 1:
        from stackbench.resultsdb.tables import verdict as judged_table

        result["blocking"] = judged_table.blocking(ds)
    return result


@dataclass
class Found:
    id: int
    key: str
    build_ids: list[int]
    params: dict[str, Any]
    fingerprint: str
    result: dict[str, Any]


def lookup(eng: Engine, key: str) -> Found:
    """The comparison ``key`` with a result that matches its runs (as of FRESH_S ago).

    No database work when this process checked the key within FRESH_S seconds; one round
    trip when it has the result cached; otherwise the stored result is read, or recomputed
    under an advisory lock (so concurrent first views compute once) and saved for every
    other process."""
    now = time.monotonic()
    recent = _RECENT.get(key)
    if recent is not None and recent[0] > now:
        return recent[1]
    found = _lookup(eng, key)
    _RECENT.put(key, (now + FRESH_S, found))
    return found


def _lookup(eng: Engine, key: str) -> Found:
    with db.session(eng) as s:
        row = comparisons_q.lookup(s, key)
    if row is None:
        raise NotFoundError(f"no comparison '{key}'")
    cid, build_ids, params, stored_fp, live_fp = row
    cached = RESULTS.get((key, live_fp))
    if cached is None:
        with db.session(eng) as s:
            stored_fp, stored = comparisons_q.lock_result(s, cid, _LOCK)
            live_fp = comparisons_q.fingerprint(s, build_ids)
            # a result stored by an older stackbench lacks fields its pages now print
            if stored_fp == live_fp and stored.get("format") == RESULT_FORMAT:
                cached = stored
            else:
                opts = Options.from_params(params)
                cached = _finite(compute(eng, build_ids, opts))
                live_fp = cached["fingerprint"]
                comparisons_q.save_result(s, cid, cached)
        RESULTS.put((key, live_fp), cached)
    return Found(cid, key, build_ids, params or {}, live_fp, cached)


def _finite(obj: Any) -> Any:
    # JSONB has no NaN or infinity
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


class RenderCache:
    """Rendered HTML fragments per (comparison key, fingerprint): a page view after the first
    one skips template rendering of hundreds of rows and plots."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._d: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Any:
        with self._lock:
            v = self._d.get(key)
            if v is not None:
                self._d.move_to_end(key)
            return v

    def put(self, key: tuple, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)


# the shape of a stored result; a stored result of another shape is computed again (2: each
# verdict carries its pair's base and new figures)
RESULT_FORMAT = 2
# per process: results (parsed JSONB) and rendered fragments, keyed by (key, fingerprint)
RESULTS = RenderCache(32)
CACHE = RenderCache(64)
_LOCK = 0x5B5B0002  # advisory lock class for computing a comparison
# a popular comparison is re-checked against its runs at most this often per process: runs
# arrive minutes apart, page views under load many times a second
FRESH_S = 2.0
_RECENT = RenderCache(256)
