"""stress-highalloc output: per-attempt results and per-pass success rates.

The allocator module prints one line per attempt, ``<N> success|failure <ns>`` (attempt number,
outcome, time the attempt took in nanoseconds), and closes each pass with ``% Success: <int>``.
Passes 1 and 2 run under load, pass 3 at rest (FORMATS.md section 5). Other lines (banners,
the load's own chatter) are ignored.

Samples (names without the ``stress-highalloc.`` prefix): ``passK`` = the success percentage of
pass K as printed, ``latency-passK`` = the nanoseconds of every attempt of pass K in order,
``allocated-passK`` = how many attempts of pass K succeeded (seed 001's "huge pages allocated",
seed 003's successful allocations).
"""

from __future__ import annotations

import re

from stackbench.errors import InputError

PREFIX = "stress-highalloc."

_ATTEMPT = re.compile(r"^\s*(\d+)\s+(success|failure)\s+(\S+)\s*$")
_PASS = re.compile(r"^\s*% Success:\s*(\S+)\s*$")
_LOOKS_LIKE_ATTEMPT = re.compile(r"^\s*\d+\s+(success|failure)\b")


def parse(text: str, source: str = "<stress-highalloc output>") -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    latencies: list[float] = []
    successes = 0
    passes = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _ATTEMPT.match(line)
        if m:
            ns = m.group(3)
            if not ns.isdigit():
                raise InputError(source, f"line {lineno}: attempt time {ns!r} is not nanoseconds")
            latencies.append(float(ns))
            successes += m.group(2) == "success"
            continue
        if _LOOKS_LIKE_ATTEMPT.match(line):
            raise InputError(
                source,
                f"line {lineno}: malformed attempt line (want '<N> success|failure <ns>', "
                f"got {line.strip()!r})",
            )
        p = _PASS.match(line)
        if p:
            value = p.group(1)
            if not value.isdigit() or int(value) > 100:
                raise InputError(source, f"line {lineno}: success rate {value!r} is not 0..100")
            if not latencies:
                raise InputError(source, f"line {lineno}: pass {passes + 1} made no attempts")
            passes += 1
            out[f"pass{passes}"] = [float(value)]
            out[f"latency-pass{passes}"] = latencies
            out[f"allocated-pass{passes}"] = [float(successes)]
            latencies = []
            successes = 0
    if latencies:
        raise InputError(
            source,
            f"{len(latencies)} attempts after the last '% Success:' line (output truncated?)",
        )
    if not passes:
        raise InputError(source, "no '% Success:' line: not stress-highalloc output")
    return out
