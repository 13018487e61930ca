"""How a kernel reference picks a stored kernel: an exact commit, else an exact name (an
mmtests run name), else a unique commit prefix of four characters or more.

``query.resolve_kernel`` and the quick LKP table (tables/lkp_columns, which must not import
numpy through query) read their candidates with :data:`COLUMNS` and pick with :func:`pick`,
so both name the same kernel and refuse the same references.
"""

from __future__ import annotations

from stackbench.errors import NotFoundError

COLUMNS = "id, commit, name, config_name, compiler"


def prefix_pattern(ref: str) -> str | None:
    """The LIKE pattern of ``ref`` as a commit prefix (``%`` and ``_`` matched literally),
    or None when it is too short to be one."""
    if len(ref) < 4:
        return None
    return ref.replace("%", r"\%").replace("_", r"\_") + "%"


def pick(ref: str, rows: list[tuple]) -> tuple:
    """The kernel row ``ref`` names among ``rows`` (:data:`COLUMNS`, ordered by id; others'
    candidates may be among them). Raises NotFoundError when it names none, or several by
    prefix."""
    found = [r for r in rows if r[1] == ref] or [r for r in rows if r[2] == ref]
    if found:
        return found[0]
    if len(ref) >= 4:
        found = [r for r in rows if r[1].startswith(ref)]
        if len(found) == 1:
            return found[0]
        if found:
            names = ", ".join(r[1][:12] for r in found[:5])
            raise NotFoundError(f"kernel '{ref}' is ambiguous: {names}")
    raise NotFoundError(f"unknown kernel '{ref}' (not a stored commit, prefix or run name)")
