"""The buffering proxy in front of gunicorn: nginx, configured here and started by
``stackbench proxy`` (the compose ``proxy`` service and Ansible's stackbench-proxy unit).

gunicorn's gthread workers hand a connection to a thread as soon as it is readable and the
thread then waits for the rest of the headers: 16 clients sending a header line every 5 s
held all 16 threads of two workers, and every other request timed out. nginx reads each
request whole (headers within ``header_timeout`` seconds, the body into a buffer or a
temporary file) before gunicorn sees it, and reads gunicorn's answer at once to trickle it
to a slow reader itself, so a gunicorn thread only ever works on complete requests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from stackbench.errors import StackbenchError

# git pushes are the largest bodies (the app's GIT_MAX_CONTENT_LENGTH); the app refuses
# larger ones per route, nginx only bounds what it buffers
MAX_BODY_MB = 512
HEALTH_PATH = "/_proxy/healthz"


def nginx_conf(
    listen: str,
    upstream: str,
    state_dir: Path,
    *,
    header_timeout: int = 10,
    body_timeout: int = 30,
    max_body_mb: int = MAX_BODY_MB,
    one_process: bool = False,
) -> str:
    """The nginx configuration: ``listen`` and ``upstream`` are HOST:PORT; nginx keeps its
    pid file and buffers under ``state_dir``. ``one_process``: no worker process beside the
    master (``stackbench up``'s supervisor): a worker outlives a SIGKILLed master and keeps
    the port, so the master started again could not listen."""
    for what, value in (("listen", listen), ("upstream", upstream)):
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or any(c in value for c in " ;{}'\"\n"):
            raise StackbenchError(f"proxy: {what} must be HOST:PORT, not {value!r}")
    temp = {name: state_dir / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    return f"""# written by stackbench proxy (stackbench/web/proxy.py); edits are overwritten
worker_processes 1;
master_process {"off" if one_process else "on"};
pid {state_dir / "nginx.pid"};
error_log stderr warn;
daemon off;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {temp["client_body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};

    # a slow client is nginx's to wait for, never a gunicorn thread's
    client_header_timeout {header_timeout}s;
    client_body_timeout {body_timeout}s;
    send_timeout 60s;
    keepalive_timeout 30s;
    reset_timedout_connection on;
    client_max_body_size {max_body_mb}m;
    client_body_buffer_size 1m;
    large_client_header_buffers 4 16k;
    proxy_request_buffering on;
    proxy_buffering on;
    proxy_http_version 1.1;
    proxy_read_timeout 150s;

    upstream stackbench_web {{
        server {upstream};
        keepalive 16;
    }}

    server {{
        listen {listen};
        # nginx's own health, answered without gunicorn: a busy gunicorn is not nginx's fault
        location = {HEALTH_PATH} {{
            default_type text/plain;
            return 200 "ok\n";
        }}
        location / {{
            proxy_pass http://stackbench_web;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            # read by the app when STACKBENCH_TRUSTED_PROXIES counts this proxy
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $host;
        }}
    }}
}}
"""


def nginx_path() -> str | None:
    """nginx's executable (Debian keeps it in /usr/sbin, off a user's PATH), None without."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if Path(p).exists()), None
    )


def prepare(listen: str, upstream: str, state_dir: Path, **kw: Any) -> list[str]:
    """Write the configuration and the buffer folders; the nginx command that serves it in
    the foreground."""
    nginx = nginx_path()
    if nginx is None:
        raise StackbenchError("proxy: nginx is not installed (Debian: apt-get install nginx-light)")
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (state_dir / name).mkdir(mode=0o700, exist_ok=True)
    conf = state_dir / "nginx.conf"
    conf.write_text(nginx_conf(listen, upstream, state_dir, **kw))
    # -e: before reading the configuration nginx opens its built-in error log, which an
    # unprivileged account cannot
    return [nginx, "-e", "stderr", "-p", str(state_dir), "-c", str(conf)]
