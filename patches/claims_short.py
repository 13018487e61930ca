"""Claims authors write without a tool's table: value rows with one column per kernel
(seed 003's ``compact_stall`` and ``Success(N):`` rows, mmtests' monitor rows such as
``Compaction migrate scanned``), the same rows with a parameter per column and one block per
kernel (seed 003's ``Hogger: 150MB 200MB ...``), a percentile list per kernel (seed 001),
and sentences (``mmap-pread-seq-mt: -18.3% if ...``, ``name: 100 -> 80``).

No percentage is printed for value rows: ``printed_pct`` and ``change_pct`` are both the
change the values give, the later column against the first."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from stackbench.patches import claims_mmtests
from stackbench.patches.claims import Claim, Word, number, relative, round_pct

_COUNTER = re.compile(r"^[a-z]+(?:_[a-z0-9]+)+$")
_SUCCESS = ("Success:", "Success(N):")
_PCT = re.compile(r"^([-+]\d+(?:\.\d+)?)%[,.;)]?$")
_SHORT_NAME = re.compile(r"^([A-Za-z][\w.%/()-]*[\w%)]):$")
_ARROW = ("->", "=>", "\u2192")
_DASHES = re.compile(r"^[-\u2013\u2014]+$")
_PARAM_VALUE = re.compile(r"^\d+(?:\.\d+)?[A-Za-z%]*$")  # 150MB, 8, 0.5
_PHRASE_WORDS = 12
_TEST_REACH = 16  # words between "Test: NAME" and the table it names


def _monitor_labels() -> dict[str, list[tuple[str, ...]]]:
    """mmtests' monitor row labels by their first word, the longest first."""
    from stackbench.resultsdb.tables.mmtests_vmstat import VMSTAT_ROWS

    labels = [tuple(label.split()) for _, label in VMSTAT_ROWS]
    labels += [("Duration", x) for x in ("User", "System", "Elapsed")]
    out: dict[str, list[tuple[str, ...]]] = {}
    for lab in sorted(labels, key=len, reverse=True):
        out.setdefault(lab[0], []).append(lab)
    return out


def _label(
    ws: list[Word], k: int, labels: dict[str, list[tuple[str, ...]]]
) -> tuple[str, int, str] | None:
    """(label, words it takes, style) of a value row starting at word k."""
    t = ws[k].text
    if t in _SUCCESS or _COUNTER.match(t):
        return t, 1, "short"
    start = k + 1 if t == "Ops" else k
    if start >= len(ws):
        return None
    if t == "Ops" and ws[start].text.isdigit():
        return f"Ops {ws[start].text}", 2, "mmtests"
    for lab in labels.get(ws[start].text, ()):
        got = tuple(w.text for w in ws[start : start + len(lab)])
        if got == lab:
            taken = start - k + len(lab)
            return " ".join(w.text for w in ws[k : k + taken]), taken, "mmtests"
    return None


@dataclass
class ValueRow:
    start: int
    end: int
    label: str
    style: str
    values: list[float]


def _value_rows(ws: list[Word], taken: set[int]) -> list[ValueRow]:
    labels = _monitor_labels()
    rows = []
    k = 0
    while k < len(ws):
        got = _label(ws, k, labels) if k not in taken else None
        if got is None:
            k += 1
            continue
        label, n, style = got
        j = k + n
        values = []
        while j < len(ws) and j not in taken and (v := number(ws[j].text)) is not None:
            values.append(v)
            j += 1
        if len(values) >= 2:
            rows.append(ValueRow(k, j, label, style, values))
            k = j
        else:
            k += 1
    return rows


def _test_name(ws: list[Word], start: int) -> str | None:
    for k in range(start - 1, max(-1, start - _TEST_REACH), -1):
        if ws[k].text == "Test:" and k + 1 < start:
            return ws[k + 1].text
    return None


