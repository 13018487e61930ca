"""YAML definitions (jobs, trees, tracked branches) are read and checked against JSON
schemas here; a bad file gets one line naming the file and what is wrong with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from stackbench.errors import InputError


def check(data: Any, schema: dict[str, Any], origin: Path | str, what: str) -> None:
    """Raise InputError(origin, "invalid <what> at <field>: <reason>") unless data is valid."""
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InputError(origin, f"invalid {what} at {where}: {exc.message}") from None


def read_yaml(path: Path) -> Any:
    """The parsed file, or InputError(path, "cannot read: ..." / "not valid YAML: <first
    line of the parser's message>")."""
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(path, f"not valid YAML: {first}") from None
