"""The WSGI entry point for gunicorn: ``gunicorn stackbench.web.wsgi:app``."""

from stackbench.web import create_app

app = create_app()
