"""Where stackbench keeps its state, which services it talks to, and every setting it reads.

Every ``STACKBENCH_*`` variable is declared once in :data:`VARIABLES`, with its default and
what it means; code reads settings through :func:`get` (and its typed forms), never from
``os.environ`` directly, and docs/configuration.md's table is :func:`table` (a test keeps
the two equal and fails on an undeclared name). Values are read from the environment at
each call: the CLI, the web factory and the workers all start from the process environment,
and tests point a process elsewhere with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Mapping
from pathlib import Path

from stackbench.errors import StackbenchError


class SettingError(StackbenchError, ValueError):
    """A setting whose value cannot be used: the CLI prints it as one line."""


# collections' namedtuple, not a dataclass nor typing.NamedTuple: importing dataclasses
# (inspect) and typing is 5-8 ms of every command's start
class Var(namedtuple("Var", ("name", "default", "meaning", "secret", "shown_default"))):
    """One setting: ``name`` (a trailing "_" declares a family: STACKBENCH_SUITE_URL_<REPO>),
    its ``default`` and ``meaning`` (str), whether it is ``secret`` (bool, default False),
    and ``shown_default``: how the README shows a computed default (str, default "")."""

    __slots__ = ()

    def __new__(
        cls, name: str, default: str, meaning: str, secret: bool = False, shown_default: str = ""
    ) -> Var:
        return super().__new__(cls, name, default, meaning, secret, shown_default)


VARIABLES: tuple[Var, ...] = (
    # -- state and services
    Var("STACKBENCH_HOME", "", "state directory: embedded cluster, kernel trees, object dirs, "
        "ccache, artifacts, Buildbot", shown_default="~/.local/share/stackbench"),
    Var("STACKBENCH_KERNEL_CACHE", "", "where trees, ccache, object dirs and kernel artifacts "
        "live", shown_default="$STACKBENCH_HOME"),
    Var("STACKBENCH_TREES", "", "extra folders of tree YAML files (beside `kernels/trees/`), "
        "separated by `:`"),
    Var("STACKBENCH_LISTS", "", "extra folders of mailing-list YAML files (beside "
        "`kernels/lists/`), separated by `:`"),
    Var("STACKBENCH_TRACKED", "", "folders of tracked-branch YAML instead of `jobs/tracking/tracked/`, "
        "separated by `:` (set but empty: none)"),
    Var("STACKBENCH_SUITE_MIRROR", "", "a folder of git bundles (or clones) that upstream "
        "suites are fetched from instead of their public URLs"),
    Var("STACKBENCH_SUITE_URL_", "", "`STACKBENCH_SUITE_URL_<REPO>`: where one suite's "
        "repository is fetched from (e.g. `_VM_SCALABILITY`, `_MMTESTS`)"),
    Var("STACKBENCH_DEBIAN_MIRROR", "http://deb.debian.org/debian", "the Debian mirror that "
        "guest images are built from"),
    Var("STACKBENCH_DATABASE_URL", "", "use this PostgreSQL server (`postgresql://user:pw@host/db`) "
        "instead of the embedded cluster", secret=True),
    Var("STACKBENCH_URL", "", "let the CLI (and workers) talk to a stackbench server's API"),
    Var("STACKBENCH_TOKEN", "", "the CLI's API token (else `$STACKBENCH_HOME/token`)", secret=True),
    # -- web
    Var("STACKBENCH_WEB_HOST", "127.0.0.1", "where `stackbench up` serves the web UI"),
    Var("STACKBENCH_WEB_PORT", "8080", "the web UI's port"),
    Var("STACKBENCH_SECRET_KEY", "", "session signing key (else one kept in "
        "`$STACKBENCH_HOME/web-secret`)", secret=True),
    Var("STACKBENCH_COOKIE_SECURE", "0", "`1` behind HTTPS: session cookies only over TLS"),
    Var("STACKBENCH_TRUSTED_PROXIES", "0", "proxies in front of the web that append the "
        "client to X-Forwarded-For (the shipped nginx: `1`)"),
    # -- workers
    Var("STACKBENCH_WORKER_TOKEN", "", "a worker's API token for result uploads", secret=True),
    Var("STACKBENCH_WORKER_TOKEN_FILE", "", "the file holding the worker's token",
        shown_default="$STACKBENCH_HOME/worker.token"),
    Var("STACKBENCH_KEEP_FAILED_BOOTS_DAYS", "7", "days the working directory of a failed boot "
        "(`$STACKBENCH_HOME/stackbench-job-*`: console, initramfs, the guest's results) is kept "
        "for a look; a boot that went well leaves none"),
    Var("STACKBENCH_EVIDENCE_BOOT", "1", "after a series' first rounds, boot each kernel once "
        "more to count calls of the functions its patches change and profile the CPUs with "
        "perf (the coverage and profile reports; those runs enter no verdict); 0: no evidence "
        "boots"),
    Var("STACKBENCH_BAREMETAL_DIR", "/var/lib/stackbench/baremetal", "a bare-metal box's job "
        "spool"),
    Var("STACKBENCH_KEXEC", "/usr/local/libexec/stackbench/stackbench-kexec", "a bare-metal "
        "box's stackbench-kexec helper"),
    # -- Buildbot
    Var("STACKBENCH_BUILDBOT_URL", "", "the Buildbot master", shown_default="the embedded one"),
    Var("STACKBENCH_BUILDBOT_USER", "", "a user of that master allowed to force builds"),
    Var("STACKBENCH_BUILDBOT_PASSWORD", "", "that user's password", secret=True),
    Var("STACKBENCH_BUILDBOT_CONFIG", "", "the master's `stackbench.yaml`",
        shown_default="./stackbench.yaml"),
    Var("STACKBENCH_STUCK_REQUEST_S", "300", "seconds a build request may stay claimed at the "
        "master without a build under way before the dispatcher cancels it and hands the series "
        "over again"),
    Var("STACKBENCH_BB_BIND", "", "address the master listens on (over the YAML's `bind`)"),
    Var("STACKBENCH_BB_WWW_PORT", "", "the master's web port (over `www_port`)"),
    Var("STACKBENCH_BB_PB_PORT", "", "the master's worker port (over `pb_port`)"),
    Var("STACKBENCH_BB_DB_URL", "", "the master's own database (over `db_url`)", secret=True),
    Var("STACKBENCH_BB_WORKERS", "", "workers, `name:kind[:cpus:memory_mb]`, comma-separated "
        "(over `workers`)"),
    Var("STACKBENCH_BB_NIGHTLY", "", "the nightly run's time, `HH:MM` (over `nightly`)"),
    Var("STACKBENCH_BB_NIGHTLY_AA", "", "boots per set of the A/A each night ends with, 0 for none "
        "(over `nightly_aa`; default 5)"),
    Var("STACKBENCH_BB_ADMINS", "", "master users allowed to force builds, comma-separated"),
    Var("STACKBENCH_BB_SECRETS", "", "the master's secrets file (over `secrets_file`)"),
    Var("STACKBENCH_BB_WORKER_PASSWORD_", "", "`STACKBENCH_BB_WORKER_PASSWORD_<NAME>`: a "
        "worker's password on the master", secret=True),
    Var("STACKBENCH_BB_USER_PASSWORD_", "", "`STACKBENCH_BB_USER_PASSWORD_<NAME>`: a master "
        "user's password", secret=True),
    # -- mail
    Var("STACKBENCH_SMTP_HOST", "127.0.0.1", "SMTP server for report mails"),
    Var("STACKBENCH_SMTP_PORT", "25", "its port"),
    Var("STACKBENCH_SMTP_STARTTLS", "0", "`1`: STARTTLS before sending"),
    Var("STACKBENCH_SMTP_USER", "", "SMTP login"),
    Var("STACKBENCH_SMTP_PASSWORD", "", "SMTP password", secret=True),
    Var("STACKBENCH_MAIL_FROM", "stackbench <stackbench@localhost>", "the sender of mails"),
    Var("STACKBENCH_MAIL_LIST", "", "the list that reports and nightly summaries go to "
        "(none: no list mail)"),
    Var("STACKBENCH_MAIL_DRY_RUN_DIR", "", "write mails as files here instead of sending them"),
    Var("STACKBENCH_MAIL_MAX_ATTEMPTS", "8", "sending attempts before a mail is given up"),
    Var("STACKBENCH_PUBLIC_URL", "http://127.0.0.1:8080", "the web UI's address in mails"),
)  # fmt: skip
_BY_NAME = {v.name: v for v in VARIABLES}


def declared(name: str) -> Var:
    """The declaration of ``name`` (a family's member: the family's); KeyError if none."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    for v in VARIABLES:
        if v.name.endswith("_") and name.startswith(v.name):
            return v
    raise KeyError(f"{name} is not a declared stackbench setting (stackbench.config.VARIABLES)")


