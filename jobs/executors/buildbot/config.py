"""The master's configuration: a YAML file plus environment overrides, and a secrets file.

Worker names, their kind (qemu or baremetal), CPUs and memory, ports, the nightly time and
the web users live in ``stackbench.yaml`` (``$STACKBENCH_BUILDBOT_CONFIG``, else the file of
that name in the master's base directory). Passwords are never in that file: they come from the
environment (``STACKBENCH_BB_WORKER_PASSWORD_<NAME>``, ``STACKBENCH_BB_USER_PASSWORD_<NAME>``)
or from a secrets file that must not be readable by others (mode 600).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stackbench import config as sbconfig
from stackbench.errors import InputError
from stackbench.jobs.executors.settings import DEFAULT_JOBS, DEFAULT_RUNS

KINDS = ("qemu", "baremetal")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class WorkerSpec:
    """One Buildbot worker: the machine it runs on and what it can take."""

    name: str
    kind: str = "qemu"
    cpus: int = 1
    memory_mb: int = 1024
    # how many builds may run at once on this worker (benchmarks want 1: no noise)
    slots: int = 1
    password: str = ""
    # boxes of one kind and one pool (LKP's tbox_group: same hardware, same guest size) store
    # their runs under the pool's name, so a series' verdict pools them, the box a block
    pool: str = ""

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "machine_kind": self.kind, "cpus": self.cpus, "memory_mb": self.memory_mb
        }  # fmt: skip
        if self.pool:
            props["machine_pool"] = self.pool
        return props


@dataclass
class KernelConfigSpec:
    """A (tree, config fragment) pair: one kernel-build builder each."""

    tree: str
    config: str

    @property
    def builder(self) -> str:
        return f"build-{self.tree}-{self.config}"


@dataclass
class BuildbotConfig:
    title: str = "stackbench"
    bind: str = "127.0.0.1"
    www_port: int = 8010
    pb_port: int = 9989
    buildbot_url: str = ""
    stackbench_url: str = ""
    db_url: str = "sqlite:///state.sqlite"
    # stackbench's database, told of every build's start and end (jobs.executors.buildbot.reporter);
    # empty: $STACKBENCH_DATABASE_URL or the embedded cluster
    notify_url: str = ""
    workers: list[WorkerSpec] = field(default_factory=list)
    kernel_configs: list[KernelConfigSpec] = field(
        default_factory=lambda: [KernelConfigSpec("linux-6.1", "tiny-guest")]
    )
    jobs: list[str] = field(default_factory=lambda: list(DEFAULT_JOBS))
    runs: int = DEFAULT_RUNS
    machine_kinds: list[str] = field(default_factory=lambda: ["qemu"])
    nightly_hour: int = 2
    nightly_minute: int = 0
    # boots per set of the A/A the nightly run ends with (0: none): each machine kind's
    # false-alarm rate, spread and quarantine come from it
    nightly_aa: int = 5
    users: dict[str, str] = field(default_factory=dict)  # web user -> password
    admins: list[str] = field(default_factory=list)
    # argv prefix of the stackbench command on workers, and the quick-test switches
    stackbench: list[str] = field(default_factory=lambda: ["stackbench"])
    dry_kernel: bool = False
    dry_seconds: float = 0.0
    step_timeout: int = 4 * 3600
    # bare metal: how long the master waits for a box to report after its kexec, how often it
    # looks, how many attempts a benchmark gets before it is given up, and the kexec delay
    report_timeout: int = 4 * 3600
    report_poll: float = 30.0
    baremetal_attempts: int = 2
    # attempts a round of QEMU boots gets: one more when its worker is lost mid-round
    round_attempts: int = 2
    kexec_delay: int = 10
    path: Path | None = None

    def workers_of(self, kind: str) -> list[WorkerSpec]:
        return [w for w in self.workers if w.kind == kind]

    @property
    def kinds(self) -> list[str]:
        """Machine kinds that get a benchmark builder: the configured ones plus any worker's."""
        kinds = list(self.machine_kinds)
        kinds += [w.kind for w in self.workers if w.kind not in kinds]
        return kinds


def default_path() -> Path:
    raw = sbconfig.get("STACKBENCH_BUILDBOT_CONFIG")
    return Path(raw) if raw else Path.cwd() / "stackbench.yaml"


def _env_key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _int(path: Path, what: str, value: Any, low: int = 0) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(path, f"{what} must be an integer, got {value!r}") from None
    if number < low:
        raise InputError(path, f"{what} must be at least {low}, got {number}")
    return number


