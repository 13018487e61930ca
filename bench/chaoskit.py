"""What bench/chaos.py sets up around the stack it tries, with stackbench's own APIs where
it has them: a token, a series posted over the web API and a local public-inbox v2
archive. The tiny tree, the flood and the full disk it shares with the suite:
testkit/faultkit.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

JOB = "vm-scalability"


def add_token(name: str) -> str:
    """An API token of a new account ``name`` (in the stack's database)."""
    from stackbench.mail import accounts
    from stackbench.resultsdb import db

    with db.session() as s:
        user = accounts.create_user(s, name, password=f"pw-{name}-1", email=f"{name}@example.org")
        return accounts.create_token(s, user, f"token of {name}")


def post_series(web: str, token: str, mbox: str) -> int:
    """Submit ``mbox`` to the web API (``POST /api/series``): the new series' id."""
    from stackbench.apiclient import ApiClient

    body = {"mbox": mbox, "tree": "tiny", "jobs": [JOB], "runs": 2}
    return int(ApiClient(web, token, timeout=30).post("/api/series", body)["id"])


class Inbox:
    """A public-inbox v2 archive of list ``address`` (public-inbox-init -V2) that mails are
    delivered to as the list's MTA would (public-inbox-mda)."""

    def __init__(self, root: Path, address: str, name: str = "chaos") -> None:
        if not shutil.which("public-inbox-init"):
            raise SystemExit("chaos: public-inbox is not installed (scripts/bootstrap installs it)")
        self.address = address
        self.dir = root / "inbox"
        self.env = {**os.environ, "PI_CONFIG": str(root / "pi-config"), "HOME": str(root)}
        root.mkdir(parents=True, exist_ok=True)
        self._run(["public-inbox-init", "-V2", "-L", "basic", name, str(self.dir),
                   f"http://127.0.0.1/{name}", address])  # fmt: skip
        # no SpamAssassin here: every mail is delivered
        self._run(["git", "config", "-f", self.env["PI_CONFIG"], "publicinboxmda.spamcheck",
                   "none"])  # fmt: skip

    def _run(self, argv: list[str], data: bytes | None = None, **env: Any) -> None:
        subprocess.run(argv, input=data, env={**self.env, **env}, check=True,
                       capture_output=True, timeout=60)  # fmt: skip

    def deliver(self, raw: bytes) -> None:
        self._run(["public-inbox-mda", "--no-precheck"], raw, ORIGINAL_RECIPIENT=self.address)
