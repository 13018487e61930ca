"""thpscale's raw logs turned into samples the way mmtests (b0b1d143, the thpscale era) does.

Each ``threads-N.log`` (gzip or plain) holds, per worker thread, ``anoninit <t> <usecs>``,
``fileinit <t> <usecs>`` and one line per timed 2MB-aligned fault of the second region:
``fault <t> <huge|base> <latency_us> <sec>.<usec> <locality 1|0|-1>``.

What comes out for a thread count N (metric names without the ``thpscale.`` prefix):

- ``fault-huge-N``, ``fault-base-N``: the latency of every fault of that size, in file order;
  ``fault-both-N``: every fault. A size that never occurred gets one 0 sample, as mmtests adds
  one, so the table still has a row for it.
- ``Percentage huge-N``: huge faults * 100 / all faults (no value when there was no fault).
- ``local-base-N``, ``local-huge-N``, ``remote-base-N``, ``remote-huge-N``: the share of that
  size's faults that landed on the local (locality 1) or a remote (0) node; ``uncertain-N``
  the share of all faults whose node was unknown (-1), only when there were some.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

from stackbench.errors import InputError

PREFIX = "thpscale."

_LOG_NAME = re.compile(r"^threads-(\d+)\.log(\.gz)?$")
_LOCALITY = {"1": 1, "0": 0, "-1": -1}


@dataclass(frozen=True)
class Fault:
    thread: int
    size: str  # "huge" or "base"
    latency: float  # microseconds
    when: str  # the sec.usec stamp, kept as text
    locality: int  # 1 local, 0 remote, -1 unknown


def _is_uint(word: str) -> bool:
    return word.isascii() and word.isdigit()


def clean_fault(line: str, threads: int, source: str, lineno: int) -> Fault:
    """One ``fault`` line, or an InputError saying which line and what is wrong with it."""
    words = line.split()
    where = f"line {lineno}"
    if len(words) != 6:
        raise InputError(
            source,
            f"{where}: malformed fault line (want 'fault <thread> <huge|base> <usecs> "
            f"<sec.usec> <locality>', got {line.strip()!r})",
        )
    _, thread, size, latency, when, locality = words
    if not _is_uint(thread) or int(thread) >= threads:
        raise InputError(source, f"{where}: thread {thread!r} is not in 0..{threads - 1}")
    if size not in ("huge", "base"):
        raise InputError(source, f"{where}: fault size {size!r} is neither 'huge' nor 'base'")
    if not _is_uint(latency):
        raise InputError(source, f"{where}: fault latency {latency!r} is not a whole number")
    sec, dot, usec = when.partition(".")
    if not (_is_uint(sec) and dot and _is_uint(usec)):
        raise InputError(source, f"{where}: fault time {when!r} is not <sec>.<usec>")
    if locality not in _LOCALITY:
        raise InputError(source, f"{where}: locality {locality!r} is not 1, 0 or -1")
    return Fault(int(thread), size, float(latency), when, _LOCALITY[locality])


def _check_init(line: str, threads: int, source: str, lineno: int) -> None:
    words = line.split()
    if len(words) != 3 or not _is_uint(words[1]) or not _is_uint(words[2]):
        raise InputError(source, f"line {lineno}: malformed {words[0]} line {line.strip()!r}")
    if int(words[1]) >= threads:
        raise InputError(source, f"line {lineno}: thread {words[1]} is not in 0..{threads - 1}")


def find_faults(text: str, threads: int, source: str = "<thpscale log>") -> list[Fault]:
    """Every fault line of one log, validated; other lines (banners, inits) are checked or
    ignored the way mmtests ignores them."""
    if threads < 1:
        raise InputError(source, f"thread count {threads} is not positive")
    faults: list[Fault] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("fault"):
            faults.append(clean_fault(line, threads, source, lineno))
        elif line.startswith(("anoninit", "fileinit")):
            _check_init(line, threads, source, lineno)
    return faults


def extract_samples(
    text: str, threads: int, source: str = "<thpscale log>"
) -> list[tuple[str, int, float]]:
    """``(op, sample number, value)`` in mmtests' numbering: one counter runs over both series
    of a fault, so a fault's ``fault-<size>-N`` sample is odd and its ``fault-both-N`` even."""
    out: list[tuple[str, int, float]] = []
    nr = 0
    seen = set()
    for f in find_faults(text, threads, source):
        out.append((f"fault-{f.size}-{threads}", nr + 1, f.latency))
        out.append((f"fault-both-{threads}", nr + 2, f.latency))
        nr += 2
        seen.add(f.size)
    for size in ("base", "huge"):
        if size not in seen:
            out.append((f"fault-{size}-{threads}", 1, 0.0))
    return out


def parse_log(text: str, threads: int, source: str = "<thpscale log>") -> dict[str, list[float]]:
    """Samples of one ``threads-N.log`` (see the module docstring for the names)."""
    faults = find_faults(text, threads, source)
    n = threads
    out: dict[str, list[float]] = {
        f"fault-base-{n}": [],
        f"fault-huge-{n}": [],
        f"fault-both-{n}": [],
    }
    for f in faults:
        out[f"fault-{f.size}-{n}"].append(f.latency)
        out[f"fault-both-{n}"].append(f.latency)
    for size in ("base", "huge"):
        if not out[f"fault-{size}-{n}"]:
            out[f"fault-{size}-{n}"] = [0.0]
    if not out[f"fault-both-{n}"]:
        del out[f"fault-both-{n}"]
    if not faults:
        return out

    huge = sum(1 for f in faults if f.size == "huge")
    out[f"Percentage huge-{n}"] = [huge * 100 / len(faults)]
    # Locality is a share of that size's faults (b0b1d143 reports 100% local for both
    # sizes when every fault is local), unknown nodes a share of all faults.
    totals = {size: sum(1 for f in faults if f.size == size) for size in ("base", "huge")}
    for where, locality in (("local", 1), ("remote", 0)):
        for size in ("base", "huge"):
            hits = sum(1 for f in faults if f.size == size and f.locality == locality)
            out[f"{where}-{size}-{n}"] = [hits * 100 / totals[size] if totals[size] else 0.0]
    uncertain = sum(1 for f in faults if f.locality == -1)
    if uncertain:
        out[f"uncertain-{n}"] = [uncertain * 100 / len(faults)]
    return out


def read_log(path: Path, what: str = "thpscale log") -> str:
    """A log's text, gunzipped when its name ends in .gz."""
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(path, f"cannot read {what}: {exc}") from None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise InputError(path, f"{what} is not text") from None


def find_logs(logs_dir: Path) -> dict[int, Path]:
    """``threads-N.log[.gz]`` files of a logs directory by thread count."""
    if not logs_dir.is_dir():
        raise InputError(logs_dir, "missing thpscale logs directory")
    logs: dict[int, Path] = {}
    for p in sorted(logs_dir.iterdir()):
        m = _LOG_NAME.match(p.name)
        if not m:
            continue
        n = int(m.group(1))
        if n in logs:
            raise InputError(p, f"second log for {n} threads (also {logs[n].name})")
        logs[n] = p
    if not logs:
        raise InputError(logs_dir, "no threads-N.log or threads-N.log.gz files")
    return dict(sorted(logs.items()))


def parse_dir(logs_dir: Path) -> dict[str, list[float]]:
    """Samples of every thread count in a ``<bench>/logs`` directory, lowest count first."""
    out: dict[str, list[float]] = {}
    for n, path in find_logs(Path(logs_dir)).items():
        out.update(parse_log(read_log(path), n, str(path)))
    return out
