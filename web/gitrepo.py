"""The git intake repository the web serves over HTTP (and Ansible's git-shell account over
SSH): one bare repository, ``$STACKBENCH_HOME/git/intake.git``, whose hooks
(:func:`stackbench.patches.intake.install_hook`) accept only ``refs/for/<tree>/<base>`` and
register each push as a series."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from stackbench import config

REPO_NAME = "intake.git"
_lock = threading.Lock()


def project_root() -> Path:
    return config.home() / "git"


def hook_env(database_url: str | None) -> dict[str, str]:
    """What the hooks need to reach the same database and home as this server, also when git
    starts them with a reduced environment (git-shell over SSH)."""
    env = {"STACKBENCH_HOME": str(config.home())}
    if database_url:
        env["STACKBENCH_DATABASE_URL"] = database_url
    return env


def ensure_intake_repo(database_url: str | None = None) -> Path:
    """Create the bare repository and (re)write its hooks when missing or out of date."""
    from stackbench import gitcmd
    from stackbench.patches import intake

    repo = project_root() / REPO_NAME
    env = hook_env(database_url)
    marker = repo / "stackbench-hooks.json"
    want = json.dumps({"env": env, "python": sys.executable}, sort_keys=True)
    with _lock:
        if not (repo / "objects").is_dir():
            repo.mkdir(parents=True, exist_ok=True)
            gitcmd.git(repo, "init", "--bare", "--quiet")
            # the intake only grows by pushes; the hooks keep refs/for/ empty afterwards
            gitcmd.git(repo, "config", "receive.denyDeletes", "true")
            gitcmd.git(repo, "config", "receive.fsckObjects", "true")
            gitcmd.git(repo, "config", "http.receivepack", "true")
        if not marker.exists() or marker.read_text() != want or marker.stat().st_mode & 0o077:
            # (re)written also when an older stackbench left them readable by others
            intake.install_hook(repo, [sys.executable, "-m", "stackbench", "intake-push"], env=env)
            intake.write_private(marker, want)
    return repo
