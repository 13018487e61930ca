"""Web latency: the comparison page and its API under 32 concurrent connections.

Data: 10 kernels (--kernels) x 5 runs x 300 stats (vm-scalability throughput plus vmstat-style counters),
stored through the real ingest in a temporary embedded PostgreSQL (or
STACKBENCH_DATABASE_URL, whose rows stay, marked by suite_version bench-web). The app
runs under gunicorn on 127.0.0.1; load comes from wrk when installed (apt-get install wrk),
else from a Python thread client with keep-alive connections. Prints p50/p95 latency and
throughput per URL and the ratio of p95 to the 200 ms floor.

    .venv/bin/python bench/web_bench.py [--duration 10] [--connections 32] [--workers 2] [--threads 8]
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

FLOOR_P95_MS = 200.0
KERNELS, RUNS, STATS = 10, 5, 300
COUNTERS = ["compact_stall", "compact_success", "compact_fail", "thp_fault_alloc",
            "thp_fault_fallback", "pgmigrate_success", "compact_isolated"]  # fmt: skip

WRK_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("STACKBENCH p50=%d p95=%d p99=%d requests=%d duration=%d errors=%d\\n",
    latency:percentile(50), latency:percentile(95), latency:percentile(99),
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def make_runs(kernels: int = KERNELS):
    from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData

    rnd = random.Random(5)
    job = JobSpec("vm-scalability", "anon-w-seq", {"test": "anon-w-seq", "size": "8T"},
                  suite_version="bench-web")  # fmt: skip
    machine = MachineSpec("bench-web-vm", kind="qemu", cpus=2, memory_mb=2048)
    names = ["vm-scalability.throughput"] + [f"proc-vmstat.{c}" for c in COUNTERS]
    names += [f"proc-vmstat.bench_{i}" for i in range(STATS - len(names))]
    runs = []
    for k in range(kernels):
        kernel = KernelSpec(f"{0xBE0000 + k:040x}", name=f"bench-web-k{k}")
        for it in range(RUNS):
            samples = {}
            for j, n in enumerate(names):
                base = 1e6 if j == 0 else 1000.0 + j
                shift = 1 - 0.04 * k if j % 7 == 0 else 1.0  # some stats move per commit
                samples[n] = [base * shift * rnd.gauss(1, 0.01)]
            runs.append(RunData(job, kernel, machine, it, samples, source="bench-web"))
    return runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server at {url} did not come up")


def run_wrk(url: str, conns: int, duration: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_SCRIPT)
        script = fh.name
    try:
        out = subprocess.run(
            ["wrk", "-t", "2", "-c", str(conns), "-d", f"{duration}s", "--timeout", "10s",
             "-s", script, url],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(script)
    m = re.search(r"STACKBENCH (.*)", out)
    if not m:
        raise SystemExit(f"unexpected wrk output:\n{out}")
    v = {k: float(x) for k, x in (kv.split("=") for kv in m.group(1).split())}
    return {
        "p50_ms": v["p50"] / 1000, "p95_ms": v["p95"] / 1000, "p99_ms": v["p99"] / 1000,
        "rps": v["requests"] / (v["duration"] / 1e6), "requests": v["requests"],
        "errors": v["errors"],
    }  # fmt: skip


def run_threads(url: str, conns: int, duration: int) -> dict[str, float]:
    """Closed-loop load: ``conns`` threads, each with its own keep-alive connection."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    path = parts.path + ("?" + parts.query if parts.query else "")
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def worker() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        mine = []
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    errors[0] += 1
            except OSError:
                errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
                continue
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    q = statistics.quantiles(lat, n=100)
    return {"p50_ms": q[49] * 1000, "p95_ms": q[94] * 1000, "p99_ms": q[98] * 1000,
            "rps": len(lat) / took, "requests": len(lat), "errors": errors[0]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=10, help="seconds per URL")
    ap.add_argument("--kernels", type=int, default=KERNELS, help="kernels in the comparison")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    ap.add_argument("--client", choices=["auto", "wrk", "python"], default="auto")
    args = ap.parse_args()

    home = None
    if not os.environ.get("STACKBENCH_DATABASE_URL"):
        home = Path(tempfile.mkdtemp(prefix="stackbench-webbench-"))
        os.environ["STACKBENCH_HOME"] = str(home)
    from stackbench.resultsdb import db, ingest

    server = None
    try:
        eng = db.engine()
        os.environ.setdefault("STACKBENCH_DATABASE_URL", db.resolve_url(start=False))
        runs = make_runs(args.kernels)
        ingest.ingest(eng, runs)
        from stackbench.web import create_app

        app = create_app({"ENGINE": eng, "SECRET_KEY": "bench"})
        commits = sorted({r.kernel.commit for r in runs})
        from sqlalchemy.orm import Session

        from stackbench.mail import accounts

        with Session(eng) as s, s.begin():
            # starting a comparison needs an account (viewing one does not)
            token = accounts.create_token(s, accounts.create_user(s, "bench"), "bench")
        with app.test_client() as c:
            r = c.post(
                "/api/comparisons",
                json={"kernels": commits},
                headers={"Authorization": f"Bearer {token}"},
            )
            key = r.get_json()["key"]
            t0 = time.perf_counter()
            assert c.get(f"/compare/{key}").status_code == 200
            cold = time.perf_counter() - t0
        port = free_port()
        gunicorn = [
            sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}",
            "--workers", str(args.workers), "--threads", str(args.threads), "--log-level", "warning",
            "stackbench.web.wsgi:app",
        ]  # fmt: skip
        server = subprocess.Popen(gunicorn, env=dict(os.environ))
        base = f"http://127.0.0.1:{port}"
        urls = {
            "comparison page": f"{base}/compare/{key}",
            "comparison API (JSON)": f"{base}/api/comparisons/{key}",
            "LKP table API (text)": f"{base}/api/comparisons/{key}/tables/lkp?format=text",
        }
        wait_up(urls["comparison page"])
        for u in urls.values():  # warm every worker's cache
            for _ in range(args.workers * 2):
                urllib.request.urlopen(u, timeout=30).read()
        use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk"))
        client = "wrk" if use_wrk else "python threads"
        print(f"data: {args.kernels} kernels x {RUNS} runs x {STATS} stats "
              f"({args.kernels * RUNS * STATS:,} samples); gunicorn {args.workers} workers x {args.threads} "
              f"threads; client: {client}, {args.connections} connections, "
              f"{args.duration} s per URL; {os.cpu_count()} CPUs")  # fmt: skip
        print(f"first view (computes tables, verdicts, plots; in-process): {cold * 1000:.0f} ms")
        size = len(urllib.request.urlopen(urls["comparison page"]).read())
        print(f"comparison page size: {size / 1024:.0f} KiB")
        worst = 0.0
        for name, u in urls.items():
            res = (run_wrk if use_wrk else run_threads)(u, args.connections, args.duration)
            worst = max(worst, res["p95_ms"])
            print(f"{name:24s} p50 {res['p50_ms']:7.1f} ms  p95 {res['p95_ms']:7.1f} ms  "
                  f"p99 {res['p99_ms']:7.1f} ms  {res['rps']:7.1f} req/s  "
                  f"errors {int(res['errors'])}")  # fmt: skip
        print(
            f"worst p95 {worst:.1f} ms; ratio to the {FLOOR_P95_MS:.0f} ms floor: "
            f"{worst / FLOOR_P95_MS:.2f} ({'within' if worst < FLOOR_P95_MS else 'OVER'})"
        )
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if home:
            from stackbench.resultsdb.embedded import Cluster, destroy

            db.reset()
            destroy(Cluster(home))
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
