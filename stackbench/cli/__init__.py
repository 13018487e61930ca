"""The ``stackbench`` command. Each subcommand is one module in this package that defines
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``, listed in
:data:`COMMANDS` in the order ``--help`` shows them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from types import ModuleType
from typing import NoReturn

from stackbench import __version__, config
from stackbench.cli import (
    bisect,
    buildbot,
    claims,
    compare,
    config_,
    demo,
    dispatcher,
    down,
    health_check,
    image,
    import_,
    intake_push,
    lists,
    mail,
    migrate,
    nightly,
    parse,
    proxy,
    status,
    submit,
    token,
    up,
    user,
    web,
    worker,
)
from stackbench.errors import StackbenchError

# the user's first steps, then their data, then the lab's, then what services run
COMMANDS: tuple[ModuleType, ...] = (
    demo, up, down, migrate, status, proxy, web, submit, user, token,
    import_, compare, parse, claims, nightly, bisect,
    buildbot, image, mail, worker, dispatcher, lists, config_, health_check, intake_push,
)  # fmt: skip

DESCRIPTION = """\
stackbench builds a kernel for the base and every commit of a memory-management patch stack,
runs vm-scalability, thpscale and stress-highalloc on each, stores every sample in PostgreSQL
and prints the LKP and mmtests comparison tables MM developers paste into cover letters.

Start with:   stackbench demo          (everything on this machine, the shipped stack)
Your data:    stackbench import lkp RESULT_ROOT...   then   stackbench compare --style lkp K1 K2
"""

EPILOG = """\
environment:
  STACKBENCH_HOME          state directory (default ~/.local/share/stackbench)
  STACKBENCH_DATABASE_URL  use this PostgreSQL server instead of the embedded cluster
  STACKBENCH_URL           talk to a stackbench server's API instead of a database

Run 'stackbench COMMAND --help' for a command's options."""


def _commands(only: str | None = None) -> list[ModuleType]:
    """Every command, or just the one named ``only`` when there is one: its parser alone
    is built then."""
    named = [mod for mod in COMMANDS if only == mod.NAME]
    return named or list(COMMANDS)


def _command_word(argv: list[str]) -> str | None:
    """The subcommand of ``argv``: its first word that is not an option."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stackbench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"stackbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for mod in _commands(only):
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def entry() -> NoReturn:
    """The ``stackbench`` program: :func:`main`, its output flushed before it exits."""
    try:
        try:
            code = main()
        except SystemExit as exc:  # argparse's --help, --version and usage errors
            code = exc.code
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (| head): what it took is all it wanted. Python flushes
        # stdout once more at exit; pointing it at /dev/null keeps that flush quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (else the program's arguments); its exit status."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_word(words))
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(asctime)s %(name)s: %(message)s",
        )
        return int(args._run(args) or 0)
    except StackbenchError as exc:
        print(f"stackbench: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stackbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        lost = database_failure(exc) or input_refused(exc)
        if lost is not None:
            print(f"stackbench: error: {lost}", file=sys.stderr)
            return 1
        # a bug or an unforeseen failure: one line, the details on disk
        where = _keep_traceback()
        first = (str(exc).splitlines() or [""])[0]
        print(
            f"stackbench: error: {type(exc).__name__}: {first} (unexpected: please report it "
            f"with the details in {where})",
            file=sys.stderr,
        )
        return 1


def database_failure(exc: BaseException) -> str | None:
    """One line for a database that went away or cannot be reached (a restart, a network
    cut, a wrong URL), or None for any other exception. Every command writes in
    transactions, so what was committed is whole and running the command again is safe."""
    from stackbench.resultsdb import db

    if not db.connection_lost(exc):
        return None
    full = db.disk_full(exc)
    if full:
        return (
            f"the database cannot store anything ({full}); what was committed is complete: "
            "run the command again once space is freed"
        )
    cause = getattr(exc, "orig", None) or exc
    first = next((ln.strip() for ln in str(cause).splitlines() if ln.strip()), type(cause).__name__)
    return (
        f"database connection lost or refused ({first[:200]}); "
        "what was committed is complete: run the command again once the database is up"
    )


def input_refused(exc: BaseException) -> str | None:
    """One line for input no check caught that still cannot be taken: a value PostgreSQL
    refuses (a NUL character, a number beyond its column) or a document nested too deeply to
    read; None for any other exception. The command's transaction is rolled back."""
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to read; nothing of it was stored"
    from sqlalchemy import exc as sa_exc

    if not isinstance(exc, sa_exc.DataError):
        return None
    cause = getattr(exc, "orig", None) or exc
    first = next((ln.strip() for ln in str(cause).splitlines() if ln.strip()), type(cause).__name__)
    return f"the database refused a value of the input ({first[:200]}); nothing of it was stored"


def _keep_traceback() -> str:
    """Write the current exception's traceback where a bug report can pick it up."""
    try:
        path = config.home() / "last-error.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(traceback.format_exc())
        return str(path)
    except OSError:
        return "nowhere (the state directory is not writable)"


if __name__ == "__main__":
    sys.exit(main())