def parse_worker(path: Path, raw: Any) -> WorkerSpec:
    if isinstance(raw, str):
        # compact form for the environment: name:kind:cpus:memory_mb
        parts = raw.split(":")
        keys = ["name", "kind", "cpus", "memory_mb"]
        raw = dict(zip(keys, parts, strict=False))
    if not isinstance(raw, dict) or "name" not in raw:
        raise InputError(path, f"a worker needs at least a name: {raw!r}")
    name = str(raw["name"])
    if not _NAME.match(name):
        raise InputError(path, f"worker name {name!r} must be letters, digits, '.', '_' or '-'")
    kind = str(raw.get("kind", "qemu"))
    if kind not in KINDS:
        raise InputError(path, f"worker {name}: kind must be one of {', '.join(KINDS)}")
    unknown = set(raw) - {"name", "kind", "cpus", "memory_mb", "slots", "pool"}
    if unknown:
        raise InputError(path, f"worker {name}: unknown keys {', '.join(sorted(unknown))}")
    return WorkerSpec(
        name=name,
        kind=kind,
        cpus=_int(path, f"worker {name}: cpus", raw.get("cpus", 1), 1),
        memory_mb=_int(path, f"worker {name}: memory_mb", raw.get("memory_mb", 1024), 64),
        slots=_int(path, f"worker {name}: slots", raw.get("slots", 1), 1),
        pool=_pool(path, name, raw.get("pool", "")),
    )


def _pool(path: Path, worker: str, raw: Any) -> str:
    pool = str(raw or "")
    if pool and not _NAME.match(pool):
        raise InputError(
            path, f"worker {worker}: pool {pool!r} must be letters, digits, '.', '_' or '-'"
        )
    return pool


