"""Mail settings from the environment (production sets them in the service unit or compose
file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stackbench import config


def _default(name: str) -> str:
    return config.declared(name).default


@dataclass
class MailConfig:
    host: str = _default("STACKBENCH_SMTP_HOST")
    port: int = int(_default("STACKBENCH_SMTP_PORT"))
    starttls: bool = False
    user: str = ""
    password: str = ""
    sender: str = _default("STACKBENCH_MAIL_FROM")
    list_addr: str = ""
    dry_run_dir: str = ""
    public_url: str = _default("STACKBENCH_PUBLIC_URL")
    timeout_s: float = 20.0
    max_attempts: int = int(_default("STACKBENCH_MAIL_MAX_ATTEMPTS"))
    extra: dict[str, str] = field(default_factory=dict)


def from_env() -> MailConfig:
    get = config.get
    return MailConfig(
        host=get("STACKBENCH_SMTP_HOST"),
        port=config.get_int("STACKBENCH_SMTP_PORT"),
        starttls=config.get_flag("STACKBENCH_SMTP_STARTTLS"),
        user=get("STACKBENCH_SMTP_USER"),
        password=get("STACKBENCH_SMTP_PASSWORD"),
        sender=get("STACKBENCH_MAIL_FROM"),
        list_addr=get("STACKBENCH_MAIL_LIST"),
        dry_run_dir=get("STACKBENCH_MAIL_DRY_RUN_DIR"),
        public_url=get("STACKBENCH_PUBLIC_URL").rstrip("/"),
        max_attempts=config.get_int("STACKBENCH_MAIL_MAX_ATTEMPTS"),
    )