def _job(ws: list[Word], start: int) -> dict[str, str]:
    test = _test_name(ws, start)
    if test and claims_mmtests.BENCHMARKS.fullmatch(test):
        return {"suite": test}
    if test:
        return {"suite": "", "test": test}
    return {"suite": claims_mmtests.benchmark(ws, start, [])}


def _pivot(ws: list[Word], start: int, n: int) -> tuple[str, list[str], str] | None:
    """(parameter, its values, kernel) when the columns are values of a ``Key:`` line."""
    if start - n - 2 < 0:
        return None
    for key, first, kernel in (
        (start - n - 2, start - n - 1, start - 1),
        (start - n - 1, start - n, start - n - 2),
    ):
        # Key: v1 .. vn KERNEL rows, or KERNEL Key: v1 .. vn rows
        values = [w.text for w in ws[first : first + n]]
        if _is_pivot_key(ws[key].text) and all(_PARAM_VALUE.match(v) for v in values):
            return ws[key].text[:-1].lower(), values, ws[kernel].text
    return None


def _is_pivot_key(text: str) -> bool:
    return text.endswith(":") and text not in ("Test:", *_SUCCESS) and text[:-1].isalpha()


def _value_claims(
    ws: list[Word], taken: set[int], known: dict[int, list[str]]
) -> Iterator[tuple[int, int, list[Claim]]]:
    tables: list[list[ValueRow]] = []
    for row in _value_rows(ws, taken):
        cur = tables[-1] if tables else None
        if cur and cur[-1].end == row.start and len(cur[-1].values) == len(row.values):
            cur.append(row)
        else:
            tables.append([row])
    pivot: tuple[str, list[str], list[tuple[str, list[ValueRow]]], dict[str, str], int] | None = (
        None
    )
    for rows in tables:
        n, start = len(rows[0].values), rows[0].start
        p = _pivot(ws, start, n)
        if pivot is not None and n == len(pivot[1]) and (p is not None or start == pivot[4] + 1):
            kernel = ws[start - 1].text if p is None or p[0] == pivot[0] else p[2]
            pivot[2].append((kernel, rows))
            pivot = (*pivot[:4], rows[-1].end)
            continue
        if pivot is not None:
            yield from _pivot_claims(pivot)
            pivot = None
        if p is not None:
            job = _job(ws, start)
            pivot = (p[0], p[1], [(p[2], rows)], job, rows[-1].end)
            continue
        if n < 2:
            continue
        kernels = claims_mmtests.header(ws, start, n, known.get(n))
        known[n] = kernels
        job = _job(ws, start)
        out = []
        for r in rows:
            for i in range(1, n):
                change = relative(r.values[i], r.values[0])
                if change is None:
                    continue
                out.append(_claim(r, job, kernels, i, 0, r.values[i], r.values[0], change))
        yield start, rows[-1].end, out
    if pivot is not None:
        yield from _pivot_claims(pivot)


def _claim(r: ValueRow, job, kernels, i, b, new, base, change) -> Claim:
    return Claim(
        style=r.style,
        job=dict(job),
        kernel=kernels[i],
        base=kernels[b],
        metric=r.label,
        printed_pct=round_pct(change),
        change_pct=round_pct(change),
        stddev_pct=None,
        significant=None,
        value=new,
        base_value=base,
        columns=tuple(kernels),
        column=i,
        base_column=b,
    )


def _pivot_claims(pivot) -> Iterator[tuple[int, int, list[Claim]]]:
    key, values, blocks, job, end = pivot
    kernels = [k for k, _ in blocks]
    base_rows = {r.label: r for r in blocks[0][1]}
    out = []
    for i, (_, rows) in enumerate(blocks[1:], 1):
        for r in rows:
            b = base_rows.get(r.label)
            if b is None:
                continue
            for j, v in enumerate(values):
                change = relative(r.values[j], b.values[j])
                if change is None:
                    continue
                out.append(
                    _claim(r, {**job, key: v}, kernels, i, 0, r.values[j], b.values[j], change)
                )
    yield blocks[0][1][0].start, end, out


