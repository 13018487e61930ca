"""What a request may carry into the views, checked once at the door: text PostgreSQL cannot
store (NUL, lone surrogates) in the query string, the form, the path, Basic credentials or a
JSON body, and numbers no id column can hold, in the path (the ``int`` converter) or in the
query (``request.args.get(..., type=int)``). Each is a 400 that names the field; views never
see such a value, so no query fails on one with a 500."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from flask import Flask, request
from flask import Request as FlaskRequest
from werkzeug.datastructures import ImmutableMultiDict
from werkzeug.exceptions import BadRequest
from werkzeug.routing import IntegerConverter

from stackbench.resultsdb import storable


def whole_number(name: str, raw: str) -> int:
    """A form's whole-number field (digits only, as an integer column holds): 400 otherwise.
    ``int()`` alone takes "²" for a digit and raises on 5,000 of them."""
    if not re.fullmatch(r"[0-9]{1,10}", raw):
        shown = raw if len(raw) <= 24 else raw[:20] + "..."
        raise BadRequest(f"{name}: a whole number, not {shown!r}")
    return _bounded_int(name, raw)


def _bounded_int(name: str, value: str) -> int:
    number = int(value)  # ValueError: not a number, the caller's default applies as before
    why = storable.int_problem(number)
    if why:
        raise BadRequest(f"{name}: {why}")
    return number


class Params(ImmutableMultiDict):
    """Query and form fields: ``get(..., type=int)`` refuses numbers beyond an integer column
    with a 400, where a plain int would reach PostgreSQL and fail there."""

    def get(self, key: Any, default: Any = None, type: Any = None) -> Any:  # noqa: A002
        if type is int:
            return super().get(key, default, lambda v: _bounded_int(str(key), v))
        return super().get(key, default, type)

    def getlist(self, key: Any, type: Any = None) -> list[Any]:  # noqa: A002
        if type is int:
            return super().getlist(key, lambda v: _bounded_int(str(key), v))
        return super().getlist(key, type)


class Request(FlaskRequest):
    parameter_storage_class = Params

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        body = super().get_json(force=force, silent=silent, cache=cache)
        why = storable.problem(body, "body")
        if why:
            raise BadRequest(why)
        return body


class IdConverter(IntegerConverter):
    """``<int:...>`` in routes: a number beyond an integer column is a 400, not a query."""

    def to_python(self, value: str) -> int:
        number = super().to_python(value)
        why = storable.int_problem(number)
        if why:
            raise BadRequest(f"{why} in the path")
        return number


def _fields() -> Iterator[tuple[str, str]]:
    for key, value in request.args.items(multi=True):
        yield key, key
        yield key, value
    if not request.path.startswith("/git/"):  # git's bodies are packs, never forms
        for key, value in request.form.items(multi=True):
            yield key, key
            yield key, value
        for key, up in request.files.items(multi=True):
            yield key, up.filename or ""
    for key, value in (request.view_args or {}).items():
        if isinstance(value, str):
            yield key, value
    auth = request.authorization
    if auth is not None:
        yield "user name", auth.username or ""
        yield "password", auth.password or ""


def check_request() -> None:
    for name, value in _fields():
        why = storable.text_problem(value)
        if why:
            shown = name if storable.text_problem(name) is None else "a field name"
            raise BadRequest(f"{shown}: {why}")


def init_app(app: Flask) -> None:
    """Before any route is added (converters bind when rules are) and before any other
    request hook (the user lookup already queries with the Basic user name)."""
    app.request_class = Request
    app.url_map.converters["int"] = IdConverter
    app.before_request(check_request)
