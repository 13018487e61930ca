"""stackbench token: API tokens for the web API, git push and workers."""

from __future__ import annotations

import argparse

NAME = "token"
HELP = "create an API token for an account (printed once)"
DESCRIPTION = """\
  stackbench token create NAME [--label LABEL]

Prints the token once; only its hash is stored. Use it as
  export STACKBENCH_URL=http://HOST:PORT STACKBENCH_TOKEN=<token>
or as the password of 'git push http://NAME:<token>@HOST:PORT/git/intake.git ...'."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a token")
    c.add_argument("name", help="the account")
    c.add_argument("--label", default="cli", help="what the token is for")


def run(args: argparse.Namespace) -> int:
    from stackbench.mail import accounts
    from stackbench.resultsdb import db

    with db.session() as s:
        token = accounts.create_token(s, accounts.find_user(s, args.name), args.label)
    print(token)
    return 0
