"""stackbench user: accounts of the web UI and API."""

from __future__ import annotations

import argparse
import getpass
import sys

NAME = "user"
HELP = "add or list web/API accounts (submitters, admins, workers)"
DESCRIPTION = """\
  stackbench user add NAME [--admin] [--worker] [--email ADDR] [--password-stdin]
  stackbench user passwd NAME [--password-stdin]
  stackbench user list

Without --password-stdin, 'add' asks for a password on a terminal and creates a token-only
account otherwise. Workers upload results with a token (stackbench token create NAME), and
do nothing else: an account is an administrator or a worker, not both."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = sub.add_parser("add", help="create an account")
    a.add_argument("name")
    a.add_argument("--admin", action="store_true", help="may manage trees, machines, branches")
    a.add_argument("--worker", action="store_true", help="uploads results, and nothing else")
    a.add_argument(
        "--email", default="", help="the account's verified address: series reports go here"
    )
    a.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    pw = sub.add_parser("passwd", help="set an account's password")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true")
    sub.add_parser("list", help="list accounts")


def _password(from_stdin: bool, required: bool) -> str | None:
    from stackbench.errors import InputError

    if from_stdin:
        pw = sys.stdin.readline().rstrip("\n")
    elif sys.stdin.isatty():
        pw = getpass.getpass("password: ")
        if pw != getpass.getpass("again: "):
            raise InputError("password", "the two passwords differ")
    else:
        pw = ""
    if not pw:
        if required:
            raise InputError("password", "empty")
        return None
    if len(pw) < 8:
        raise InputError("password", "at least 8 characters")
    return pw


def run(args: argparse.Namespace) -> int:
    from stackbench.mail import accounts
    from stackbench.resultsdb import accounts_q, db

    if args.action == "list":
        with db.session() as s:
            for u in accounts_q.users(s):
                roles = [r for r, on in (("admin", u.is_admin), ("worker", u.is_worker)) if on]
                print(f"{u.name}\t{u.email}\t{','.join(roles) or '-'}")
        return 0
    if args.action == "passwd":
        pw = _password(args.password_stdin, required=True)
        with db.session() as s:
            accounts.set_password(accounts.find_user(s, args.name), pw or "")
        print(f"password of {args.name} set")
        return 0
    pw = _password(args.password_stdin, required=False)
    with db.session() as s:
        accounts.create_user(
            s, args.name, password=pw, email=args.email, admin=args.admin, worker=args.worker
        )
    print(f"user {args.name} added" + ("" if pw else " (no password: use API tokens)"))
    return 0
