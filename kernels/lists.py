"""Mailing lists as sources: one YAML file per list in ``kernels/lists/`` (and the folders
named by ``$STACKBENCH_LISTS``), declared like a tree.

A list names a public-inbox archive (lore.kernel.org's format: a URL such as
``https://lore.kernel.org/linux-mm``, or the path of a local v2 inbox), the filters a posted
series must pass (the list it is addressed to, its subject tag, the paths its patches
touch), the tree it is tested on and where reports go. The watcher
(:mod:`stackbench.jobs.lists.list_watch`) reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stackbench import config, schema
from stackbench.errors import InputError, NotFoundError

LISTS_DIR = Path(__file__).resolve().parent / "lists"

_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 300}}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "archive", "tree"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
        "description": {"type": "string"},
        "archive": {"type": "string", "minLength": 1},
        "enabled": {"type": "boolean"},
        "start": {"enum": ["all", "new"]},
        "interval": {"type": "integer", "minimum": 1, "maximum": 86400},
        "complete_within": {"type": "integer", "minimum": 0, "maximum": 30 * 86400},
        "filters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"to": _STRINGS, "subject_prefix": _STRINGS, "paths": _STRINGS},
        },
        "tree": {"type": "string", "minLength": 1},
        "jobs": _STRINGS,
        "runs": {"type": "integer", "minimum": 1},
        "check_claims": {"type": "boolean"},
        "reports": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "to": _STRINGS,
                "cc_author": {"type": "boolean"},
                "apply_failed_reply": {"type": "boolean"},
            },
        },
    },
}


@dataclass(frozen=True)
class ListDef:
    name: str
    archive: str
    tree: str
    description: str = ""
    enabled: bool = True
    start: str = "all"  # all: read the archive from its first message; new: from its head
    interval: int = 300  # seconds between fetches
    complete_within: int = 3600  # a series missing patches this long after its first is incomplete
    to: tuple[str, ...] = ()  # addressed lists: To or Cc must name one (empty: any)
    subject_prefix: tuple[str, ...] = ("PATCH",)
    paths: tuple[str, ...] = ()  # a series must touch one (empty: any)
    jobs: tuple[str, ...] | None = None
    runs: int | None = None
    check_claims: bool = False  # the cover letters' claims measured (their jobs added)
    report_to: tuple[str, ...] = ()
    cc_author: bool = False
    apply_failed_reply: bool = False
    path: Path | None = field(default=None, compare=False)

    @property
    def is_url(self) -> bool:
        return self.archive.startswith(("http://", "https://"))


def clean_list(data: Any, origin: Path) -> ListDef:
    """Validate a parsed list YAML document (InputError naming the file and the field)."""
    schema.check(data, SCHEMA, origin, "list definition")
    filters = data.get("filters") or {}
    reports = data.get("reports") or {}
    archive = data["archive"]
    if not archive.startswith(("http://", "https://")):
        archive = os.fspath(Path(archive).expanduser())
    return ListDef(
        name=data["name"],
        archive=archive,
        tree=data["tree"],
        description=data.get("description", ""),
        enabled=data.get("enabled", True),
        start=data.get("start", "all"),
        interval=data.get("interval", 300),
        complete_within=data.get("complete_within", 3600),
        to=tuple(a.lower() for a in filters.get("to", ())),
        subject_prefix=tuple(filters.get("subject_prefix", ("PATCH",))),
        paths=tuple(filters.get("paths", ())),
        jobs=tuple(data["jobs"]) if data.get("jobs") else None,
        runs=data.get("runs"),
        check_claims=data.get("check_claims", False),
        report_to=tuple(reports.get("to", ())),
        cc_author=reports.get("cc_author", False),
        apply_failed_reply=reports.get("apply_failed_reply", False),
        path=origin,
    )


def parse_list_file(path: Path) -> ListDef:
    lst = clean_list(schema.read_yaml(path), path)
    if lst.name != path.stem:
        raise InputError(path, f"list name {lst.name!r} does not match the file name")
    return lst


def _list_dirs() -> list[Path]:
    dirs = [LISTS_DIR]
    extra = config.get("STACKBENCH_LISTS")
    if extra:
        dirs[:0] = [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def list_lists() -> list[ListDef]:
    """Every declared list ($STACKBENCH_LISTS folders first, then the shipped ones)."""
    seen: dict[str, ListDef] = {}
    for d in _list_dirs():
        for f in sorted(d.glob("*.yaml")):
            seen.setdefault(f.stem, parse_list_file(f))
    return list(seen.values())


def load_list(name: str) -> ListDef:
    for d in _list_dirs():
        f = d / f"{name}.yaml"
        if f.is_file():
            return parse_list_file(f)
    known = ", ".join(x.name for x in list_lists()) or "none"
    raise NotFoundError(f"no mailing list named {name!r} (known: {known})")
