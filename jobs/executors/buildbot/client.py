"""Talking to the Buildbot master over its REST API: submissions and build queries.

Used by the dispatcher, ``stackbench buildbot submit`` and tests, over stackbench's one HTTP
client (:mod:`stackbench.httpclient`): a web host does not need Buildbot installed to hand a
series over.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stackbench import config, httpclient
from stackbench.errors import StackbenchError
from stackbench.httpclient import (  # noqa: F401  (Transient: the name callers catch)
    TRANSIENT_STATUS,
    HttpError,
    Transient,
    describe,
    is_transient,
)

_ids = itertools.count(1)

ADVICE = "is the master running? ('stackbench up' starts it; run the command again to attach)"


def with_retries(what: str, attempt: Callable[[], Any], *, budget_s: float | None = None) -> Any:
    """The master's calls retried through transient errors; out of budget, one line that says
    what to do."""
    return httpclient.with_retries(what, attempt, budget_s=budget_s, advice=ADVICE)


@dataclass
class Master:
    url: str
    user: str = ""
    password: str = ""

    def __post_init__(self) -> None:
        if not self.url.endswith("/"):
            self.url += "/"
        self._http = httpclient.Client(self.url, cookies=True)
        self._logged_in = False
        self.budget_s: float | None = None  # None: httpclient.RETRY_BUDGET_S

    def _send_once(self, method: str, path: str, json_body: Any = None) -> Any:
        try:
            reply = self._http.send(method, path, json_body=json_body)
        except HttpError as exc:
            if exc.status in TRANSIENT_STATUS:
                raise
            raise StackbenchError(f"Buildbot {exc.url}: HTTP {exc.status} {exc.text()}") from None
        return reply.json(empty={})

    def _get(self, path: str) -> Any:
        """One idempotent request (a GET), retried through transient errors."""
        return with_retries(
            f"Buildbot at {self.url}", lambda: self._send_once("GET", path), budget_s=self.budget_s
        )

    def login(self) -> None:
        """Buildbot's web auth: basic credentials on /auth/login give a session cookie."""
        if self._logged_in or not self.user:
            return
        cred = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

        def attempt() -> None:
            try:
                self._http.send("GET", "auth/login", headers={"Authorization": f"Basic {cred}"})
            except HttpError as exc:
                if exc.status in TRANSIENT_STATUS:
                    raise
                raise StackbenchError(
                    f"Buildbot login as {self.user} refused: HTTP {exc.status}"
                ) from None

        with_retries(f"Buildbot at {self.url}", attempt, budget_s=self.budget_s)
        self._logged_in = True

    def get(self, path: str) -> dict[str, Any]:
        self.login()
        return self._get("api/v2/" + path.lstrip("/"))

    def control(
        self,
        path: str,
        method: str,
        params: dict[str, Any],
        *,
        done: Callable[[], Any] | None = None,
    ) -> Any:
        """A JSON-RPC control call (e.g. ``force`` on a force scheduler).

        A control call is not idempotent: when its answer is lost the call may have happened.
        It is retried only with ``done``, which looks on the master for the call's effect and
        returns the call's result when it did happen (then nothing is sent again)."""
        self.login()
        body = {"jsonrpc": "2.0", "method": method, "id": next(_ids), "params": params}
        url = "api/v2/" + path.lstrip("/")
        sent = {"n": 0}

        def attempt() -> Any:
            if sent["n"] and done is not None:
                found = done()
                if found is not None:
                    return {"result": found}
            sent["n"] += 1
            return self._send_once("POST", url, body)

        if done is None:
            try:
                reply = self._send_once("POST", url, body)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                raise StackbenchError(
                    f"Buildbot at {self.url}: {method} on {path} failed ({describe(exc)}); "
                    "look at the master's web UI before trying again"
                ) from None
        else:
            reply = with_retries(f"Buildbot at {self.url}", attempt, budget_s=self.budget_s)
        if "error" in reply:
            raise StackbenchError(f"Buildbot refused {method} on {path}: {reply['error']}")
        return reply.get("result")

    def builder_id(self, name: str) -> int:
        for b in self.get("builders").get("builders", []):
            if b["name"] == name:
                return int(b["builderid"])
        raise StackbenchError(f"Buildbot at {self.url} has no builder {name!r}")

    def builds(self) -> list[dict[str, Any]]:
        return self.get("builds?property=*").get("builds", [])


def embedded_master() -> Master | None:
    """The master of ``stackbench up`` (URL and admin password from its base directory)."""
    return embedded_master_at(config.home() / "buildbot" / "master")


def embedded_master_at(base: Path) -> Master | None:
    """A master whose base directory was made by :func:`stackbench.jobs.executors.services.create_master`."""
    cfg_path, secrets_path = base / "stackbench.yaml", base / "secrets.yaml"
    if not cfg_path.exists() or not secrets_path.exists():
        return None
    cfg = yaml.safe_load(cfg_path.read_text()) or {}
    secrets = yaml.safe_load(secrets_path.read_text()) or {}
    user = (cfg.get("admins") or ["admin"])[0]
    url = f"http://{cfg.get('bind', '127.0.0.1')}:{cfg.get('www_port', 8010)}/"
    return Master(url, user, str((secrets.get("users") or {}).get(user, "")))


def default_master() -> Master:
    """$STACKBENCH_BUILDBOT_URL (+ ``_USER``, ``_PASSWORD``), else the embedded
    master."""
    url = config.get("STACKBENCH_BUILDBOT_URL")
    if url:
        return Master(
            url, config.get("STACKBENCH_BUILDBOT_USER"), config.get("STACKBENCH_BUILDBOT_PASSWORD")
        )
    found = embedded_master()
    if found is None:
        raise StackbenchError(
            "no Buildbot master: run 'stackbench up' or set STACKBENCH_BUILDBOT_URL "
            "(with STACKBENCH_BUILDBOT_USER and STACKBENCH_BUILDBOT_PASSWORD)"
        )
    return found


