"""One SQLAlchemy session per request, committed by the views that write."""

from __future__ import annotations

from contextlib import suppress

from flask import Flask, current_app, g
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker


def engine() -> Engine:
    eng = current_app.config.get("ENGINE")
    if eng is None:
        from stackbench.resultsdb import db

        eng = db.engine()
        current_app.config["ENGINE"] = eng
    return eng


def get() -> Session:
    s = g.get("_db")
    if s is None:
        maker = current_app.extensions.get("sb_sessionmaker")
        if maker is None or maker.kw.get("bind") is not engine():
            maker = sessionmaker(bind=engine(), expire_on_commit=False)
            current_app.extensions["sb_sessionmaker"] = maker
        s = g._db = maker()
    return s


def init_app(app: Flask) -> None:
    @app.teardown_appcontext
    def _close(exc: BaseException | None) -> None:
        s = g.pop("_db", None)
        if s is None:
            return
        try:
            if exc is not None:
                s.rollback()
            s.close()
        except SQLAlchemyError as err:
            # the server cut the connection (a restart, an admin): the answer is already
            # made (or is the 503), so the ROLLBACK's failure must not replace it; the
            # connection is thrown away and the pool opens a fresh one for the next request
            current_app.logger.warning("dropping a cut database connection: %s", _first(err))
            with suppress(SQLAlchemyError):
                s.invalidate()


def _first(err: BaseException) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__
