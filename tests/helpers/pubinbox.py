"""A real public-inbox v2 archive for tests: made with public-inbox-init -V2, mails
delivered with public-inbox-mda, served by public-inbox-httpd on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inbox:
    def __init__(self, root: Path, address: str, name: str = "test") -> None:
        if not shutil.which("public-inbox-init"):
            pytest.skip("public-inbox is not installed (scripts/bootstrap installs it)")
        self.name = name
        self.address = address
        self.dir = root / "inbox"
        self.config = root / "pi-config"
        self.env = {**os.environ, "PI_CONFIG": str(self.config), "HOME": str(root)}
        self._run(
            ["public-inbox-init", "-V2", "-L", "basic", name, str(self.dir),
             f"http://127.0.0.1/{name}", address]
        )  # fmt: skip
        # no SpamAssassin in tests: every mail is delivered
        self._run(["git", "config", "-f", str(self.config), "publicinboxmda.spamcheck", "none"])
        self.httpd: subprocess.Popen | None = None
        self.url = ""

    def _run(self, argv: list[str], data: bytes | None = None, **env: str) -> None:
        subprocess.run(
            argv, input=data, env={**self.env, **env}, check=True, capture_output=True, timeout=60
        )

    def deliver(self, raw: bytes) -> None:
        """Deliver one mail as the list's MTA would."""
        self._run(["public-inbox-mda", "--no-precheck"], raw, ORIGINAL_RECIPIENT=self.address)

    def import_again(self, raw: bytes) -> None:
        """Add a message to epoch 0 with git alone, as a mirror holding a cross-posted copy
        does (public-inbox-mda refuses a Message-ID it has), then let public-inbox index it."""
        repo = self.dir / "git" / "0.git"

        def git(*args: str, data: bytes | None = None) -> str:
            out = subprocess.run(["git", "-C", str(repo), *args], input=data, check=True,
                                 capture_output=True, timeout=60)  # fmt: skip
            return out.stdout.decode().strip()

        blob = git("hash-object", "-w", "--stdin", data=raw)
        tree = git("mktree", data=f"100644 blob {blob}\tm\n".encode())
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
        commit = subprocess.run(
            ["git", "-C", str(repo), "commit-tree", tree, "-p", "refs/heads/master", "-m", "dup"],
            env={**os.environ, **env}, check=True, capture_output=True, timeout=60,
        ).stdout.decode().strip()  # fmt: skip
        git("update-ref", "refs/heads/master", commit)
        self._run(["public-inbox-index", str(self.dir)])

    def serve(self) -> str:
        port = _free_port()
        self.httpd = subprocess.Popen(
            ["public-inbox-httpd", "-l", f"http://127.0.0.1:{port}"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        self.url = f"http://127.0.0.1:{port}/{self.name}"
        return self.url

    def stop(self) -> None:
        if self.httpd is not None and self.httpd.poll() is None:
            os.killpg(self.httpd.pid, signal.SIGTERM)
            self.httpd.wait(timeout=30)