def series_commits(series_id: int) -> list[str]:
    """The base and every applied commit of a series, in order."""
    from stackbench.resultsdb import db, kernels_store, series_store

    with db.session() as s:
        series = series_store.get(s, series_id)
        if series is None:
            raise StackbenchError(f"series {series_id} not found")
        kernels = kernels_store.stack(series)
        if any(not k.commit for k in kernels):
            raise StackbenchError(
                f"series {series_id} is not applied yet (state {series.state}): "
                "no base commit or patches without a commit"
            )
        return [k.commit for k in kernels]


def submit(
    master: Master,
    *,
    series: int | str | None = None,
    commits: list[str] | None = None,
    names: list[str] | None = None,
    jobs: list[str] | None = None,
    kinds: list[str] | None = None,
    runs: int | None = None,
    min_cpus: int | None = None,
    min_memory_mb: int | None = None,
    submission: str = "",
    title: str = "",
    report_timeout: int | None = None,
    rounds_by: str = "",
) -> dict[str, Any]:
    """Hand a series to the master's ``submit`` force scheduler; returns buildset and request
    ids. Without ``commits`` they are read from the series in the database."""
    if commits is None:
        if series is None:
            raise StackbenchError("submit needs a series or commits")
        commits = series_commits(int(series))
    if not commits:
        raise StackbenchError("nothing to submit: no commits")
    params: dict[str, Any] = {
        "builderid": master.builder_id("series"),
        "reason": f"series {series}" if series is not None else "commits submitted",
        "series": str(series or ""),
        "commits": " ".join(commits),
        "names": " ".join(names or []),
        "jobs": " ".join(jobs or []),
        "kinds": " ".join(kinds or []),
        "runs": str(runs or ""),
        "min_cpus": str(min_cpus or ""),
        "min_memory_mb": str(min_memory_mb or ""),
        "submission": submission,
        "title": title,
        "report_timeout": str(report_timeout or ""),
        "rounds_by": rounds_by,
    }
    # the key that makes a lost answer safe to retry: the master is asked whether a
    # buildset with it exists before the submission is sent again
    params["submission"] = submission or uuid.uuid4().hex
    result = master.control(
        "forceschedulers/submit",
        "force",
        params,
        done=lambda: find_submission(master, params["submission"]),
    )
    bsid, brids = result
    return {
        "buildset": bsid,
        "requests": brids,
        "commits": commits,
        "submission": params["submission"],
    }


def buildset_properties(master: Master, bsid: int) -> dict[str, Any]:
    props = master.get(f"buildsets/{bsid}/properties").get("properties") or [{}]
    return {k: v[0] for k, v in (props[0] or {}).items()}


def submit_rounds(
    master: Master,
    *,
    series: int,
    submission: str,
    rounds_key: str,
    boots: list[dict[str, Any]],
    avoid: list[str] | None = None,
) -> int:
    """Hand the master a batch of boots (``steps.BootRounds`` runs them in this order) for a
    submission; returns the buildset. ``rounds_key`` makes a lost answer safe to retry;
    ``avoid`` names the workers none of its rounds may run on (quarantined machines)."""
    params = {
        "quarantined": ",".join(avoid or []),
        "builderid": master.builder_id("rounds"),
        "reason": f"series {series}: {rounds_key}",
        "series": str(series),
        "submission": submission,
        "rounds_key": rounds_key,
        "boots": json.dumps(boots),
    }
    found = find_submission(master, submission, rounds_key=rounds_key)
    if found is not None:
        return int(found[0])
    bsid, _ = master.control(
        "forceschedulers/rounds",
        "force",
        params,
        done=lambda: find_submission(master, submission, rounds_key=rounds_key),
    )
    return int(bsid)


def find_submission(
    master: Master, submission: str, recent: int = 200, *, rounds_key: str = ""
) -> Any:
    """``[buildset id, {builder id: request id}]`` of the submission with this key (the
    force scheduler's own answer), or None when the master has none among the recent ones.
    With ``rounds_key``: the dispatcher's batch of boots with that key instead."""
    sets = master.get(f"buildsets?order=-bsid&limit={recent}").get("buildsets", [])
    for bs in sets:
        if bs.get("parent_buildid"):
            continue  # a fan-out's child carries the key too; the submission is the root
        props = buildset_properties(master, bs["bsid"])
        if props.get("submission") == submission and (props.get("rounds_key") or "") == rounds_key:
            reqs = master.get(f"buildrequests?buildsetid={bs['bsid']}").get("buildrequests", [])
            return [bs["bsid"], {str(r["builderid"]): r["buildrequestid"] for r in reqs}]
    return None


def buildbot_url(path: str = "") -> str | None:
    """The Buildbot web UI (for links from stackbench's pages), or None when unknown."""
    url = config.get("STACKBENCH_BUILDBOT_URL")
    if not url:
        m = embedded_master()
        url = m.url if m else None
    return (url.rstrip("/") + "/" + path.lstrip("/")) if url else None


def read_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def wait_for_worker(master: Master, name: str, timeout: float = 90.0) -> None:
    """Return once worker ``name`` is connected to the master; one line of advice if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = master.get("workers")["workers"]
        if any(w["name"] == name and w["connected_to"] for w in workers):
            return
        time.sleep(0.5)
    raise StackbenchError(
        f"Buildbot worker {name} did not connect within {timeout:.0f} s: "
        "see its twistd.log under $STACKBENCH_HOME/buildbot, or run 'stackbench down' and "
        "'stackbench up'"
    )
