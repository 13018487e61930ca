"""git push over HTTP: git's smart protocol served by ``git http-backend`` (placeholder)."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("git_http", __name__)
