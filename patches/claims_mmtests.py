"""Claims from mmtests' compare tables (FORMATS.md section 6): a statistic and an op, then
per kernel a value and its gain, ``(  13.73%)`` or starred ``*  28.28%*`` when the mean
differs significantly. Every column is compared with the first; the gain keeps mmtests'
sign (positive is better) and ``change_pct`` comes from the printed values.

Tables are found by their cells, so that tables whose line breaks were lost (seed 004),
layouts without stars, statistics printed after the op and op names with ``%`` read alike.
The kernel header is the two rows compare-mmtests prints (each name split at its first
``-``; a name without one is shown less its last character on the first row) or one row of
names; a table without a header of its own takes the kernels of the one before it with as
many columns."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from stackbench.patches.claims import Claim, Word, number, relative, round_pct

_GAIN_GLUED = re.compile(r"^([(*])([-+]?\d+(?:\.\d+)?)%([)*])$")
_GAIN_TAIL = re.compile(r"^([-+]?\d+(?:\.\d+)?)%([)*])$")
STATISTIC = re.compile(
    r"^(Min|Max|Amean|Hmean|Gmean|Stddev|CoeffVar|Median|Percentage"
    r"|B[AH]mean[-.]\d+|Pctile[-.]\d+|Bmin[-.]\d+|Bmax[-.]\d+)$"
)
MEANS = ("Amean", "Hmean", "Gmean")
# rows of the other compare modes that carry no gain of a kernel against the base
_NOT_CLAIMS = ("Ratio", "Dmean", "Significant")
# benchmarks a mail may name before its table (the nearest one names the table's job)
BENCHMARKS = re.compile(
    r"\b(thpscale|thpchallenge|thpcompact|stress-highalloc|thpfioscale|highalloc)\b"
)
_LABEL_WORDS = 5  # the longest row label the tables print, in words
_MENTION_REACH = 400  # words before a table searched for the benchmark it runs


@dataclass(frozen=True)
class Cell:
    start: int
    end: int
    value: float
    gain: float
    starred: bool
    plus: bool = False  # "( +0.00%)": a signed change of the author's own table


@dataclass
class Row:
    label: list[Word]
    cells: list[Cell]

    @property
    def start(self) -> int:
        return self.cells[0].start - len(self.label)


def _cell(ws: list[Word], k: int) -> Cell | None:
    v = number(ws[k].text)
    if v is None or k + 1 >= len(ws):
        return None
    m = _GAIN_GLUED.match(ws[k + 1].text)
    if m and (m.group(1) == "(") == (m.group(3) == ")") and number(m.group(2)) is not None:
        return Cell(k, k + 2, v, float(m.group(2)), m.group(1) == "*", m.group(2)[0] == "+")
    if ws[k + 1].text in ("(", "*") and k + 2 < len(ws):
        m = _GAIN_TAIL.match(ws[k + 2].text)
        if m and (ws[k + 1].text == "(") == (m.group(2) == ")") and number(m.group(1)) is not None:
            return Cell(k, k + 3, v, float(m.group(1)), m.group(2) == "*", m.group(1)[0] == "+")
    return None


def _runs(ws: list[Word], taken: set[int]) -> list[list[Cell]]:
    """Consecutive cells: one row's columns each."""
    runs: list[list[Cell]] = []
    k = 0
    while k < len(ws):
        c = _cell(ws, k) if k not in taken else None
        if c is None:
            k += 1
            continue
        if runs and runs[-1][-1].end == k:
            runs[-1].append(c)
        else:
            runs.append([c])
        k = c.end
    return [r for r in runs if len(r) >= 2]


def _label(ws: list[Word], lo: int, start: int) -> list[Word]:
    """The row label: the words before the first cell on its own line, at most a few."""
    line = ws[start].line
    k = start
    while k > lo and ws[k - 1].line == line and start - k < _LABEL_WORDS:
        k -= 1
    label = ws[k:start]
    if k > lo and ws[k - 1].line == line:  # a line that lost its breaks: stat and op
        label = label[-2:]
    return label


def parse_words(
    ws: list[Word], taken: set[int], known: dict[int, list[str]]
) -> Iterator[tuple[int, int, list[Claim]]]:
    """(first word, word after the table, its claims) per table; ``known`` collects the
    kernels of each column count for the tables after it."""
    tables: list[list[Row]] = []
    lows: list[int] = []  # where each table's first label may start at the earliest
    prev_end = 0
    for run in _runs(ws, taken):
        label = _label(ws, prev_end, run[0].start)
        row = Row(label, run)
        cur = tables[-1] if tables else None
        if (
            cur is not None
            and len(cur[-1].cells) == len(run)
            and row.start == cur[-1].cells[-1].end
        ):
            cur.append(row)
        else:
            tables.append([row])
            lows.append(prev_end)
        prev_end = run[-1].end
    for rows, lo in zip(tables, lows, strict=True):
        _first_label(ws, rows, lo)
        n = len(rows[0].cells)
        kernels = header(ws, rows[0].start, n, known.get(n))
        known[n] = kernels
        job = {"suite": benchmark(ws, rows[0].start, rows)}
        yield rows[0].start, rows[-1].cells[-1].end, _claims(rows, kernels, job)


