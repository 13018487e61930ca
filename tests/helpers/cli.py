"""stackbench's CLI run in the test's own process, its output captured."""

from __future__ import annotations

import contextlib
import io

from stackbench.cli import main


def cli(*argv: str) -> tuple[int, str, str]:
    """``stackbench ARGV...``: its exit status, standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()