def parse_time(path: Path, text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if not m or int(m[1]) > 23 or int(m[2]) > 59:
        raise InputError(path, f"nightly time must be HH:MM, got {text!r}")
    return int(m[1]), int(m[2])


def read_secrets(path: Path) -> dict[str, Any]:
    """The secrets file: refused when group or others can read it."""
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(path, f"secrets file must be mode 600, is {stat.S_IMODE(mode):o}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise InputError(path, "secrets file must be a mapping")
    return data


_TOP_KEYS = {
    "title",
    "bind",
    "www_port",
    "pb_port",
    "buildbot_url",
    "stackbench_url",
    "db_url",
    "notify_url",
    "workers",
    "kernel_configs",
    "jobs",
    "runs",
    "machine_kinds",
    "nightly",
    "nightly_aa",
    "users",
    "admins",
    "stackbench",
    "dry_kernel",
    "dry_seconds",
    "step_timeout",
    "report_timeout",
    "report_poll",
    "baremetal_attempts",
    "round_attempts",
    "kexec_delay",
    "secrets_file",
}


def load(path: Path | None = None, env: dict[str, str] | None = None) -> BuildbotConfig:
    """Read the configuration (the file may be absent: defaults plus environment)."""
    env = dict(os.environ if env is None else env)
    path = path or default_path()
    raw: dict[str, Any] = {}
    if path.exists():
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise InputError(path, f"not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise InputError(path, "the configuration must be a mapping")
        unknown = set(raw) - _TOP_KEYS
        if unknown:
            raise InputError(path, f"unknown keys: {', '.join(sorted(unknown))}")

    cfg = BuildbotConfig(path=path)
    for key in ("title", "bind", "buildbot_url", "stackbench_url", "db_url", "notify_url"):
        if key in raw:
            setattr(cfg, key, str(raw[key]))
    for key in ("www_port", "pb_port", "runs", "step_timeout", "report_timeout"):
        if key in raw:
            setattr(cfg, key, _int(path, key, raw[key], 1))
    for key in ("baremetal_attempts", "round_attempts", "kexec_delay"):
        if key in raw:
            setattr(cfg, key, _int(path, key, raw[key], 1))
    if "report_poll" in raw:
        try:
            cfg.report_poll = float(raw["report_poll"])
        except (TypeError, ValueError):
            raise InputError(
                path, f"report_poll must be a number, got {raw['report_poll']!r}"
            ) from None
        if cfg.report_poll <= 0:
            raise InputError(path, "report_poll must be positive")
    workers = raw.get("workers", [])
    if not isinstance(workers, list):
        raise InputError(path, "workers must be a list")
    cfg.workers = [parse_worker(path, w) for w in workers]
    kinds_of_pool: dict[str, set[str]] = {}
    for w in cfg.workers:
        kinds_of_pool.setdefault(w.pool, set()).add(w.kind)
    mixed = sorted(p for p, kinds in kinds_of_pool.items() if p and len(kinds) > 1)
    if mixed:  # different kinds are never pooled: their numbers are not comparable
        raise InputError(path, f"pool {mixed[0]} mixes machine kinds; one kind per pool")
    if "kernel_configs" in raw:
        cfg.kernel_configs = []
        for item in raw["kernel_configs"]:
            if not isinstance(item, dict) or not {"tree", "config"} <= set(item):
                raise InputError(path, f"kernel_configs entries need tree and config: {item!r}")
            cfg.kernel_configs.append(KernelConfigSpec(str(item["tree"]), str(item["config"])))
    if "jobs" in raw:
        cfg.jobs = [str(j) for j in raw["jobs"]]
    if "machine_kinds" in raw:
        cfg.machine_kinds = [str(k) for k in raw["machine_kinds"]]
    if "nightly" in raw:
        cfg.nightly_hour, cfg.nightly_minute = parse_time(path, str(raw["nightly"]))
    if "nightly_aa" in raw:
        cfg.nightly_aa = _aa(path, raw["nightly_aa"])
    if "admins" in raw:
        cfg.admins = [str(a) for a in raw["admins"]]
    if "stackbench" in raw:
        cmd = raw["stackbench"]
        cfg.stackbench = [str(c) for c in cmd] if isinstance(cmd, list) else [str(cmd)]
    if "dry_kernel" in raw:
        cfg.dry_kernel = bool(raw["dry_kernel"])
    if "dry_seconds" in raw:
        cfg.dry_seconds = float(raw["dry_seconds"])
    users = raw.get("users", [])
    _apply_env(cfg, env, path)
    _apply_secrets(cfg, raw, env, path, users)
    _check(cfg, path)
    return cfg


def _aa(path: Path, value: Any) -> int:
    n = _int(path, "nightly_aa", value, 0)
    if n == 1 or n > 100:
        raise InputError(path, f"nightly_aa must be 0 (no A/A) or 2 to 100 boots, got {n}")
    return n


def _apply_env(cfg: BuildbotConfig, env: dict[str, str], path: Path) -> None:
    # the environment wins over the file (containers and systemd units configure this way)
    def get(name: str) -> str:
        return sbconfig.get(name, env)

    if get("STACKBENCH_BB_BIND"):
        cfg.bind = get("STACKBENCH_BB_BIND")
    for key, attr in (("STACKBENCH_BB_WWW_PORT", "www_port"), ("STACKBENCH_BB_PB_PORT", "pb_port")):
        if get(key):
            setattr(cfg, attr, _int(path, key, get(key), 1))
    if get("STACKBENCH_BUILDBOT_URL"):
        cfg.buildbot_url = get("STACKBENCH_BUILDBOT_URL")
    if get("STACKBENCH_BB_DB_URL"):
        cfg.db_url = get("STACKBENCH_BB_DB_URL")
    if get("STACKBENCH_URL") and not cfg.stackbench_url:
        cfg.stackbench_url = get("STACKBENCH_URL")
    if get("STACKBENCH_BB_WORKERS"):
        cfg.workers = [parse_worker(path, w) for w in get("STACKBENCH_BB_WORKERS").split(",") if w]
    if get("STACKBENCH_BB_NIGHTLY"):
        cfg.nightly_hour, cfg.nightly_minute = parse_time(path, get("STACKBENCH_BB_NIGHTLY"))
    if get("STACKBENCH_BB_NIGHTLY_AA"):
        cfg.nightly_aa = _aa(path, get("STACKBENCH_BB_NIGHTLY_AA"))
    if get("STACKBENCH_BB_ADMINS"):
        cfg.admins = [a for a in get("STACKBENCH_BB_ADMINS").split(",") if a]


def _apply_secrets(
    cfg: BuildbotConfig, raw: dict[str, Any], env: dict[str, str], path: Path, users: Any
) -> None:
    secrets: dict[str, Any] = {}
    secrets_file = sbconfig.get("STACKBENCH_BB_SECRETS", env) or raw.get("secrets_file")
    if secrets_file:
        sp = Path(secrets_file)
        if not sp.is_absolute():
            sp = path.parent / sp
        if not sp.exists():
            raise InputError(sp, "secrets file not found")
        secrets = read_secrets(sp)
    worker_pw = secrets.get("workers") or {}
    user_pw = secrets.get("users") or {}
    for w in cfg.workers:
        w.password = sbconfig.get(f"STACKBENCH_BB_WORKER_PASSWORD_{_env_key(w.name)}", env) or str(
            worker_pw.get(w.name, "")
        )
    names = list(users) if isinstance(users, list) else []
    names += [n for n in user_pw if n not in names]
    names += [n for n in cfg.admins if n not in names]
    for name in names:
        pw = sbconfig.get(f"STACKBENCH_BB_USER_PASSWORD_{_env_key(name)}", env) or user_pw.get(name)
        if pw:
            cfg.users[str(name)] = str(pw)


def _check(cfg: BuildbotConfig, path: Path) -> None:
    if not cfg.buildbot_url:
        host = "127.0.0.1" if cfg.bind in ("", "0.0.0.0") else cfg.bind
        cfg.buildbot_url = f"http://{host}:{cfg.www_port}/"
    if not cfg.buildbot_url.endswith("/"):
        cfg.buildbot_url += "/"
    seen: set[str] = set()
    for w in cfg.workers:
        if w.name in seen:
            raise InputError(path, f"worker {w.name} is listed twice")
        seen.add(w.name)
        if not w.password:
            raise InputError(
                path,
                f"worker {w.name} has no password: set STACKBENCH_BB_WORKER_PASSWORD_"
                f"{_env_key(w.name)} or add it to the secrets file",
            )
    for kind in cfg.machine_kinds:
        if kind not in KINDS:
            raise InputError(path, f"machine_kinds: {kind!r} is not one of {', '.join(KINDS)}")
    for admin in cfg.admins:
        if admin not in cfg.users:
            raise InputError(path, f"admin {admin} has no password in the secrets or environment")
    if cfg.runs < 1:
        raise InputError(path, "runs must be at least 1")
