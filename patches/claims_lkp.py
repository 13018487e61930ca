"""Claims from LKP's ncompare blocks (FORMATS.md section 3), as robot reports and cover
letters paste them: the ``.../testcase:`` axis line and its values, the ``commit:`` list, the
column ruler, an optional ``fail:runs`` section, then ``%stddev %change`` rows. Every column
after the first is compared with the first, as LKP computes it.

Read word by word so that a block whose line breaks were lost (seed 000) reads the same."""

from __future__ import annotations

import re
from collections.abc import Iterator

from stackbench.patches.claims import Claim, Word, number, round_pct

_AXES = re.compile(r"^[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)+:$")
_CHANGE = re.compile(r"^([-+]\d+(?:\.\d+)?(?:e[-+]?\d+)?)(%?)$")
_PM_GLUED = re.compile(r"^±(\d+)%$")
_PM_NUMBER = re.compile(r"^(\d+)%$")
_SUBJECT = re.compile(r'(\S+)\s+\("(?:[^"]|"(?!\)))*"\)')
FIRST_RULER = "-" * 16
NEXT_RULER = "-" * 27
# how far a block's parts may lie from its axis line, in words (the commit list is the
# longest part: a robot's commit line carries the subject)
_REACH = 400


def parse_words(ws: list[Word]) -> Iterator[tuple[int, int, list[Claim]]]:
    """(first word, word after the block, its claims) for each ncompare block."""
    i = 0
    while i < len(ws):
        got = _block(ws, i) if _AXES.match(ws[i].text) else None
        if got is None:
            i += 1
            continue
        end, claims = got
        yield i, end, claims
        i = max(end, i + 1)


def _job(keys_word: str, values_word: str) -> dict[str, str] | None:
    keys = keys_word[:-1].split("/")
    if "testcase" not in keys:
        return None
    values = values_word.split("/")
    if len(values) != len(keys):
        return None
    axes = dict(zip(keys, values, strict=True))
    job = {"suite": axes.pop("testcase")}
    job.update(axes)
    return job


def _block(ws: list[Word], i: int) -> tuple[int, list[Claim]] | None:
    if i + 2 >= len(ws):
        return None
    job = _job(ws[i].text, ws[i + 1].text)
    if job is None or ws[i + 2].text != "commit:":
        return None
    c = i + 2
    ruler = next(
        (j for j in range(c + 1, min(len(ws), c + _REACH)) if ws[j].text == FIRST_RULER), None
    )
    if ruler is None:
        return None
    n = 1
    while ruler + n < len(ws) and ws[ruler + n].text == NEXT_RULER:
        n += 1
    if n < 2 or ruler - n <= c:
        return None
    heads = [w.text for w in ws[ruler - n : ruler]]
    kernels = _commits(ws[c + 1 : ruler - n], n) or heads
    k = _skip_headers(ws, ruler + n, n)
    if k is None:
        return None
    claims: list[Claim] = []
    while k < len(ws):
        row = _row(ws, k, n)
        if row is None:
            break
        k, name, values, changes, stddevs = row
        claims.extend(_claims(job, kernels, name, values, changes, stddevs))
    return k, claims


def _commits(region: list[Word], n: int) -> list[str] | None:
    """The kernels of the ``commit:`` list: one word each, or ``sha ("subject")`` lines."""
    if len(region) == n:
        return [w.text for w in region]
    lines: dict[int, list[str]] = {}
    for w in region:
        lines.setdefault(w.line, []).append(w.text)
    if len(lines) == n:
        return [ln[0] for ln in lines.values()]
    found = _SUBJECT.findall(" ".join(w.text for w in region))
    return found if len(found) == n else None


def _skip_headers(ws: list[Word], k: int, n: int) -> int | None:
    """Past the column header pair (and a failure section before it): the first row."""
    if k < len(ws) and ws[k].text == "fail:runs":
        k = next((j for j in range(k, min(len(ws), k + 10_000)) if ws[j].text == "%stddev"), -1)
        if k < 0:
            return None
    want = ["%stddev"] + ["%change", "%stddev"] * (n - 1) + ["\\"] + ["|", "\\"] * (n - 1)
    got = [w.text for w in ws[k : k + len(want)]]
    return k + len(want) if got == want else None


def _stddev(ws: list[Word], k: int) -> tuple[float | None, int]:
    if k < len(ws):
        m = _PM_GLUED.match(ws[k].text)
        if m:
            return float(m.group(1)), k + 1
        if ws[k].text == "±" and k + 1 < len(ws):
            m = _PM_NUMBER.match(ws[k + 1].text)
            if m:
                return float(m.group(1)), k + 2
    return None, k


def _row(ws: list[Word], k: int, n: int):
    """One stat row from word k: (next word, name, values, changes, stddevs) or None."""
    if k >= len(ws):
        return None
    first = number(ws[k].text)
    if first is None:
        return None
    values, changes, stddevs = [first], [None], []
    sd, k = _stddev(ws, k + 1)
    stddevs.append(sd)
    for _ in range(n - 1):
        if k + 1 >= len(ws):
            return None
        m = _CHANGE.match(ws[k].text)
        v = number(ws[k + 1].text)
        change = number(m.group(1)) if m else None
        if m is None or v is None or change is None:
            return None
        changes.append((change, m.group(2) == "%"))
        values.append(v)
        sd, k = _stddev(ws, k + 2)
        stddevs.append(sd)
    if k >= len(ws) or number(ws[k].text) is not None or _CHANGE.match(ws[k].text):
        return None
    return k + 1, ws[k].text, values, changes, stddevs


def is_absolute(stat: str) -> bool:
    """LKP prints an absolute difference, not a %change, for these stats."""
    return stat.endswith("%") or stat.startswith("perf-profile")


def _claims(job, kernels, name, values, changes, stddevs) -> list[Claim]:
    if is_absolute(name):
        return []
    out = []
    for i in range(1, len(values)):
        change, is_pct = changes[i]
        if not is_pct:
            continue
        out.append(
            Claim(
                style="lkp",
                job=dict(job),
                kernel=kernels[i],
                base=kernels[0],
                metric=name,
                printed_pct=change,
                change_pct=round_pct(change),
                stddev_pct=stddevs[i],
                significant=None,
                value=values[i],
                base_value=values[0],
                columns=tuple(kernels),
                column=i,
                base_column=0,
            )
        )
    return out