# ---- percentile lists (seed 001) ------------------------------------------------------------


def _kernel_before(ws: list[Word], k: int) -> str | None:
    """The kernel a list is for: what follows the nearest ``With`` before it, to its line's end."""
    for j in range(k - 1, max(-1, k - 40), -1):
        if ws[j].text.lower() == "with" and (
            j == 0 or ws[j - 1].line != ws[j].line or ws[j - 1].text == "-"
        ):
            rest = [w.text for w in ws[j + 1 : k] if w.line == ws[j].line]
            return " ".join(rest[:_PHRASE_WORDS]).rstrip(":") or None
    return None


def _percentile_lists(
    ws: list[Word], taken: set[int]
) -> list[tuple[int, int, str, dict[str, float]]]:
    lists = []
    for k in range(len(ws) - 1):
        if k in taken or ws[k].text.lower() != "percentile" or ws[k + 1].text.lower() != "latency":
            continue
        j = k + 2
        while j < len(ws) and _DASHES.match(ws[j].text):
            j += 1
        values: dict[str, float] = {}
        while (
            j + 1 < len(ws) and ws[j].text.isdigit() and (v := number(ws[j + 1].text)) is not None
        ):
            values[f"latency p{ws[j].text}"] = v
            j += 2
        for t in range(j, min(len(ws) - 5, j + 8)):
            got = [w.text for w in ws[t : t + 6]]
            total = number(got[5])
            if got[:5] == ["Total", "2M", "hugepages", "allocated", "="] and total is not None:
                values["Total 2M hugepages allocated"] = total
                j = t + 6
                break
        kernel = _kernel_before(ws, k)
        if values and kernel:
            lists.append((k, j, kernel, values))
    return lists


def _list_claims(ws: list[Word], taken: set[int]) -> Iterator[tuple[int, int, list[Claim]]]:
    lists = _percentile_lists(ws, taken)
    if len(lists) < 2:
        return
    kernels = [kernel for _, _, kernel, _ in lists]
    base = lists[0][3]
    job = {"suite": "", "test": "hugepage allocation latency"}
    for i, (start, end, kernel, values) in enumerate(lists[1:], 1):
        out = []
        for metric, v in values.items():
            b = base.get(metric)
            change = relative(v, b) if b is not None else None
            if change is None:
                continue
            out.append(
                Claim(
                    "short",
                    dict(job),
                    kernel,
                    kernels[0],
                    metric,
                    round_pct(change),
                    round_pct(change),
                    None,
                    None,
                    v,
                    b,
                    None,
                    tuple(kernels),
                    i,
                    0,
                )
            )
        yield start, end, out


# ---- before/after lists --------------------------------------------------------------------

_ITEM = re.compile(
    r"^\s*(?:[-*]\s+)?(?P<label>[A-Za-z][\w .%/()-]*?)\s*[:=]\s*"
    r"(?P<value>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%/]{0,8})\s*$"
)
_BEFORE = re.compile(r"\b(before|without|vanilla|baseline|base|unpatched)\b", re.I)
_AFTER = re.compile(r"\b(after|with|patched)\b", re.I)


def _list_blocks(ws: list[Word], taken: set[int]) -> list[tuple[int, int, str, dict[str, float]]]:
    """(first word, word after, heading, label -> value) per block of ``label: value`` lines
    under a heading line."""
    by_line: dict[int, list[int]] = {}
    for i, w in enumerate(ws):
        by_line.setdefault(w.line, []).append(i)
    order = sorted(by_line)
    blocks = []
    cur: tuple[int, int, str, dict[str, float]] | None = None
    heading: tuple[str, int] | None = None
    for line in order:
        idx = by_line[line]
        text = " ".join(ws[i].text for i in idx)
        m = _ITEM.match(text) if not any(i in taken for i in idx) else None
        value = number(m.group("value")) if m else None
        if m and value is not None and heading is not None:
            if cur is None:
                cur = (heading[1], idx[-1] + 1, heading[0], {})
            cur[3][m.group("label").strip()] = value
            cur = (cur[0], idx[-1] + 1, cur[2], cur[3])
            continue
        if cur is not None and len(cur[3]) >= 2:
            blocks.append(cur)
        cur = None
        heading = (text.strip().rstrip(":").lstrip("-* ").strip(), idx[0])
    if cur is not None and len(cur[3]) >= 2:
        blocks.append(cur)
    return blocks


