"""Faults against a running embedded stack, and whether it heals (issue 38).

``stackbench up`` on a fresh STACKBENCH_HOME (loopback only; a Buildbot master whose
workers make dry kernels and dry boots; a list read from a local public-inbox v2 archive),
then each fault in turn, each tried ``--tries`` times:

- ``flood``: 2,000 GETs of the master's REST API, 50 at a time, every client hanging up
  before the answer, every other one with a reset, while a series waits at the master;
- ``kill-<program>``: SIGKILL of the web (gunicorn), the proxy (nginx), the dispatcher, the
  list watcher, the master and the local worker, each with a series in flight;
- ``pg-restarts``: 10 PostgreSQL restarts while mails arrive on the list and are fetched;
- ``disk``: a series applied on a full disk (a tmpfs, filled, then emptied).

It prints a table: fault, tries, survived (healed within the floor), healed within (the
worst try, seconds: answering again, or for the list and the disk, everything stored),
series lost (submitted series that did not end ``done``) and mails lost (or stored twice).
Floors: the flood heals within 60 s and every kill within 30 s; nothing is lost.

    nice .venv/bin/python bench/chaos.py [--tries N] [--faults flood,kill-web,...]

The disk fault needs root (a tmpfs mount) and is left out, said so, without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import chaoskit

# the fault makers bench/ shares with the suite (testkit/faultkit.py says why)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "testkit"))
import faultkit  # noqa: E402

KILLED = ["web", "proxy", "dispatcher", "lists", "buildbot-master", "buildbot-worker-local"]
IN_FLIGHT = ("dispatcher", "buildbot-master", "buildbot-worker-local")  # killed mid-series
FLOOD_FLOOR_S, KILL_FLOOR_S = 60.0, 30.0
SERIES_END_S = 600.0  # every series submitted must be done this long after the last fault
LIST = "linux-mm@kvack.org"


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def answers(url: str, timeout: float = 3.0) -> bool:
    try:
        return get(url, timeout)[0] < 500
    except OSError:
        return False


def wait(check: Any, timeout: float, every: float = 0.2) -> float | None:
    """Seconds until ``check()`` holds, None when it did not within ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if check():
            return time.monotonic() - began
        time.sleep(every)
    return None


class Stack:
    """The embedded stack of a fresh home, as ``stackbench up`` starts it."""

    def __init__(self, home: Path, disk: Path | None) -> None:
        from stackbench.jobs.executors import services as bb

        self.home = home
        self.port = bb.free_port()
        trees = faultkit.tiny_tree(home / "src")
        self.work = trees.parent / "work"
        self.lists = home / "lists"
        self.lists.mkdir()
        env = {
            "STACKBENCH_HOME": str(home),
            "STACKBENCH_WEB_PORT": str(self.port),
            "STACKBENCH_TREES": str(trees),
            "STACKBENCH_LISTS": str(self.lists),
            "STACKBENCH_MAIL_DRY_RUN_DIR": str(home / "sent"),
        }
        if disk is not None:
            env["STACKBENCH_KERNEL_CACHE"] = str(disk)  # the trees' clones and worktrees
        for key in ("STACKBENCH_DATABASE_URL", "STACKBENCH_BUILDBOT_URL"):
            os.environ.pop(key, None)
        os.environ.update(env)
        cpus, mem = bb.machine_size()
        worker = {"name": bb.LOCAL_WORKER, "kind": "qemu", "cpus": cpus, "memory_mb": mem,
                  "pool": "local"}  # fmt: skip
        extra = {"dry_kernel": True, "dry_seconds": 1, "jobs": ["vm-scalability"], "runs": 2}
        cfg = bb.create_master(bb.buildbot_dir() / "master", [worker], extra=extra)
        self.master = f"http://127.0.0.1:{cfg['www_port']}"
        self.web = f"http://127.0.0.1:{self.port}"
        self.series: list[int] = []

    def up(self) -> None:
        began = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "stackbench", "up"], capture_output=True,
                             text=True, timeout=600)  # fmt: skip
        if res.returncode:
            raise SystemExit(f"chaos: stackbench up failed: {res.stdout}{res.stderr}")
        print(res.stdout.strip(), f"\n(up took {time.monotonic() - began:.0f} s)", flush=True)
        self.token = chaoskit.add_token("chaos")

    def down(self) -> None:
        from stackbench.resultsdb.embedded import Cluster, destroy

        subprocess.run([sys.executable, "-m", "stackbench", "down"], capture_output=True,
                       timeout=600)  # fmt: skip
        destroy(Cluster())  # the embedded cluster lives outside the home

    def submit(self) -> int:
        git = faultkit.git
        # a series of its own each time (the same mails again are the same series)
        n = len(self.series) + 1
        git(self.work, "checkout", "-q", "-B", f"chaos-{n}", "v0")
        with open(self.work / "mm" / "compaction.c", "a") as fh:
            fh.write(f"int chaos{n};\n")
        git(self.work, "commit", "-q", "-am", f"mm/compaction: chaos {n}\n\nTry {n}.")
        mbox = git(self.work, "format-patch", "--stdout", "v0..HEAD") + "\n"
        sid = chaoskit.post_series(self.web, self.token, mbox)
        self.series.append(sid)
        return sid

    def state(self, sid: int) -> str:
        try:
            return str(json.loads(get(f"{self.web}/api/series/{sid}", 30)[1])["state"])
        except (OSError, ValueError, KeyError):
            return "?"

    def at_master(self, sid: int, timeout: float = 180.0) -> None:
        wait(lambda: self.state(sid) in ("building", "running", "done", "failed"), timeout, 0.5)


