"""Each kernel's LKP column of a job, kept in the database, and the ``--all`` table made of them.

``lkp ncompare`` reads each commit's matrix.json, which LKP writes once when a result is
uploaded, not when a table is asked for. stackbench keeps the same per-kernel facts one step
further on: per (job, kernel), the average of every stat over the kernel's complete runs,
its ``average ±stddev%`` cell as the table prints it, and the sums of the failure stats
(``lkp_column``, migration 0006). An ``--all`` table of any kernels is then their columns side
by side: the %change of every stat against the base, LKP's row order and one join per row.
That needs no numpy and no sample, so a new comparison prints in the time of a kept one.

A column is kept with the fingerprint of the runs it was made from (count, largest and sum
of the ids of its finished runs) and the state of the table code
(:func:`textcache.code_version`); a column whose runs or code changed is made again from its
samples (lkp.column_summaries) the first time a table needs it. ``lkp ncompare -a`` layout
and numbers are lkp.py's: lkp.render(all_rows=True) formats through :func:`render` too, on
columns it summarises in memory, so the web's tables and the CLI's are the same bytes.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections import namedtuple
from operator import mul, sub, truediv
from typing import Any

import psycopg

from stackbench.errors import NotFoundError
from stackbench.resultsdb import db, kernelrefs
from stackbench.resultsdb.tables import lkp_format, textcache

# perf: stat names, their averages and cells; fails: failure stat names and their sums over
# every run; origins: (first run id, metric id) of each perf-profile stat, which orders
# perf-profile rows that LKP's sort leaves tied (lkp_format.row_order)
Column = namedtuple("Column", "runs axes perf avgs cells fails sums origins")
_ABSENT = (0.0, lkp_format.ABSENT_CELL)


def job_order(suite: str, test: str, params: dict | None) -> tuple:
    """The order of a table's groups."""
    return (suite, test, sorted((str(k), str(v)) for k, v in (params or {}).items()))


def render(groups: list[list[tuple[str, Column]]], labels: list[str]) -> str:
    """The ``--all`` table of ``groups`` (in job order; each a list of (kernel label,
    column), base first); ``labels``: every kernel asked for, for the empty table's line."""
    text = "".join(render_group(g) for g in groups)
    return text or lkp_format.nothing_shown(labels, True)


def render_group(columns: list[tuple[str, Column]]) -> str:
    labels = [label for label, _ in columns]
    cols = [c for _, c in columns]
    first = cols[0]
    # the usual group: every kernel has the same stats, so the columns' own row order (see
    # in_row_order) is the group's, and there is nothing to unite or sort
    same = all(c.perf == first.perf and c.fails == first.fails for c in cols[1:])
    fail_keys = first.fails if same else _union(c.fails for c in cols)
    perf_keys = first.perf if same else _union(c.perf for c in cols)
    if not fail_keys and not perf_keys:
        return ""
    runs = [c.runs for c in cols]
    if any(k.startswith("perf-profile") for k in perf_keys):
        perf_keys = _first_seen_order(perf_keys, cols)
        same = False  # tied perf-profile rows are ordered by their changes
    key = None  # LKP's row order, when the rows need a sort (1 ms to make)
    if fail_keys or not same:
        key = lkp_format.row_order([(k, True) for k in fail_keys] + [(k, False) for k in perf_keys])
    out = [lkp_format.group_header(labels, [c.axes for c in cols])]
    n = len(cols) - 1
    if fail_keys:
        sums = [dict(zip(c.fails, c.sums, strict=True)) for c in cols]
        rows = []
        for k in fail_keys:
            fails = [s.get(k, 0) for s in sums]
            rows.append((k, fails, lkp_format.failure_changes(fails, runs)))
        rows.sort(key=lambda r: key(r[0], r[2]))
        out.append(lkp_format.failure_header(n))
        out.extend(lkp_format.failure_row(k, fails, runs, ch) for k, fails, ch in rows)
    if perf_keys:
        out.append(lkp_format.perf_header(n))
        out.append(_perf_rows(perf_keys, cols, key, same))
    out.append("\n")
    return "".join(out)


def in_row_order(col: Column) -> Column:
    """``col`` with its stats in LKP's row order of its own stats (fails and perf), as
    columns are made and kept: a group of kernels with the same stats is then in order."""
    key = lkp_format.row_order([(k, True) for k in col.fails] + [(k, False) for k in col.perf])
    order = sorted(range(len(col.perf)), key=lambda i: key(col.perf[i], None))
    return col._replace(
        perf=[col.perf[i] for i in order],
        avgs=[col.avgs[i] for i in order],
        cells=[col.cells[i] for i in order],
    )