def get(name: str, env: Mapping[str, str] | None = None) -> str:
    """The setting's value: the environment's when set and not empty, else its default."""
    var = declared(name)
    value = (os.environ if env is None else env).get(name, "")
    return value if value != "" else var.default


def raw(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The environment's value as it is (None when unset), for a setting where set-but-empty
    means something (``STACKBENCH_TRACKED=`` tracks nothing)."""
    declared(name)
    return (os.environ if env is None else env).get(name)


def get_int(name: str, env: Mapping[str, str] | None = None) -> int:
    raw = get(name, env)
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name} must be a whole number, not {raw!r}") from None


def get_flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    return get(name, env).strip().lower() in ("1", "true", "yes", "on")


def home() -> Path:
    """``$STACKBENCH_HOME``, default ``~/.local/share/stackbench``; created on demand."""
    raw = get("STACKBENCH_HOME")
    path = Path(raw) if raw else Path.home() / ".local" / "share" / "stackbench"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def database_url() -> str | None:
    """An external server's URL, or None for the embedded cluster."""
    return get("STACKBENCH_DATABASE_URL") or None


def server_url() -> str | None:
    """A stackbench web server the CLI should talk to instead of the database."""
    return get("STACKBENCH_URL") or None


def project_root() -> Path:
    """The source checkout (useful for shipped stacks and trees in editable installs)."""
    return Path(__file__).resolve().parent.parent


def table() -> str:
    """docs/configuration.md's table, made from the declarations."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for v in VARIABLES:
        name = f"{v.name}<NAME>" if v.name.endswith("_") else v.name
        default = v.shown_default or (f"`{v.default}`" if v.default else "")
        lines.append(f"| `{name}` | {default} | {v.meaning} |")
    return "\n".join(lines) + "\n"


def effective(env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(name, value, where from) of every plain setting, secrets masked: what
    ``stackbench config`` prints."""
    src = os.environ if env is None else env
    out = []
    for v in VARIABLES:
        if v.name.endswith("_"):
            for name in sorted(k for k in src if k.startswith(v.name)):
                out.append((name, "***" if v.secret else src[name], "environment"))
            continue
        set_here = src.get(v.name, "") != ""
        value = get(v.name, src)
        if v.secret and value:
            value = "***"
        out.append((v.name, value or v.shown_default, "environment" if set_here else "default"))
    return out
