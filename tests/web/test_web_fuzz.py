"""Every route of the app's URL map, fuzzed (issue 38): odd path segments, query strings,
JSON bodies of odd types and sizes, huge numbers, NaN, deep nesting and unicode, forms and
raw bytes, with each method the rule allows and as each role (anonymous, a person's token
or signed-in session, an administrator's token, a worker's token; git's Basic credentials).
Against the real PostgreSQL of the ``eng`` fixture with real data in it; no answer may be a
500 and the app may log no traceback.

The generator is seeded (``STACKBENCH_FUZZ_SEED`` picks another seed; the failure list names
it), so a failure repeats exactly; ``STACKBENCH_FUZZ_REQUESTS`` runs more or fewer requests.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from helpers.web import (
    DATA,
    add_token,
    add_tree,
    add_user,
    basic,
    bearer,
    csrf_of,
    db,
    login,
    make_series,
    populate_results,
    rule_path,
    upload_body,
)

pytest_plugins = ["helpers.web"]

SEED = int(os.environ.get("STACKBENCH_FUZZ_SEED") or 38)
REQUESTS = int(os.environ.get("STACKBENCH_FUZZ_REQUESTS") or 10_000)

BIG = 10**400  # beyond a double; its text is 401 digits
TEXTS = [
    "", "x", "mm", "linux-6.1", "vm-scalability", "thpscale[madvise=false]", "0", "-1", "1",
    "1.5", "1e999", "NaN", "-Infinity", "2147483648", "9" * 30, "9" * 5000, "a" * 101,
    "a" * 300, "a" * 5000, "../../etc/passwd", "..", ".", "/", "//x", "%00", "%", "\u00fc",
    "\u2028", "\U0001f600", "<script>alert(1)</script>", "' OR 1=1 --", "#1", "#2147483648",
    "#-1", "v6.1", "a" * 40, "null", "true", "[]", "{}", " ", "\t\n\r", "a\nb", "\\", "a,b",
    "refs/for/mm/v6.1", "git-receive-pack", "git-upload-pack", "lkp", "mmtests", "stackbench",
    "done", "failed", "new", "qemu", "baremetal", "on", "1 2 3", "#1 #2",
]  # fmt: skip
KEYS = [
    "all", "all_rows", "archive", "base", "branch", "commit", "default_base", "format", "job",
    "jobs", "k", "kernel", "kernels", "kind", "label", "limit", "machine", "mbox", "mbox_text",
    "mbox_base64", "name", "next", "offset", "page", "password", "paths", "pool", "report_to",
    "runs", "series", "service", "state", "status", "suite", "to", "tree", "tree_id", "url",
    "cpus", "memory_mb", "nodes", "submitter", "csrf_token", "iteration", "samples",
    "duration_s", "idempotency_key", "job_id", "metric", "\u00fc", "",
]  # fmt: skip
NUMBERS: list[Any] = [0, 1, -1, 2, 30, 31, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 10**30, BIG,
                      -BIG, 0.5, -0.0, 1e308, float("nan"), float("inf"), float("-inf")]  # fmt: skip
# bodies no JSON encoder of Python writes
RAW_JSON = [
    b"", b"{", b"[", b"nul", b'{"a":', b"\xff\xfe", b'"\\ud800"', b"9" * 5000,
    b'{"runs": ' + b"9" * 5000 + b"}", b"[" * 3000 + b"]" * 3000, b'{"a":' * 3000,
    b"[" * 100_000, b'{"mbox": "\\u0000"}', b"\x00", json.dumps({"kernels": ["#1"] * 5000}).encode(),
]  # fmt: skip
# what every field of a known body gets in turn (the sweep), and often at random
ODD: list[Any] = [None, True, 0, -1, 2**31, -(2**31) - 1, 10**30, BIG, -BIG, float("nan"),
                  float("inf"), 1e308, 0.5, "", "a" * 300, "t" * 256, "9" * 5000, "../../x",
                  "\u00fc\u2028\U0001f600", [], [[[[[]]]]], {}, {"a": {"b": BIG}}, [BIG],
                  ["x"] * 50]  # fmt: skip
METHODS_NOT_IN_MAPS = ["PUT", "DELETE", "PATCH"]
CONTENT_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/octet-stream",
                 "application/x-git-receive-pack-request"]  # fmt: skip


# the fields of the forms, as their pages send them
FORMS: dict[str, dict[str, str]] = {
    "auth.login": {"name": "alice", "password": "pw-alice-1", "next": "/"},
    "auth.create_token": {"label": "fuzz"},
    "admin.add_tree": {"name": "t1", "url": "https://git.kernel.org/x", "default_base": "v6.1"},
    "admin.add_machine": {"name": "box", "kind": "qemu", "cpus": "2", "memory_mb": "1024",
                          "nodes": "1"},
    "admin.add_branch": {"tree_id": "1", "branch": "master", "jobs": "vm-scalability"},
    "admin.add_list": {"name": "l1", "archive": "/srv/inbox", "tree": "mm", "to": "a@b.c",
                       "paths": "mm/", "report_to": "a@b.c"},
}  # fmt: skip


@dataclass
class World:
    """What the fuzz may name: the ids and keys that exist, and who may call."""

    ids: list[int]
    keys: list[str]
    roles: dict[str, dict[str, str]]
    mbox: str
    spare_token_ids: list[int] = field(default_factory=list)


class Gen:
    def __init__(self, rnd: random.Random, world: World) -> None:
        self.r = rnd
        self.w = world

    def text(self) -> str:
        r = self.r
        pick = r.random()
        if pick < 0.7:
            return r.choice(TEXTS)
        if pick < 0.85:
            return "".join(chr(r.choice([r.randrange(32, 127), r.randrange(0xA0, 0x3000)]))
                           for _ in range(r.randrange(1, 20)))  # fmt: skip
        return str(r.choice(self.w.ids + [0, 2**31]))

    def number(self) -> Any:
        return self.r.choice(NUMBERS + self.w.ids)

    def scalar(self) -> Any:
        r = self.r.random()
        if r < 0.1:
            return None
        if r < 0.2:
            return self.r.choice([True, False])
        if r < 0.5:
            return self.number()
        return self.text()

    def value(self, depth: int = 0) -> Any:
        r = self.r.random()
        if depth > 3 or r < 0.6:
            return self.scalar()
        if r < 0.8:
            return [self.value(depth + 1) for _ in range(self.r.randrange(0, 4))]
        return {self.r.choice(KEYS): self.value(depth + 1) for _ in range(self.r.randrange(0, 4))}

    def json_body(self, endpoint: str) -> Any:
        body = self.template(endpoint) if self.r.random() < 0.8 else None
        if body is not None:  # right but for a few fields: reaches past the first look
            self.spoil(body)
            return body
        if self.r.random() < 0.3:
            return self.value()
        return {self.r.choice(KEYS): self.value(1) for _ in range(self.r.randrange(1, 6))}

    def spoil(self, body: dict) -> None:
        """One to three fields (maybe nested) of ``body`` replaced by odd values."""
        for _ in range(self.r.randrange(1, 4)):
            target = body
            while True:
                key = self.r.choice(list(target))
                if isinstance(target[key], dict) and target[key] and self.r.random() < 0.6:
                    target = target[key]
                    continue
                # a copy: a later spoil may descend into it, and ODD must stay as it is
                odd = copy.deepcopy(self.r.choice(ODD))
                target[key] = odd if self.r.random() < 0.7 else self.value(1)
                break

    def template(self, endpoint: str) -> dict[str, Any] | None:
        """A body the route reads, right but for what :meth:`spoil` changes; None: no
        route-specific body."""
        if endpoint == "api.runs_upload":
            body = upload_body(key=f"fuzz-{self.r.randrange(10**9)}")
            return {"runs": [body]} if self.r.random() < 0.3 else body
        if endpoint in ("api.series_create", "submit.post"):
            mbox = "mbox" if endpoint.startswith("api.") else "mbox_text"
            return {mbox: self.w.mbox, "tree": "mm", "jobs": ["vm-scalability"], "runs": 1}
        if endpoint == "api.comparison_create":
            refs = [f"#{i}" for i in self.r.sample(self.w.ids, min(2, len(self.w.ids)))]
            return {"kernels": refs, "all_rows": False, "suite": None}
        return FORMS.get(endpoint) and dict(FORMS[endpoint])

    def form(self, endpoint: str) -> dict[str, Any]:
        body = self.template(endpoint) if self.r.random() < 0.7 else None
        out: dict[str, Any] = {}
        if body is not None:
            for key in self.r.sample(list(body), self.r.randrange(1, len(body) + 1)):
                out[key] = self.text()
            body.update(out)
            out = {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
        for _ in range(self.r.randrange(0, 3)):
            key = self.r.choice(KEYS)
            out[key] = [self.text() for _ in range(self.r.randrange(1, 3))]
        if self.r.random() < 0.2:
            import io

            data = self.w.mbox.encode() if self.r.random() < 0.5 else os.urandom(64)
            out["mbox"] = (io.BytesIO(data), self.r.choice(["s.mbox", "", "../x", "\u00fc"]))
        return out

    def segment(self, numeric: bool) -> str:
        r = self.r.random()
        if numeric:
            if r < 0.6:
                return str(self.r.choice(self.w.ids + self.w.spare_token_ids))
            return self.r.choice(["0", "2147483647", "2147483648", "9" * 30, "9" * 5000, "01"])
        if r < 0.3 and self.w.keys:
            return quote(self.r.choice(self.w.keys), safe="")
        if r < 0.4:  # escapes that decode to what no route expects
            return self.r.choice(["%00", "%ff", "%ED%A0%80", "%2e%2e", "%2F", "a%0Ab", "%"])
        return quote(self.text(), safe="")

    def query(self) -> str:
        if self.r.random() < 0.3:
            return ""
        pairs = [(self.r.choice(KEYS), self.text()) for _ in range(self.r.randrange(1, 5))]
        q = urlencode(pairs, quote_via=quote)
        return q + self.r.choice(["", "", "&%00=1", "&limit=%ff", "&&=", "&k=%ED%A0%80"])


def path_of(gen: Gen, rule) -> str:
    """The rule's path with odd segments in place of its arguments."""
    from werkzeug.routing.converters import NumberConverter

    marks: dict[str, tuple[str, bool]] = {}

    def pick(name: str, conv) -> Any:
        numeric = isinstance(conv, NumberConverter)
        mark = 7_000_001 + len(marks) if numeric else f"MARK{len(marks)}x"
        marks[str(mark)] = (name, numeric)
        return mark

    path = rule_path(rule, pick)
    for mark, (name, numeric) in marks.items():
        seg = gen.segment(numeric)
        if name == "token_id" and numeric and gen.w.spare_token_ids:
            seg = str(gen.r.choice(gen.w.spare_token_ids + [2**31]))  # never a caller's
        if name == "key" and gen.r.random() < 0.5 and gen.w.keys:
            seg = gen.w.keys[0]
        path = path.replace(mark, seg, 1)
    r = gen.r.random()
    if r < 0.05:
        path += "/"
    elif r < 0.08:
        path += "/" + gen.segment(False)
    elif r < 0.1:  # an empty segment inside
        path = path[:1] + path[1:].replace("/", "//", 1)
    return "/" + path.lstrip("/")  # "//" first would name a host