def pid(name: str) -> int:
    from stackbench import supervision

    info = supervision.rpc().supervisor.getProcessInfo(name)
    return int(info["pid"])


def running_anew(name: str, old: int) -> bool:
    from stackbench import supervision

    info = supervision.rpc().supervisor.getProcessInfo(name)
    return info["statename"] == "RUNNING" and info["pid"] not in (0, old)


def kill(stack: Stack, name: str) -> dict[str, Any]:
    """SIGKILL program ``name`` (with a series in flight for those that carry one); healed:
    running again and, for the web, the proxy and the master, answering."""
    sid = None
    if name in IN_FLIGHT:
        sid = stack.submit()
        stack.at_master(sid)
    old = pid(name)
    os.kill(old, signal.SIGKILL)
    began = time.monotonic()
    probe = {"web": stack.web + "/healthz", "proxy": stack.web + "/_proxy/healthz",
             "buildbot-master": stack.master + "/api/v2/masters"}.get(name)  # fmt: skip

    def healed() -> bool:
        return running_anew(name, old) and (probe is None or answers(probe))

    took = wait(healed, KILL_FLOOR_S * 3, 0.2)
    out = {"healed": took, "floor": KILL_FLOOR_S, "began": began}
    return {**out, "sid": sid} if sid is not None else out


def settle(stack: Stack) -> None:
    """Until every program runs and the master and the web answer: the next fault meets a
    stack that is up, however recently its programs started (a worker killed while it
    attaches to a master just started is healed by the master, see bench/README.md)."""
    from stackbench import supervision

    def up() -> bool:
        infos = supervision.rpc().supervisor.getAllProcessInfo()
        return (all(i["statename"] == "RUNNING" for i in infos)
                and answers(stack.master + "/api/v2/masters")
                and answers(stack.web + "/healthz"))  # fmt: skip

    wait(up, 120, 0.5)


def flood(stack: Stack) -> dict[str, Any]:
    from urllib.parse import urlsplit

    sid = stack.submit()
    stack.at_master(sid)
    u = urlsplit(stack.master)
    counts = faultkit.flood(u.hostname, u.port, "/api/v2/application.spec", total=2000, at_once=50)
    took = wait(lambda: all(answers(stack.master + "/api/v2/masters") for _ in range(3)),
                FLOOD_FLOOR_S * 3, 0.5)  # fmt: skip
    return {"healed": took, "floor": FLOOD_FLOOR_S, "note": f"{counts}", "sid": sid}


def pg_restarts(stack: Stack, inbox: Any, restarts: int = 10) -> dict[str, Any]:
    """Mails delivered between PostgreSQL restarts, the watcher fetching every second: each
    must be stored once."""
    from stackbench import supervision

    sup = supervision.rpc().supervisor
    ids = []
    for n in range(restarts):
        for k in range(3):
            mid = f"chaos-{os.getpid()}-{n}-{k}@example.org"
            ids.append(mid)
            inbox.deliver(
                f"From: Someone <someone@example.org>\nTo: {LIST}\nSubject: chaos {n}.{k}\n"
                f"Message-ID: <{mid}>\nDate: Wed, 17 Jan 2024 10:00:00 +0000\n\nhello\n".encode()
            )
        time.sleep(1.5)  # a fetch under way, or about to start
        sup.stopProcess("postgres", True)
        time.sleep(0.5)
        sup.startProcess("postgres", True)
    began = time.monotonic()
    took = wait(lambda: _stored(ids) == (len(ids), 0), 180, 1.0)
    stored, twice = _stored(ids)
    return {
        "healed": took,
        "floor": 120.0,
        "mails_lost": len(ids) - stored + twice,
        "note": f"{len(ids)} mails, {stored} stored, {twice} twice",
        "began": began,
    }


