"""One SQLAlchemy session per request, committed by the views that write."""

from __future__ import annotations

from flask import Flask, current_app, g
from sqlalchemy import Engine
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
        if s is not None:
            if exc is not None:
                s.rollback()
            s.close()