def _first_label(ws: list[Word], rows: list[Row], lo: int) -> None:
    """Where the line breaks are lost the first row's label has no start of its own: it is
    as long as makes its first word the next row's (``Hugealloc Time mean`` before
    ``Hugealloc Time stddev``), else the statistic and the op."""
    first = rows[0]
    start = first.cells[0].start
    if len(rows) < 2 or not rows[1].label or start - len(first.label) <= lo:
        return
    if ws[start - len(first.label) - 1].line != ws[start].line:
        return  # the label starts its line
    lead = rows[1].label[0].text
    for n in range(_LABEL_WORDS, 1, -1):
        if start - n >= lo and ws[start - n].text == lead:
            first.label = ws[start - n : start]
            return


def benchmark(ws: list[Word], start: int, rows: list[Row]) -> str:
    for k in range(start - 1, max(-1, start - _MENTION_REACH), -1):
        m = BENCHMARKS.search(ws[k].text)
        if m:
            return m.group(1)
    ops = " ".join(" ".join(w.text for w in r.label) for r in rows)
    if re.search(r"\bfault-(base|huge|both)-\d+|\bhuge-\d+", ops):
        return "thpscale"
    if re.search(r"^Ops \d\b", ops):  # compare-mmtests' stress-highalloc passes
        return "stress-highalloc"
    return ""


def combine(first: str, second: str) -> str:
    """A kernel name from compare-mmtests' two header rows."""
    return second if second[:-1] == first else f"{first}-{second}"


def _names_like(words: list[str]) -> bool:
    return all(re.fullmatch(r"[\w.+:/=-]+", w) for w in words)


def header(ws: list[Word], start: int, n: int, before: list[str] | None) -> list[str]:
    """The kernel names above the table whose first row label starts at word ``start``."""
    if start >= n and ws[start - 1].line != ws[start].line:
        # line breaks kept: one or two whole lines of n names right above
        last = ws[start - n : start]
        if len({w.line for w in last}) == 1 and (
            start == n or ws[start - n - 1].line != last[0].line
        ):
            row2 = [w.text for w in last]
            if start >= 2 * n:
                above = ws[start - 2 * n : start - n]
                if (
                    len({w.line for w in above}) == 1
                    and above[0].line != last[0].line
                    and (start == 2 * n or ws[start - 2 * n - 1].line != above[0].line)
                ):
                    return [combine(a.text, b) for a, b in zip(above, row2, strict=True)]
            if _names_like(row2):
                return row2
        return before or [f"column {i + 1}" for i in range(n)]
    if start >= n:
        last = [w.text for w in ws[start - n : start]]
        if start >= 2 * n:
            above = [w.text for w in ws[start - 2 * n : start - n]]
            if all(b[:-1] == a for a, b in zip(above, last, strict=True)):
                return last
        if _names_like(last) and (before is None or before == last):
            return last
    return before or [f"column {i + 1}" for i in range(n)]


def _claims(rows: list[Row], kernels: list[str], job: dict[str, str]) -> list[Claim]:
    starred = any(c.starred for r in rows for c in r.cells)
    # compare-mmtests never signs its gains; a table that does is an author's (seed 002)
    style = "short" if any(c.plus for r in rows for c in r.cells) else "mmtests"
    parsed = []
    for r in rows:
        words = [w.text for w in r.label]
        if not words or words[0] in _NOT_CLAIMS:
            continue
        stat = None
        if STATISTIC.match(words[0]):
            stat, op = words[0], " ".join(words[1:])
        elif len(words) > 1 and STATISTIC.match(words[-1]):
            stat, op = words[-1], " ".join(words[:-1])
        else:
            op = " ".join(words)
        parsed.append((stat, op, " ".join(words), r))
    spread = {(s, op): r for s, op, _, r in parsed if s in ("CoeffVar", "Stddev")}
    out = []
    for stat, op, metric, r in parsed:
        base = r.cells[0].value
        for i in range(1, len(r.cells)):
            cell = r.cells[i]
            change = relative(cell.value, base)
            if change is None:
                continue
            sig = True if cell.starred else (False if starred and stat in MEANS else None)
            out.append(
                Claim(
                    style=style,
                    job=dict(job),
                    kernel=kernels[i],
                    base=kernels[0],
                    metric=metric,
                    printed_pct=cell.gain,
                    change_pct=round_pct(change),
                    stddev_pct=_stddev(spread, stat, op, i, cell.value),
                    significant=sig,
                    value=cell.value,
                    base_value=base,
                    statistic=stat,
                    columns=tuple(kernels),
                    column=i,
                    base_column=0,
                )
            )
    return out


def _stddev(spread: dict, stat: str | None, op: str, i: int, mean: float) -> float | None:
    """A mean's stddev in % of it, from the table's CoeffVar row, else its Stddev row."""
    if stat not in MEANS:
        return None
    cv = spread.get(("CoeffVar", op))
    if cv is not None and len(cv.cells) > i:
        return cv.cells[i].value
    sd = spread.get(("Stddev", op))
    if sd is not None and len(sd.cells) > i and mean:
        return round(sd.cells[i].value * 100 / abs(mean), 2)
    return None