def setup_world(eng, app) -> tuple[World, Any]:
    from sqlalchemy import select

    from stackbench.resultsdb.models import ApiToken

    add_tree(eng, "mm")
    sid = make_series(eng, n=2)
    build_ids = populate_results(eng, sid, runs=2)
    make_series(eng, n=1, title="mm: a second series", state="done")
    add_user(eng, "alice")
    add_user(eng, "root", password="pw-root-1", admin=True)
    add_user(eng, "w1", worker=True)
    toks = {n: add_token(eng, n) for n in ("alice", "root", "w1")}
    for _ in range(3):  # revoking one of these costs the fuzz nothing
        add_token(eng, "alice")
    with db(eng) as s:
        spare = list(s.scalars(select(ApiToken.id).order_by(ApiToken.id)))[3:]
    r = app.test_client().post(
        "/api/comparisons",
        json={"kernels": [f"#{b}" for b in build_ids[:2]]},
        headers=bearer(toks["alice"]),
    )
    assert r.status_code == 201, r.get_json()
    key = r.get_json()["key"]
    roles = {
        "anonymous": {},
        "user": bearer(toks["alice"]),
        "admin": bearer(toks["root"]),
        "worker": bearer(toks["w1"]),
        "user-git": basic("alice", toks["alice"]),
        "worker-git": basic("w1", toks["w1"]),
        "bad-token": bearer("sbt_forged"),
    }
    world = World(
        ids=[sid, *build_ids, 1, 2, 3],
        keys=[key, "lkp", "mmtests", "stackbench", "console"],
        roles=roles,
        mbox=(DATA / "series.mbox").read_text(),
        spare_token_ids=spare,
    )
    session = app.test_client()
    login(session)
    return world, session