def _perf_rows(keys: list[str], cols: list[Column], key, ordered: bool) -> str:
    """The %stddev rows of ``keys`` (``ordered``: every column has them, in row order).
    Made a column at a time, then formatted by one printf template of the whole section:
    a row at a time, the same 20,000 cells took 30 ms."""
    if ordered:
        avgs = [c.avgs for c in cols]
        cells = [c.cells for c in cols]
    elif not any(k.startswith("perf-profile") for k in keys) and all(c.perf == keys for c in cols):
        # every kernel has every stat, in one order; sort once, pick by it
        order = sorted(range(len(keys)), key=lambda i: key(keys[i], None))  # unique names
        keys = [keys[i] for i in order]
        avgs = [[c.avgs[i] for i in order] for c in cols]
        cells = [[c.cells[i] for i in order] for c in cols]
    else:
        have = [dict(zip(c.perf, zip(c.avgs, c.cells, strict=True), strict=True)) for c in cols]
        if any(k.startswith("perf-profile") for k in keys):
            # only tied perf-profile rows are ordered by their changes
            changes_of = {k: _changes([c.get(k, _ABSENT)[0] for c in have], k) for k in keys}
            keys = sorted(keys, key=lambda k: key(k, changes_of[k]))
        else:
            keys = sorted(keys, key=lambda k: key(k, None))
        values = [[c.get(k, _ABSENT) for k in keys] for c in have]
        avgs = [[v[0] for v in col] for col in values]
        cells = [[v[1] for v in col] for col in values]
    absolute = [lkp_format.uses_absolute_change(k) for k in keys]
    points = [i for i, ab in enumerate(absolute) if ab]
    base = avgs[0]
    guarded = [b if b != 0 else 1e-100 for b in base]  # LKP's guard against a zero base
    rows, stride = len(keys), 2 * len(cols)
    pieces: list[str] = [""] * (rows * stride)
    args: list[object] = [None] * (rows * stride)
    pieces[0::stride] = ["%s"] * rows
    args[0::stride] = cells[0]
    # the spec per row for a change under 100,000 and for a larger one
    small = [lkp_format.CHANGE_SPECS[(True, ab)] for ab in absolute]
    big = [lkp_format.CHANGE_SPECS[(False, ab)] for ab in absolute]
    hundreds = [100.0] * rows
    for j in range(1, len(cols)):
        # lkp_format.change on every row through map() (a comprehension over the 20,000
        # cells took 6 ms): the same operations in the same order, so the same bits
        changes = list(map(truediv, map(mul, hundreds, map(sub, avgs[j], guarded)), guarded))
        for i in points:
            changes[i] = avgs[j][i] - base[i]
        total = sum(changes)
        if total - total == 0 and max(map(abs, changes)) < 100_000:  # finite, all small
            pieces[2 * j - 1 :: stride] = small
        else:
            pieces[2 * j - 1 :: stride] = [
                s if -100_000 < p < 100_000 else b
                for p, s, b in zip(changes, small, big, strict=True)
            ]
        args[2 * j - 1 :: stride] = changes
        pieces[2 * j :: stride] = ["%s"] * rows
        args[2 * j :: stride] = cells[j]
    pieces[stride - 1 :: stride] = ["  %s\n"] * rows
    args[stride - 1 :: stride] = keys
    return "".join(pieces) % tuple(args)


def _changes(avgs: list[float], stat: str) -> list[float]:
    absolute = lkp_format.uses_absolute_change(stat)
    return [lkp_format.change(a, avgs[0], absolute) for a in avgs[1:]]


def _union(lists) -> list[str]:
    seen: dict[str, None] = {}
    for names in lists:
        seen.update(dict.fromkeys(names))
    return list(seen)


def _first_seen_order(keys: list[str], cols: list[Column]) -> list[str]:
    """perf-profile stats in the order lkp.py's matrices list them (the first column that
    has them, then where they first appear among the runs), the others where they are:
    rows LKP's sort leaves tied keep this order."""
    origin: dict[str, tuple[int, int]] = {}
    for c in cols:
        for name, at in c.origins.items():
            if name not in origin or at < origin[name]:
                origin[name] = at
    first_col: dict[str, int] = {}
    for i, c in enumerate(cols):
        for name in c.perf:
            first_col.setdefault(name, i)
    pp = [k for k in keys if k.startswith("perf-profile")]
    pp.sort(key=lambda k: (first_col[k], origin.get(k, (0, 0))))
    ordered = iter(pp)
    return [next(ordered) if k.startswith("perf-profile") else k for k in keys]


# -- kept in the database --------------------------------------------------------------------

_FIELDS = ("runs", "axes", "perf", "avgs", "cells", "fails", "sums", "origins")


