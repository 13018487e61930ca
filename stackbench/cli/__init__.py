"""The ``stackbench`` command. Each subcommand is one module in this package that defines
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; they are found here
by name, so adding a command never touches this file. A command may also define
``quick(args) -> int | None``: a fast path tried before logging is set up (importing and
configuring logging is 5 ms, a tenth of a cached ``stackbench compare``), which must log
nothing and raise nothing it cannot finish; None sends the command on to ``run``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from stackbench import __version__
from stackbench.errors import StackbenchError

TYPE_CHECKING = False  # typing is 2 ms of every command's start-up
if TYPE_CHECKING:
    from typing import NoReturn

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


def _module_names() -> list[str]:
    # a listing of the package's folder, not pkgutil.iter_modules: that imports inspect,
    # 5 ms of every command's start-up
    names = set()
    for folder in __path__:
        for entry in os.listdir(folder):
            stem, dot, ext = entry.partition(".")
            if stem.startswith("_") or not stem.isidentifier():
                continue
            if (dot and ext == "py") or (
                not dot and os.path.isfile(os.path.join(folder, entry, "__init__.py"))
            ):
                names.add(stem)
    return sorted(names)


def _load(name: str) -> ModuleType | None:
    mod = importlib.import_module(f"{__name__}.{name}")
    return mod if hasattr(mod, "NAME") and hasattr(mod, "run") else None


def _commands(only: str | None = None) -> list[ModuleType]:
    """Every command module, or just the one named ``only`` when it can be found by its
    module name (``import`` lives in ``import_``, ``intake-push`` in ``intake_push``): a
    command that does no work then imports nothing else."""
    names = _module_names()
    if only is not None:
        stem = only.replace("-", "_")
        for candidate in (stem, stem + "_"):
            if candidate in names:
                mod = _load(candidate)
                if mod is not None and only == mod.NAME:
                    return [mod]
    mods = [m for m in map(_load, names) if m is not None]
    return sorted(mods, key=lambda m: getattr(m, "ORDER", 50))


def _command_word(argv: list[str]) -> str | None:
    """The subcommand of ``argv``: its first word that is not an option."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, with the terminal's width found without shutil: argparse makes a
    formatter for every argument it adds, and shutil.get_terminal_size imports shutil (with
    bz2 and lzma), 3 ms of every command."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2  # as argparse does
        super().__init__(prog, indent_increment, max_help_position, width)


def _terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else the terminal's, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stackbench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"stackbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for mod in _commands(only):
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=_Formatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def entry() -> NoReturn:
    """The ``stackbench`` program: :func:`main`, ended at once after a quick path."""
    sys.exit(main(exit_when_quick=True))


def main(argv: list[str] | None = None, exit_when_quick: bool = False) -> int:
    """Run the command of ``argv`` (else the program's arguments); its exit status.
    ``exit_when_quick``: end the process as soon as a quick path has printed, as the
    program does (never in a caller's process)."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_word(words))
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        quick = getattr(sys.modules[args._run.__module__], "quick", None)
        if quick is not None and not args.verbose:
            done = quick(args)
            if done is not None and exit_when_quick:
                _exit_now(int(done))
            if done is not None:
                return int(done)
        import logging

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
        lost = database_failure(exc)
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


def _exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's teardown. Freeing a printed table's tens
    of thousands of objects one by one took 6-8 ms of a 70 ms ``compare``; a quick path
    registers no exit handler and holds no open file but the standard streams."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass  # the reader went away (| head): what it took is all it wanted
    os._exit(code)


def database_failure(exc: BaseException) -> str | None:
    """One line for a database that went away or cannot be reached (a restart, a network
    cut, a wrong URL), or None for any other exception. Every command writes in
    transactions, so what was committed is whole and running the command again is safe."""
    import psycopg
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.DBAPIError) and not isinstance(
        exc, (sa_exc.OperationalError, sa_exc.InterfaceError)
    ):
        return None
    if not isinstance(
        exc,
        (
            sa_exc.OperationalError,
            sa_exc.InterfaceError,
            psycopg.OperationalError,
            psycopg.InterfaceError,
        ),
    ):
        return None
    cause = getattr(exc, "orig", None) or exc
    first = next((ln.strip() for ln in str(cause).splitlines() if ln.strip()), type(cause).__name__)
    return (
        f"database connection lost or refused ({first[:200]}); "
        "what was committed is complete: run the command again once the database is up"
    )


def _keep_traceback() -> str:
    """Write the current exception's traceback where a bug report can pick it up."""
    import traceback

    from stackbench import config

    try:
        path = config.home() / "last-error.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(traceback.format_exc())
        return str(path)
    except OSError:
        return "nowhere (the state directory is not writable)"


if __name__ == "__main__":
    sys.exit(main())