def _stored(ids: list[str]) -> tuple[int, int]:
    from sqlalchemy import func, select

    from stackbench.resultsdb import db
    from stackbench.resultsdb.models import ListMessage

    try:
        with db.session() as s:
            rows = dict(s.execute(
                select(ListMessage.message_id, func.count())
                .where(ListMessage.message_id.in_([f"<{i}>" for i in ids]))
                .group_by(ListMessage.message_id)
            ).all())  # fmt: skip
    except Exception:  # the database is still starting
        return 0, 0
    return len(rows), sum(n - 1 for n in rows.values())


def full_disk(stack: Stack, disk: Path) -> dict[str, Any]:
    """A series applied while the disk of its tree's worktrees is full; emptied after 20 s."""
    filler = faultkit.fill(disk)
    sid = stack.submit()
    time.sleep(20)
    waited = stack.state(sid) in ("new", "applying")
    filler.unlink()
    began = time.monotonic()
    took = wait(lambda: stack.state(sid) == "done", 300, 1.0)
    note = f"waited while full: {waited}, done {took} s after it was emptied"
    return {"healed": took, "floor": 300.0, "note": note, "sid": sid, "began": began}


@contextlib.contextmanager
def small_disk(size: str = "64m"):
    where = Path(tempfile.mkdtemp(prefix="sb-chaos-disk-"))
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        where.rmdir()
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    faults = ["flood", *(f"kill-{n}" for n in KILLED), "pg-restarts", "disk"]
    p.add_argument("--faults", default=",".join(faults))
    p.add_argument("--tries", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="leave the home (and its logs)")
    args = p.parse_args()
    chosen = [f for f in args.faults.split(",") if f]
    bad = [f for f in chosen if f not in faults]
    if bad or args.tries < 1:
        p.error(f"unknown fault(s) {bad}; known: {', '.join(faults)}" if bad else "--tries >= 1")
    home = Path(tempfile.mkdtemp(prefix="sb-chaos-"))
    rows: list[tuple[str, list[dict[str, Any]]]] = []
    with small_disk() as disk:
        if disk is None and "disk" in chosen:
            print("chaos: no tmpfs mount (needs root): the disk fault is left out")
            chosen.remove("disk")
        stack = Stack(home, disk)
        inbox = chaoskit.Inbox(home / "pi", LIST)
        (stack.lists / "chaos.yaml").write_text(
            f"name: chaos\narchive: {inbox.dir}\ntree: tiny\ninterval: 1\n"
            f"filters:\n  to: [{LIST}]\n  subject_prefix: [PATCH]\n  paths: [mm/]\n"
        )
        try:
            stack.up()
            for fault in chosen:
                tries = []
                for _ in range(args.tries):
                    settle(stack)
                    if fault == "flood":
                        tries.append(flood(stack))
                    elif fault.startswith("kill-"):
                        tries.append(kill(stack, fault.removeprefix("kill-")))
                    elif fault == "pg-restarts":
                        tries.append(pg_restarts(stack, inbox))
                    elif disk is not None:
                        tries.append(full_disk(stack, disk))
                    last = tries[-1]
                    print(f"{fault}: healed within {last['healed']} s {last.get('note', '')}",
                          flush=True)  # fmt: skip
                rows.append((fault, tries))
            ended = wait(lambda: all(stack.state(s) in ("done", "failed") for s in stack.series),
                         SERIES_END_S, 2.0)  # fmt: skip
            states = {s: stack.state(s) for s in stack.series}
            print(f"series: {states} (all ended {ended and f'{ended:.0f} s' or 'NOT'} after "
                  "the last fault)", flush=True)  # fmt: skip
        finally:
            stack.down()
    not_done = [s for s, st in states.items() if st != "done"]
    print()
    print("| fault | tries | survived | healed within (s) | series lost | mails lost |")
    print("|---|---|---|---|---|---|")
    for fault, tries in rows:
        ok = sum(1 for t in tries if t["healed"] is not None and t["healed"] <= t["floor"])
        worst = max((t["healed"] for t in tries if t["healed"] is not None), default=None)
        lost = sum(1 for t in tries if "sid" in t and states.get(t["sid"]) != "done")
        mails = sum(int(t.get("mails_lost", 0)) for t in tries) if fault == "pg-restarts" else "-"
        shown = f"{worst:.1f}" if worst is not None else "never"
        print(f"| {fault} | {len(tries)} | {ok}/{len(tries)} | {shown} (floor {tries[0]['floor']:.0f}) "
              f"| {lost} | {mails} |")  # fmt: skip
    print(f"\nseries submitted: {len(states)}, not done at the end: {not_done or 'none'}")
    if args.keep:
        print(f"home kept: {home}")
    else:
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return 0 if not not_done else 1


if __name__ == "__main__":
    raise SystemExit(main())
