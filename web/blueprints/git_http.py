"""git push (and fetch) over HTTP(S): git's smart protocol, served by running
``git http-backend`` as a CGI program from this view.

Pushing needs an account: HTTP Basic credentials with the user name and an API token. The
intake repository's hooks refuse every ref outside ``refs/for/<tree>/<base>`` and answer
with the new series' URL, which git prints as ``remote: ...`` lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import threading
from collections.abc import Iterator

from flask import Blueprint, Response, abort, current_app, g, request

from stackbench import config
from stackbench.web import auth, dbsession, gitrepo, ratelimit

bp = Blueprint("git_http", __name__)
log = logging.getLogger(__name__)
_PATH = re.compile(
    r"^(HEAD|info/refs|objects/(info/[\w.-]+|[0-9a-f]{2}/[0-9a-f]{38,62}|pack/pack-[0-9a-f]+"
    r"\.(pack|idx))|git-upload-pack|git-receive-pack)$"
)
CHUNK = 64 * 1024


def _cgi_env(repo_rel: str, rest: str, user: str | None) -> dict[str, str]:
    eng = dbsession.engine()
    db_url = eng.url.render_as_string(hide_password=False)
    gitrepo.ensure_intake_repo(db_url)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_PROJECT_ROOT": str(gitrepo.project_root()),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_HTTP_MAX_REQUEST_BUFFER": str(current_app.config["GIT_MAX_CONTENT_LENGTH"]),
        "PATH_INFO": f"/{repo_rel}/{rest}",
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.query_string.decode("latin-1"),
        "CONTENT_TYPE": request.headers.get("Content-Type", ""),
        "REMOTE_ADDR": request.remote_addr or "",
        "SERVER_PROTOCOL": request.environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
        "LC_ALL": "C",
        # the hooks print the series URL with this base, and use this database
        "STACKBENCH_URL": current_app.config.get("PUBLIC_URL") or request.host_url,
        "STACKBENCH_HOME": config.get("STACKBENCH_HOME") or str(gitrepo.project_root().parent),
        "STACKBENCH_DATABASE_URL": db_url,
    }
    # the hook validates like every front door: it must know the same extra trees
    if config.get("STACKBENCH_TREES"):
        env["STACKBENCH_TREES"] = config.get("STACKBENCH_TREES")
    if request.content_length is not None:
        env["CONTENT_LENGTH"] = str(request.content_length)
    if enc := request.headers.get("Content-Encoding"):
        env["HTTP_CONTENT_ENCODING"] = enc
    if proto := request.headers.get("Git-Protocol"):
        env["GIT_PROTOCOL"] = proto
    if user:
        env["REMOTE_USER"] = user
    return env


def _feed(proc: subprocess.Popen, stream) -> None:
    try:
        while True:
            chunk = stream.read(CHUNK)
            if not chunk:
                break
            proc.stdin.write(chunk)
    except (BrokenPipeError, OSError):
        pass
    except Exception:  # a client that lied about its size, or went away
        log.exception("git http: reading the request body failed")
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def _drain(stream, sink: list[bytes]) -> None:
    for line in iter(stream.readline, b""):
        sink.append(line)


@bp.route("/<repo>/<path:rest>", methods=["GET", "POST"])
def backend(repo: str, rest: str):
    if repo != gitrepo.REPO_NAME or not _PATH.match(rest):
        abort(404, f"no such repository path; push to /git/{gitrepo.REPO_NAME}")
    # who pushes, and whether their role may, was settled before the view (web/auth.py)
    user = g.get("user")
    s = dbsession.get()
    if auth.pushes():
        if user is None:
            return auth.git_challenge(
                "stackbench: pushing needs an account: user name and API token"
            )
        if request.method == "POST":
            msg = ratelimit.check_submission(s, user.id)
            if msg:
                abort(429, msg)
    request.max_content_length = current_app.config["GIT_MAX_CONTENT_LENGTH"]
    env = _cgi_env(repo, rest, user.name if user else None)
    s.close()  # the hooks write through their own connections
    proc = subprocess.Popen(
        ["git", "http-backend"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stream = request.stream if request.method == "POST" else None
    feeder = threading.Thread(target=_feed, args=(proc, stream), daemon=True) if stream else None
    if feeder:
        feeder.start()
    else:
        proc.stdin.close()
    errors: list[bytes] = []
    drain = threading.Thread(target=_drain, args=(proc.stderr, errors), daemon=True)
    drain.start()
    status, headers = 200, []
    while True:
        line = proc.stdout.readline()
        if not line or line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").rstrip("\r\n").partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            headers.append((name, value.strip()))

    def body() -> Iterator[bytes]:
        try:
            while chunk := proc.stdout.read1(CHUNK):
                yield chunk
        finally:
            if feeder:
                feeder.join(timeout=60)
            proc.stdout.close()
            rc = proc.wait()
            drain.join(timeout=5)
            if rc != 0 or errors:
                log.warning("git http-backend exited %s: %s", rc, b"".join(errors)[-2000:])

    return Response(body(), status=status, headers=headers, direct_passthrough=True)