# the route's own role, then the token its door expects (JSON) or the form's session
SWEPT = {"api.runs_upload": "worker", "api.series_create": "user",
         "api.comparison_create": "user", "submit.post": "session",
         **{ep: "admin" if ep.startswith("admin.") else "session" for ep in FORMS}}  # fmt: skip
# checking a password costs scrypt's 0.1 s by design: a few tries are enough
CAPPED = {"auth.login": 40}


def leaves(body: Any, at: tuple = ()) -> list[tuple]:
    """The key paths of ``body``: every field, the objects holding fields too."""
    out = [at] if at else []
    if isinstance(body, dict):
        for k, v in body.items():
            out += leaves(v, (*at, k))
    return out


def put(body: dict, at: tuple, value: Any) -> dict:
    body = json.loads(json.dumps(body))
    target = body
    for k in at[:-1]:
        target = target[k]
    target[at[-1]] = value
    return body


def sweep(gen: Gen, csrf: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(endpoint, path, role, request arguments): every field of every known body, in turn
    each odd value, JSON to the API and strings to the forms."""
    out = []
    full_run = upload_body(key="sweep")
    full_run.update(duration_s=1.5, status="done", started_at="2026-01-01T00:00:00+00:00",
                    meta={"a": 1}, source="fuzz", error="")  # fmt: skip
    full_run["kernel"].update(tree="mm", config_hash="f" * 64, meta={})
    full_run["machine"]["nodes"] = 1
    paths = {"api.runs_upload": "/api/runs", "api.series_create": "/api/series",
             "api.comparison_create": "/api/comparisons", "submit.post": "/submit",
             "auth.login": "/login", "auth.create_token": "/account/tokens",
             "admin.add_tree": "/admin/trees", "admin.add_machine": "/admin/machines",
             "admin.add_branch": "/admin/branches", "admin.add_list": "/admin/lists"}  # fmt: skip
    for ep, who in SWEPT.items():
        if ep in CAPPED:
            continue
        base = full_run if ep == "api.runs_upload" else gen.template(ep)
        for at in leaves(base):
            for i, odd in enumerate(ODD):
                if ep.startswith("api."):
                    body = put(base, at, odd)
                    if ep == "api.runs_upload" and at != ("idempotency_key",):
                        body["idempotency_key"] = f"sweep-{len(out)}"  # each a run of its own
                    kw = {"data": json.dumps(body), "content_type": "application/json"}
                else:
                    form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in base.items()}
                    form[at[-1]] = odd if isinstance(odd, str) else TEXTS[i % len(TEXTS)]
                    kw = {"data": {**form, "csrf_token": csrf}}
                out.append((ep, paths[ep], who, kw))
    return out


def _dropped_elsewhere(rec: logging.LogRecord) -> bool:
    """A pooled connection of an earlier test in this process, whose database that test's
    teardown dropped (WITH FORCE), logged when the garbage collector resets it during the
    fuzz: not an answer of the web."""
    exc = rec.exc_info[1] if rec.exc_info else None
    return rec.name.startswith("sqlalchemy.pool") and type(exc).__name__ == "AdminShutdown"


def test_every_route_fuzzed_answers_no_500_and_logs_no_traceback(eng, app, caplog):
    # a crash must answer 500 and be logged as production does, not raise into the test
    app.config.update(PROPAGATE_EXCEPTIONS=False, SUBMIT_RATE_COUNT=5, COMPARE_RATE_COUNT=3)
    world, session = setup_world(eng, app)
    client = app.test_client()
    rnd = random.Random(SEED)
    gen = Gen(rnd, world)
    rules = list(app.url_map.iter_rules())
    assert len(rules) > 40
    rules += [r for r in rules if r.methods & {"POST"}]  # writes twice as often
    csrf = csrf_of(session, "/account")
    failures: list[str] = []
    statuses: dict[int, int] = {}
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}

    def send(endpoint: str, method: str, url: str, who: str, kw: dict[str, Any]) -> None:
        kw["headers"] = {**world.roles.get(who, {}), **kw.get("headers", {})}
        t0 = time.monotonic()
        r = (session if who == "session" else client).open(url, method=method, **kw)
        spent[endpoint] = spent.get(endpoint, 0.0) + time.monotonic() - t0
        calls[endpoint] = calls.get(endpoint, 0) + 1
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        # 503 is the database's own "try again" (web/__init__.py), never a crash
        if r.status_code >= 500 and not (r.status_code == 503 and b"database" in r.data):
            body = repr(kw.get("data"))[:200]
            failures.append(f"{r.status_code} {method} {url[:160]} as {who}: {body}")
        r.close()

    caplog.set_level(logging.WARNING)
    start = time.monotonic()
    swept = sweep(gen, csrf)
    for endpoint, path, who, kw in swept:
        send(endpoint, "POST", path, who, kw)
    for _ in range(max(0, REQUESTS - len(swept))):
        rule = rnd.choice(rules)
        while rule.endpoint in CAPPED and calls.get(rule.endpoint, 0) >= CAPPED[rule.endpoint]:
            rule = rnd.choice(rules)
        methods = sorted(rule.methods)
        if "POST" in methods and rnd.random() < 0.6:  # where bodies are read
            method = "POST"
        else:
            method = rnd.choice(methods if rnd.random() > 0.03 else METHODS_NOT_IN_MAPS)
        git = rule.endpoint.startswith("git_http.")
        path = path_of(gen, rule)
        if git and rnd.random() < 0.7:  # mostly git's own paths, else nothing runs
            path = "/git/intake.git/" + rnd.choice(
                ["info/refs", "HEAD", "git-upload-pack", "git-receive-pack", "objects/info/packs"]
            )
        query = gen.query()
        if git and rnd.random() < 0.5:
            query = "service=" + rnd.choice(["git-receive-pack", "git-upload-pack", "x"])
        url = path + ("?" + query if query else "")
        # mostly a role the route serves, so the request gets past the door to the view
        if rnd.random() < 0.3:
            who = rnd.choice([*world.roles, "session"])
        else:
            who = SWEPT.get(rule.endpoint) or ("user-git" if git else rnd.choice(["user", "admin"]))
        kw: dict[str, Any] = {}
        if who == "session" and rnd.random() < 0.7:
            kw["headers"] = {"X-CSRF-Token": csrf}
        if method not in ("GET", "HEAD", "OPTIONS") or rnd.random() < 0.05:
            kind = rnd.random()
            if kind < 0.45:
                kw["data"] = json.dumps(gen.json_body(rule.endpoint))
                kw["content_type"] = "application/json"
            elif kind < 0.6:
                kw["data"] = rnd.choice(RAW_JSON)
                kw["content_type"] = "application/json"
            elif kind < 0.9:
                form = gen.form(rule.endpoint)
                if who == "session" and rnd.random() < 0.7:
                    form["csrf_token"] = csrf
                kw["data"] = form
            else:
                kw["data"] = os.urandom(rnd.randrange(0, 200))
                kw["content_type"] = rnd.choice(CONTENT_TYPES)
        send(rule.endpoint, method, url, who, kw)
    elapsed = time.monotonic() - start
    tracebacks = [
        f"{rec.name}: {rec.getMessage()[:200]}"
        for rec in caplog.records
        if (rec.exc_info or "Traceback" in rec.getMessage()) and not _dropped_elsewhere(rec)
    ]
    total = sum(statuses.values())
    print(f"fuzz: {total} requests ({len(swept)} swept) in {elapsed:.1f} s (seed {SEED}); "
          f"answers {dict(sorted(statuses.items()))}")  # fmt: skip
    slowest = sorted(spent.items(), key=lambda kv: -kv[1])[:8]
    print("fuzz: slowest routes", ", ".join(f"{ep} {s:.1f} s" for ep, s in slowest))
    assert not failures, f"seed {SEED}: {len(failures)} answers of 5xx:\n" + "\n".join(
        failures[:15]
    )
    assert not tracebacks, f"seed {SEED}: tracebacks logged:\n" + "\n".join(tracebacks[:15])
    assert total >= min(REQUESTS, 10_000)
