"""How a build reaches its own master: the nightly and a bisect drive their comparisons
through the master's REST API (the journey's Buildbot executor), so their command is told
the master's URL and an admin's credentials. The password is a Buildbot secret: Buildbot
replaces its value by ``<name>`` wherever a step would log it (the command's environment
is printed at the top of its log)."""

from __future__ import annotations

from typing import Any

from buildbot.plugins import util
from buildbot.secrets.providers.base import SecretProviderBase

from stackbench.jobs.executors.buildbot.config import BuildbotConfig


def secret_name(user: str) -> str:
    return f"stackbench-user-{user}"


class UserPasswords(SecretProviderBase):
    """The web users' passwords of the configuration, as the master's secrets."""

    name = "stackbench-users"

    def reconfigService(self, users: dict[str, str]) -> None:  # noqa: N802 (Buildbot's name)
        self.passwords = {secret_name(u): pw for u, pw in users.items()}

    def get(self, entry: str) -> str | None:
        return self.passwords.get(entry)


def providers(cfg: BuildbotConfig) -> list[Any]:
    return [UserPasswords(dict(cfg.users))]


def master_env(cfg: BuildbotConfig) -> dict[str, Any]:
    """The environment of a command that submits to this master: its URL and, when its web
    UI has users, the first admin's (else the first user's) name and password."""
    env: dict[str, Any] = {"STACKBENCH_BUILDBOT_URL": cfg.buildbot_url}
    users = [u for u in cfg.admins if u in cfg.users] or list(cfg.users)
    if users:
        env["STACKBENCH_BUILDBOT_USER"] = users[0]
        env["STACKBENCH_BUILDBOT_PASSWORD"] = util.Secret(secret_name(users[0]))
    return env
