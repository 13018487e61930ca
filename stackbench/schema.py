"""YAML definitions (trees, tracked branches) are checked against JSON schemas; a bad file
gets one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema

from stackbench.errors import InputError


def check(data: Any, schema: dict[str, Any], origin: Path | str, what: str) -> None:
    """Raise InputError(origin, "invalid <what> at <field>: <reason>") unless data is valid."""
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InputError(origin, f"invalid {what} at {where}: {exc.message}") from None
