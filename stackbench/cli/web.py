"""stackbench web: serve the web UI and API in the foreground."""

from __future__ import annotations

import argparse
import os

NAME = "web"
HELP = "serve the web UI and JSON API in the foreground (gunicorn)"
DESCRIPTION = """\
Serve the web UI and the JSON API (/api/, OpenAPI at /api/openapi.json) with gunicorn, or
with werkzeug's development server with --dev. 'stackbench up' starts the same server in the
background on 127.0.0.1:8080.

Accounts: stackbench user add NAME [--admin]; API tokens: stackbench token create NAME.
git push: git push http://NAME:TOKEN@HOST:PORT/git/intake.git HEAD:refs/for/<tree>/<base>"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    p.add_argument("--dev", action="store_true", help="werkzeug's reloading development server")


def run(args: argparse.Namespace) -> int:
    from stackbench import config
    from stackbench.resultsdb import db

    db.engine()  # start and migrate the database before serving
    if not config.database_url():
        os.environ["STACKBENCH_DATABASE_URL"] = db.resolve_url(start=False)
    if args.dev:
        from stackbench.web import create_app

        create_app().run(host=args.host, port=args.port, debug=False, use_reloader=True)
        return 0
    from stackbench.web.services import gunicorn_argv

    argv = gunicorn_argv(args.host, args.port, workers=args.workers)
    os.execv(argv[0], argv)
    return 0  # not reached
