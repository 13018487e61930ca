"""stackbench proxy: the buffering proxy (nginx) in front of the web server."""

from __future__ import annotations

import argparse
import os

NAME = "proxy"
HELP = "serve the web through nginx, which buffers slow clients, in the foreground"
DESCRIPTION = """\
Run nginx in front of 'stackbench web' (gunicorn): nginx reads every request whole before
gunicorn sees it and buffers every answer, so clients that send or read slowly never hold a
gunicorn thread. The compose file and the Ansible role run it; set
STACKBENCH_TRUSTED_PROXIES=1 for the web server behind it, so that the sign-in throttle
counts each client's own address. nginx's configuration and buffers are kept in
$STACKBENCH_HOME/proxy."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT to serve")
    p.add_argument("--upstream", default="127.0.0.1:8080", help="gunicorn's HOST:PORT")


def run(args: argparse.Namespace) -> int:
    from stackbench import config
    from stackbench.web import proxy

    argv = proxy.prepare(args.listen, args.upstream, config.home() / "proxy")
    os.execv(argv[0], argv)
    return 0  # not reached
