"""Errors a user sees as one clear line (``stackbench: error: ...``) and a non-zero exit."""


class StackbenchError(Exception):
    """A failure caused by input or environment, reported without a traceback."""


class InputError(StackbenchError):
    """Malformed or missing input data (a file, an mbox, a result tree)."""

    def __init__(self, path: object, what: str) -> None:
        self.path = str(path)
        self.what = what
        super().__init__(f"{self.path}: {what}")


class NotFoundError(StackbenchError):
    """A kernel, series or other named object that does not exist."""
