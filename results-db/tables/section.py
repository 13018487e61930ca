"""The sections a stackbench table ends with, after its verdicts (the patched-code coverage,
tables/coverage.py; the profile, tables/profile.py): a title, each kernel's lines, a footer
that says where the figures come from; nothing at all when no kernel has any."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Row = TypeVar("Row")


def render(
    title: str, footer: str, rows: Sequence[Row], lines_of: Callable[[Row], list[str]]
) -> str:
    """The section's text: a blank line, ``title``, ``lines_of`` each row, ``footer``; ""
    when ``rows`` is empty."""
    if not rows:
        return ""
    lines = ["", title]
    for row in rows:
        lines.extend(lines_of(row))
    lines.append(footer)
    return "\n".join(lines) + "\n"