def _before_after_claims(ws: list[Word], taken: set[int]) -> Iterator[tuple[int, int, list[Claim]]]:
    blocks = _list_blocks(ws, taken)
    for a, b in zip(blocks, blocks[1:], strict=False):
        if not (_BEFORE.search(a[2]) and _AFTER.search(b[2]) and not _BEFORE.search(b[2])):
            continue
        common = [k for k in a[3] if k in b[3]]
        if len(common) < 2:
            continue
        kernels = (a[2][:80], b[2][:80])
        out = []
        for k in common:
            change = relative(b[3][k], a[3][k])
            if change is not None:
                out.append(
                    Claim("short", {"suite": ""}, kernels[1], kernels[0], k, round_pct(change),
                          round_pct(change), None, None, b[3][k], a[3][k], None, kernels, 1, 0)
                )  # fmt: skip
        yield a[0], b[1], out


# ---- sentences ----------------------------------------------------------------------------


def _sentence_claims(ws: list[Word], taken: set[int]) -> Iterator[tuple[int, int, list[Claim]]]:
    k = 0
    while k < len(ws) - 1:
        m = _SHORT_NAME.match(ws[k].text) if k not in taken else None
        if m is None:
            k += 1
            continue
        name = m.group(1)
        j = k + 1
        out = []
        # name: -18.3% if <kernel> and +3% if <kernel>.
        while j < len(ws) and (pm := _PCT.match(ws[j].text)) and number(pm.group(1)) is not None:
            phrase, j = _phrase(ws, j + 1)
            pct = float(pm.group(1))
            out.append(
                Claim("short", {"suite": ""}, phrase or "", None, name, pct, pct, None, None)
            )
        # name: 100 -> 80
        if not out and j + 2 < len(ws) and ws[j + 1].text in _ARROW:
            a, b = number(ws[j].text.rstrip(",")), number(ws[j + 2].text.rstrip(",.;"))
            change = relative(b, a) if a is not None and b is not None else None
            if change is not None:
                out.append(
                    Claim(
                        "short",
                        {"suite": ""},
                        "after",
                        "before",
                        name,
                        round_pct(change),
                        round_pct(change),
                        None,
                        None,
                        b,
                        a,
                    )
                )
                j += 3
        if out:
            yield k, j, out
            k = j
        else:
            k += 1


def _phrase(ws: list[Word], j: int) -> tuple[str, int]:
    """The words after a percentage that say which kernel it is for, up to the next one."""
    out: list[str] = []
    while j < len(ws) and len(out) < _PHRASE_WORDS:
        t = ws[j].text
        if _PCT.match(t):
            break
        if t == "and" and j + 1 < len(ws) and _PCT.match(ws[j + 1].text):
            j += 1
            break
        out.append(t)
        j += 1
        if t.endswith((".", ";")):
            break
    if out and out[0] in ("if", "with", "for", "on", "by", "from"):
        out = out[1:]
    return " ".join(out).rstrip(".;,"), j


def parse_words(
    ws: list[Word], taken: set[int], known: dict[int, list[str]]
) -> Iterator[tuple[int, int, list[Claim]]]:
    yield from _value_claims(ws, taken, known)
    yield from _list_claims(ws, taken)
    yield from _before_after_claims(ws, taken)
    yield from _sentence_claims(ws, taken)