def to_row(col: Column) -> dict[str, Any] | None:
    """The column as lkp_column's text fields, or None when a name cannot be kept in them
    (a newline or tab in a stat name or an axis: such a column is summarised afresh each
    time)."""
    names = [*col.perf, *col.fails, *col.axes, *col.axes.values()]
    if any("\n" in k or "\t" in k for k in names):
        return None
    return {
        "runs": col.runs,
        "axes": "\n".join(f"{k}\t{v}" for k, v in col.axes.items()),
        "perf": "\n".join(col.perf),
        "avgs": _pack(col.avgs),
        "cells": "\n".join(col.cells),
        "fails": "\n".join(col.fails),
        "sums": _pack(col.sums),
        "origins": "\n".join(f"{k}\t{r}\t{m}" for k, (r, m) in col.origins.items()),
    }


def _pack(values: list[float]) -> str:
    """float8s as hex text, little-endian: every bit kept, and read back without parsing a
    number (20,000 float() calls took 2 ms of a 60 ms command)."""
    packed = array("d", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes().hex()


def _unpack(text: str) -> list[float]:
    packed = array("d", bytes.fromhex(text))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


def _lines(text: str) -> list[str]:
    return text.split("\n") if text else []


def from_row(runs: int, axes: str, perf: str, avgs: str, cells: str, fails: str, sums: str,
             origins: str, names: dict[str, list[str]] | None = None) -> Column:  # fmt: skip
    """The kept column; ``names``: lists of stat names already read, shared by the columns
    that have the same (splitting 2,000 names took 0.15 ms a column, and render_group
    then compares a list with itself)."""
    pp = {}
    for line in _lines(origins):
        name, run, metric = line.split("\t")
        pp[name] = (int(run), int(metric))
    return Column(
        runs,
        dict(line.split("\t", 1) for line in _lines(axes)),
        _names(perf, names),
        _unpack(avgs),
        _lines(cells),
        _names(fails, names),
        _unpack(sums),
        pp,
    )


def _names(text: str, seen: dict[str, list[str]] | None) -> list[str]:
    if seen is None:
        return _lines(text)
    got = seen.get(text)
    if got is None:
        got = seen[text] = _lines(text)
    return got


def _code() -> str:
    """The table code's part of a column's fingerprint."""
    return "/" + textcache.code_version()


def fingerprint(run_ids: list[int]) -> str:
    """The runs' part of a column's fingerprint, as _GATHER computes it."""
    return f"{len(run_ids)}:{max(run_ids)}:{sum(run_ids)}"


_KERNEL = ", ".join("k." + c for c in kernelrefs.COLUMNS.split(", "))
# the kernels the references may name (kernelrefs picks among them), each with its jobs'
# run fingerprints and kept columns (those kept by this code from these runs): one query,
# one round trip. A candidate without runs comes with NULLs, so that pick sees it too.
_GATHER = (
    f"SELECT (SELECT version_num FROM alembic_version), {_KERNEL}, f.job_id, f.machines, "
    "j.suite, j.test, j.params::text, "
    + ", ".join(f"CASE WHEN c.fingerprint = f.fp || %(code)s THEN c.{n} END" for n in _FIELDS)
    + " FROM kernel_build k LEFT JOIN LATERAL (SELECT r.job_id, "
    "count(*) || ':' || max(r.id) || ':' || sum(r.id) AS fp, "
    "string_agg(DISTINCT coalesce(m.name, ''), E'\\n') AS machines "
    "FROM run r LEFT JOIN machine m ON m.id = r.machine_id "
    "WHERE r.build_id = k.id AND r.status = 'done' GROUP BY r.job_id) f ON true "
    "LEFT JOIN job j ON j.id = f.job_id "
    "LEFT JOIN lkp_column c ON c.job_id = f.job_id AND c.build_id = k.id "
    "WHERE k.commit = ANY(%(refs)s::text[]) OR k.name = ANY(%(refs)s::text[]) "
    "OR k.commit LIKE ANY(%(prefixes)s::text[]) ORDER BY k.id"
)
# _GATHER's row: the schema's revision, the kernel (kernelrefs.COLUMNS), the job, its runs'
# machines, suite, test and params, then the kept column's _FIELDS
_ID, _JOB, _MACHINES, _SUITE, _TEST, _PARAMS, _COLUMN = 1, 6, 7, 8, 9, 10, 11


def render_kept(
    conn: psycopg.Connection, refs: list[str], suite: str | None
) -> tuple[str, list[int]] | None:
    """The ``--all`` LKP table of ``refs`` from their kept columns and the ids of the
    kernels it shows (base first), on a psycopg connection (the CLI's, in autocommit mode or
    in a transaction); columns not kept yet (or stale) are made from their samples and
    kept. None when this path cannot serve (a kernel it cannot resolve, no runs, runs of
    several machines in one job, a schema to migrate, a database error): the full path then
    computes or reports."""
    try:
        code = _code()
        prefixes = [p for p in map(kernelrefs.prefix_pattern, refs) if p is not None]
        params = {"code": code, "refs": list(refs), "prefixes": prefixes}
        rows = conn.execute(_GATHER, params).fetchall()
        if not rows or rows[0][0] != db.head_revision():
            return None
        candidates = list({r[_ID]: r[_ID:_JOB] for r in rows}.values())
        try:
            kernels = [kernelrefs.pick(ref, candidates) for ref in refs]
        except NotFoundError:
            return None  # the full path says which
        picked = {k[0] for k in kernels}
        rows = [
            r
            for r in rows
            if r[_ID] in picked and r[_JOB] is not None and (suite is None or r[_SUITE] == suite)
        ]
        machines: dict[int, set[str]] = {}
        for r in rows:
            machines.setdefault(r[_JOB], set()).update(r[_MACHINES].split("\n"))
        if not rows or any(len(m) > 1 for m in machines.values()):
            return None
        names: dict[str, list[str]] = {}
        kept = {
            (r[_JOB], r[_ID]): from_row(*r[_COLUMN:], names) for r in rows if r[_COLUMN] is not None
        }
        stale = {(r[_JOB], r[_ID]) for r in rows if r[_COLUMN] is None}
        if stale:
            kept.update(_summarise(conn, kernels, stale, code))
    except psycopg.Error:
        return None
    jobs = {r[_JOB]: r for r in rows}
    if len(jobs) > 1:
        jobs = {r[_JOB]: r for r in sorted(jobs.values(), key=_job_key)}
    single = len(kernels) == 1
    groups = []
    for job_id in jobs:
        cols = [(k[2] or k[1], kept[(job_id, k[0])]) for k in kernels if (job_id, k[0]) in kept]
        if len(cols) >= 2 or (single and cols):
            groups.append(cols)
    return render(groups, [k[2] or k[1] for k in kernels]), [k[0] for k in kernels]


def _job_key(row: tuple) -> tuple:
    params = row[_PARAMS]
    return job_order(row[_SUITE], row[_TEST], json.loads(params) if params else None)


def _summarise(conn: psycopg.Connection, kernels: list[tuple], stale: set, code: str) -> dict:
    """The stale columns made from their samples (numpy, lkp.py), and kept when the
    database takes them (a read-only one does not; the table is printed all the same)."""
    # query and lkp bring numpy (50-70 ms measured), which a table of kept columns never
    # needs; lkp also imports this module
    from stackbench.resultsdb import query
    from stackbench.resultsdb.tables import lkp

    wanted = {build for _job, build in stale}
    ks = [query.Kernel(*k) for k in kernels if k[0] in wanted]
    with conn.transaction():  # the samples' read sets its plan for the transaction
        ds = query.load(conn, list({k.id: k for k in ks}.values()))
    made = {key: col for key, col in lkp.column_summaries(ds).items() if key in stale}
    try:
        with conn.transaction():
            store(conn, ds, made, code)
    except psycopg.Error:
        pass
    return made


def store(conn: Any, ds: Any, columns: dict[tuple[int, int], Column], code: str) -> None:
    """Keep ``columns`` ((job id, build id) -> Column) made from ``ds``'s runs on a psycopg
    connection, in a transaction the caller commits."""
    runs: dict[tuple[int, int], list[int]] = {}
    for r in ds.runs.values():
        runs.setdefault((r.job_id, r.build_id), []).append(r.id)
    conn.execute("SET LOCAL synchronous_commit = off")  # a lost column is made again
    for (job_id, build_id), col in columns.items():
        row = to_row(col)
        if row is None:
            continue
        row.update(
            job_id=job_id, build_id=build_id, fp=fingerprint(runs[(job_id, build_id)]) + code
        )
        conn.execute(_STORE, row)


_STORE = (
    "INSERT INTO lkp_column (job_id, build_id, fingerprint, "
    + ", ".join(_FIELDS)
    + ") VALUES (%(job_id)s, %(build_id)s, %(fp)s, "
    + ", ".join(f"%({n})s" for n in _FIELDS)
    + ") ON CONFLICT (job_id, build_id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
    + ", ".join(f"{n} = EXCLUDED.{n}" for n in _FIELDS)
)


def refresh(conn: Any, build_ids: list[int]) -> int:
    """Make and keep the columns of ``build_ids``' runs (after an import, so that the first
    table of them is as quick as the next). ``conn``: psycopg's or SQLAlchemy's, committed
    by the caller. Returns how many columns were kept."""
    from stackbench.resultsdb import query
    from stackbench.resultsdb.tables import lkp  # see _summarise

    ds = query.load(conn, query.kernels_by_id(conn, build_ids))
    if not ds.runs:
        return 0
    made = lkp.column_summaries(ds)
    store(query._raw(conn), ds, made, _code())
    return len(made)
