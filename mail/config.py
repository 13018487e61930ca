"""Mail settings from the environment (production sets them in the service unit or compose
file)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class MailConfig:
    host: str = "127.0.0.1"
    port: int = 25
    starttls: bool = False
    user: str = ""
    password: str = ""
    sender: str = "stackbench <stackbench@localhost>"
    list_addr: str = ""
    dry_run_dir: str = ""
    public_url: str = "http://127.0.0.1:8080"
    timeout_s: float = 20.0
    max_attempts: int = 8
    extra: dict[str, str] = field(default_factory=dict)


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def from_env() -> MailConfig:
    env = os.environ
    return MailConfig(
        host=env.get("STACKBENCH_SMTP_HOST", "127.0.0.1"),
        port=int(env.get("STACKBENCH_SMTP_PORT", "25")),
        starttls=_flag(env.get("STACKBENCH_SMTP_STARTTLS", "0")),
        user=env.get("STACKBENCH_SMTP_USER", ""),
        password=env.get("STACKBENCH_SMTP_PASSWORD", ""),
        sender=env.get("STACKBENCH_MAIL_FROM", "stackbench <stackbench@localhost>"),
        list_addr=env.get("STACKBENCH_MAIL_LIST", ""),
        dry_run_dir=env.get("STACKBENCH_MAIL_DRY_RUN_DIR", ""),
        public_url=env.get("STACKBENCH_PUBLIC_URL", "http://127.0.0.1:8080").rstrip("/"),
        max_attempts=int(env.get("STACKBENCH_MAIL_MAX_ATTEMPTS", "8")),
    )
