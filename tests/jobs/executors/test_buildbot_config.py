"""The Buildbot configuration, worker matching, the worker-side commands and the embedded
master/worker of 'stackbench up' (started for real on loopback)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from stackbench.cli import main
from stackbench.errors import InputError
from stackbench.jobs.executors.buildbot import config

pytest.importorskip("buildbot")


def write(path: Path, body: str, mode: int = 0o644) -> Path:
    path.write_text(body)
    os.chmod(path, mode)
    return path


CFG = """
workers:
  - {name: qemu-1, kind: qemu, cpus: 8, memory_mb: 16384}
  - {name: box, kind: baremetal, cpus: 64, memory_mb: 262144}
admins: [alice]
nightly: "03:30"
secrets_file: secrets.yaml
"""


def test_config_reads_workers_and_secrets(tmp_path):
    write(tmp_path / "secrets.yaml", "workers: {qemu-1: s1, box: s2}\nusers: {alice: pw}\n", 0o600)
    cfg = config.load(write(tmp_path / "stackbench.yaml", CFG), env={})
    assert [(w.name, w.kind, w.cpus, w.password) for w in cfg.workers] == [
        ("qemu-1", "qemu", 8, "s1"),
        ("box", "baremetal", 64, "s2"),
    ]
    assert (cfg.nightly_hour, cfg.nightly_minute) == (3, 30)
    assert cfg.users == {"alice": "pw"}
    assert cfg.bind == "127.0.0.1"
    assert cfg.kinds == ["qemu", "baremetal"]


def test_environment_overrides_file(tmp_path):
    env = {
        "STACKBENCH_BB_WORKERS": "a:qemu:4:8192,b:baremetal:16:65536",
        "STACKBENCH_BB_WORKER_PASSWORD_A": "x",
        "STACKBENCH_BB_WORKER_PASSWORD_B": "y",
        "STACKBENCH_BB_NIGHTLY": "1:05",
        "STACKBENCH_BB_BIND": "0.0.0.0",
        "STACKBENCH_BB_WWW_PORT": "8011",
    }
    cfg = config.load(tmp_path / "absent.yaml", env=env)
    assert [(w.name, w.kind, w.memory_mb, w.password) for w in cfg.workers] == [
        ("a", "qemu", 8192, "x"),
        ("b", "baremetal", 65536, "y"),
    ]
    assert (cfg.nightly_hour, cfg.nightly_minute, cfg.www_port) == (1, 5, 8011)
    assert cfg.buildbot_url == "http://127.0.0.1:8011/"


@pytest.mark.parametrize(
    "body, secrets_mode, message",
    [
        (CFG, 0o644, "secrets file must be mode 600"),
        (CFG.replace("kind: baremetal", "kind: vm"), 0o600, "kind must be one of"),
        (CFG.replace("03:30", "25:00"), 0o600, "nightly time must be HH:MM"),
        (CFG + "colour: blue\n", 0o600, "unknown keys: colour"),
        (CFG.replace("cpus: 8", "cpus: many"), 0o600, "cpus must be an integer"),
    ],
)
def test_bad_configuration_is_one_clear_error(tmp_path, body, secrets_mode, message):
    write(
        tmp_path / "secrets.yaml",
        "workers: {qemu-1: s1, box: s2}\nusers: {alice: pw}\n",
        secrets_mode,
    )
    with pytest.raises(InputError, match=message):
        config.load(write(tmp_path / "stackbench.yaml", body), env={})


def test_worker_without_password_is_refused(tmp_path):
    path = write(tmp_path / "stackbench.yaml", "workers: [{name: w, kind: qemu}]\n")
    with pytest.raises(InputError, match="STACKBENCH_BB_WORKER_PASSWORD_W"):
        config.load(path, env={})


def test_jobs_go_only_to_machines_of_their_kind_and_size(tmp_path):
    from buildbot.process.properties import Properties

    from stackbench.jobs.executors.buildbot import builders, workers

    def props(**kw):
        p = Properties()
        for k, v in kw.items():
            p.setProperty(k, v, "test")
        return p

    small = props(machine_kind="qemu", cpus=2, memory_mb=2048)
    big = props(machine_kind="baremetal", cpus=64, memory_mb=262144)
    assert workers.fits(small, props())
    assert workers.fits(big, props(min_cpus="32", min_memory_mb=100000))
    assert not workers.fits(small, props(min_cpus="32"))
    assert not workers.fits(small, props(min_memory_mb=4096))
    assert not workers.fits(small, props(machine_kind="baremetal"))

    env = {"STACKBENCH_BB_WORKERS": "q1:qemu:2:2048,q2:qemu:2:2048,m1:baremetal:64:262144"}
    env.update({f"STACKBENCH_BB_WORKER_PASSWORD_{n}": "pw" for n in ("Q1", "Q2", "M1")})
    cfg = config.load(tmp_path / "none.yaml", env=env)
    by_name = {b.name: b for b in builders.make(cfg)}
    assert by_name["bench-qemu"].workernames == ["q1", "q2"]
    assert by_name["bench-baremetal"].workernames == ["m1"]
    assert by_name["bench-qemu"].canStartBuild is workers.can_start_build
    assert set(by_name) >= {"series", "nightly", "bisect", "build-linux-6.1-tiny-guest"}


def test_master_cfg_passes_buildbot_checkconfig(tmp_path):
    from stackbench import proc
    from stackbench.jobs.executors import services

    write(tmp_path / "stackbench.yaml", CFG)
    write(tmp_path / "secrets.yaml", "workers: {qemu-1: a, box: b}\nusers: {alice: c}\n", 0o600)
    (tmp_path / "master.cfg").write_text(services.MASTER_CFG.read_text())
    out = proc.run([services.tool("buildbot"), "checkconfig", str(tmp_path)], cwd=tmp_path)
    assert "Config file is good" in out.stdout


def _render(cfg, builder: str, step: int, **props):
    """The argv a builder's step would run, for these build properties."""
    from buildbot.process.properties import Properties

    from stackbench.jobs.executors.buildbot import builders

    b = next(b for b in builders.make(cfg) if b.name == builder)
    command = b.factory.steps[step].kwargs["command"]
    p = Properties()
    for k, v in props.items():
        p.setProperty(k, v, "test")
    out = []
    p.render(command).addCallback(out.append)
    return out[0]


def _cfg(tmp_path):
    env = {"STACKBENCH_BB_WORKERS": "q1:qemu:2:2048,m1:baremetal:64:262144"}
    env.update({f"STACKBENCH_BB_WORKER_PASSWORD_{n}": "pw" for n in ("Q1", "M1")})
    return config.load(tmp_path / "none.yaml", env=env)


def test_nightly_builder_drives_its_comparisons_through_this_master(tmp_path):
    from buildbot.process.properties import Secret

    from stackbench.cli import build_parser
    from stackbench.jobs.executors.buildbot import builders

    cfg = _cfg(tmp_path)
    cfg.users, cfg.admins = {"ops": "s3cret", "admin": "pw"}, ["admin"]
    nightly = next(b for b in builders.make(cfg) if b.name == "nightly")
    # a coordinator: its rounds run on every worker of the kind, its own one included
    assert nightly.workernames == ["q1"] and not nightly.locks
    # every night ends with the machines' A/A (5 boots per set unless configured)
    assert _render(cfg, "nightly", 0) == ["stackbench", "nightly", "--buildbot", "--now",
                                          "--aa", "5"]  # fmt: skip
    argv = _render(cfg, "nightly", 0, branches="linux-6.1:master mm:mm-unstable")
    assert argv == [
        "stackbench",
        *("nightly", "--buildbot", "--now"),
        *("--branch", "linux-6.1:master", "--branch", "mm:mm-unstable"),
        *("--aa", "5"),
    ]
    # the real CLI accepts exactly that
    args = build_parser().parse_args(argv[1:])
    assert (args.now, args.branch, args.aa, args.buildbot) == (
        True, ["linux-6.1:master", "mm:mm-unstable"], 5, True)  # fmt: skip
    cfg.nightly_aa = 0
    assert _render(cfg, "nightly", 0) == ["stackbench", "nightly", "--buildbot", "--now"]
    # told where the master is and who submits: the admin, its password a secret
    env = nightly.factory.steps[0].kwargs["env"]
    assert env["STACKBENCH_BUILDBOT_URL"] == cfg.buildbot_url
    assert env["STACKBENCH_BUILDBOT_USER"] == "admin"
    password = env["STACKBENCH_BUILDBOT_PASSWORD"]
    assert isinstance(password, Secret) and "pw" not in repr(password)


@pytest.mark.parametrize(
    ("value", "message"), [("1", r"0 \(no A/A\) or 2 to 100"), ("x", "integer")]
)
def test_a_bad_nightly_aa_is_named(tmp_path, value, message):
    env = {"STACKBENCH_BB_NIGHTLY_AA": value}
    with pytest.raises(InputError, match=message):
        config.load(tmp_path / "none.yaml", env=env)
    (tmp_path / "sb.yaml").write_text("nightly_aa: 8\n")
    assert config.load(tmp_path / "sb.yaml", env={}).nightly_aa == 8


def test_bisect_builder_flags_match_the_bisect_command(tmp_path):
    from stackbench.cli import build_parser

    cfg = _cfg(tmp_path)
    argv = _render(
        cfg, "bisect", 0, good="a" * 12, bad="b" * 12, job="thpscale", metric="thp.fault", tree=""
    )
    assert argv == [
        "stackbench",
        *("bisect", "--buildbot", "--good", "a" * 12, "--bad", "b" * 12),
        *("--job", "thpscale", "--metric", "thp.fault"),
    ]
    args = build_parser().parse_args(argv[1:])
    assert (args.good, args.bad, args.job, args.metric) == (
        "a" * 12,
        "b" * 12,
        "thpscale",
        "thp.fault",
    )


def test_baremetal_builder_queues_on_the_box_and_waits_on_the_master(tmp_path):
    from stackbench.jobs.executors.buildbot import box_steps, builders

    cfg = _cfg(tmp_path)
    by_name = {b.name: b for b in builders.make(cfg)}
    names = [
        f.kwargs.get("name") or f.step_class.name for f in by_name["bench-baremetal"].factory.steps
    ]
    assert names == [
        "find lost attempts",
        "fetch kernel",
        "mark lost runs",
        "give up after lost attempts",
        "queue job and kexec",
        "wait for the box to report",
    ]
    assert [f.step_class for f in by_name["bench-baremetal"].factory.steps][
        -1
    ] is box_steps.AwaitReport
    # a box may reboot at any time: the series coordinator stays off it
    assert by_name["series"].workernames == ["q1"]
    assert box_steps.queued_from_output(0, 'queued\n{"keys": ["k:0"]}\n', "") == {
        "baremetal": {"keys": ["k:0"]}
    }
    assert box_steps.queued_from_output(1, "", "refused") == {}


# -- worker commands -------------------------------------------------------------------------


def _bench(tmp_path: Path, submission: str = "s1") -> Path:
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    os.chdir(work)
    assert main(["worker", "build", "--commit", "f" * 40, "--dry-kernel"]) == 0
    argv = ["worker", "bench", "--kernel", "out/kernel.tar", "--job", "dry-vm"]
    argv += ["--submission", submission, "--machine", "m1", "--runs", "3", "--dry-kernel"]
    assert main(argv) == 0
    return work


def test_upload_is_idempotent(eng, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    work = _bench(tmp_path)
    assert sorted(p.name for p in (work / "results").iterdir()) == [
        "run-000.json",
        "run-001.json",
        "run-002.json",
    ]
    assert main(["worker", "upload", "--results", "results"]) == 0
    assert "uploaded 3 run(s), 0 already present" in capsys.readouterr().out
    # a retried step on another machine produces the same keys: nothing new is stored
    _bench(tmp_path)
    assert main(["worker", "upload", "--results", "results"]) == 0
    assert "uploaded 0 run(s), 3 already present" in capsys.readouterr().out
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 3
        assert conn.execute(text("SELECT count(*) FROM sample")).scalar() == 15


def test_bad_payload_stores_nothing(eng, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("STACKBENCH_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    work = _bench(tmp_path)
    bad = work / "results" / "run-001.json"
    data = json.loads(bad.read_text())
    del data["kernel"]
    bad.write_text(json.dumps(data))
    assert main(["worker", "upload", "--results", "results"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stackbench: error:") and "run-001.json" in err and "kernel" in err
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_bench_without_kernel_artifact_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["worker", "bench", "--kernel", "nope.tar", "--job", "j", "--submission", "s"]
    assert main([*argv, "--dry-kernel"]) == 1
    assert "nope.tar: kernel artifact not found" in capsys.readouterr().err


def test_an_evidence_round_runs_bench_evidence_and_its_last_line_is_the_property(
    tmp_path, monkeypatch, capsys
):
    """The command an evidence round's step renders (every kernel, the functions, no
    upload), run for real with dry kernels: no run is written, and the counts (here the dry
    kernel's reason) are the last line, which becomes the build's ``coverage`` property."""
    from buildbot.process.properties import Properties

    from stackbench.cli import build_parser
    from stackbench.jobs.executors import worker
    from stackbench.jobs.executors.buildbot import steps

    boots = [{"commit": c * 40, "job": "j1,j2", "machine_kind": "qemu", "runs": 1,
              "round": steps.EVIDENCE_ROUND, "first": 0, "evidence": "f_one,f_two"}
             for c in "ab"]  # fmt: skip
    cmd = steps.evidence_step(_cfg(tmp_path), boots, ["k0.tar", "k1.tar"]).command
    p = Properties()
    p.setProperty("submission", "s-1", "test")
    p.setProperty("workername", "q1", "test")
    out = []
    p.render(cmd).addCallback(out.append)
    argv = out[0][out[0].index("worker") :]
    args = build_parser().parse_args(argv)
    assert [str(k) for k in args.kernel] == ["k0.tar", "k1.tar"] and args.job == ["j1", "j2"]
    assert args.evidence == "f_one,f_two" and not args.upload and args.runs == 1

    monkeypatch.chdir(tmp_path)
    for i, c in enumerate("ab"):
        assert (
            main(["worker", "build", "--commit", c * 40, "--out", f"out{i}", "--dry-kernel"]) == 0
        )
        (tmp_path / f"out{i}" / "kernel.tar").rename(tmp_path / f"k{i}.tar")
    capsys.readouterr()
    assert main([*argv, "--dry-kernel"]) == 0
    printed = capsys.readouterr().out
    got = steps.reported_counts(0, printed, "")["coverage"]
    assert [k["commit"] for k in got] == ["a" * 40, "b" * 40]
    assert got[0]["jobs"] == {j: {"error": "a dry kernel counts no calls"} for j in ("j1", "j2")}
    assert not (tmp_path / "results").exists()  # nothing to upload: no run was made
    assert steps.reported_counts(1, "not json\n", "") == {}

    # a line with profiles is far longer than the 4,096 characters of a Buildbot log line,
    # and the worker's own cut of a line that does not open its output loses text: printed
    # in pieces, through that cut as the worker reads it, the counts still read whole
    kernel = {"commit": "a" * 40, "jobs": {"j1": {"profile": {"self": {
        f"symbol_{i}": i / 10_000 for i in range(2_000)}}}}}  # fmt: skip
    long = json.dumps({"coverage": [kernel]})
    assert len(long) > 10 * 4096
    worker.print_in_pieces(long)
    pieces = capsys.readouterr().out
    got = steps.reported_counts(0, _through_worker_log(f"booting\n{pieces}"), "")
    assert got["coverage"] == [kernel]
    # printed whole, the same line loses text there (when this fails, buildbot-worker's
    # cut is fixed, buildbot/buildbot PR #9082, and print_in_pieces is no longer needed)
    got = steps.reported_counts(0, _through_worker_log(f"booting\n{long}\n"), "")
    assert got.get("coverage") != [kernel]


def _through_worker_log(out: str, read: int = 8192) -> str:
    """``out`` as buildbot-worker sends it to the master's log: read from the pipe as
    twisted reads it (8 KiB at a time, fdesc.readFromFD) and cut into lines of at most 4,096
    characters (its LineBoundaryFinder)."""
    from buildbot_worker.util.lineboundaries import LineBoundaryFinder

    lbf = LineBoundaryFinder(4096, r"(\r\n|\r(?=.))")
    sent = [lbf.append(out[i : i + read], 0.0) for i in range(0, len(out), read)]
    sent.append(lbf.flush())
    return "".join(got[0] for got in sent if got)


# -- embedded master and worker ---------------------------------------------------------------


def _listening(port: int) -> set[str]:
    addrs = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if int(hexport, 16) == port and state == "0A":  # LISTEN
                addrs.add(addr)
    return addrs


def test_up_starts_master_and_local_worker_on_loopback(tmp_path, monkeypatch):
    from stackbench.jobs.executors import services
    from stackbench.jobs.executors.buildbot import client

    monkeypatch.setenv("STACKBENCH_HOME", str(tmp_path / "home"))
    try:
        assert services.start().startswith("buildbot: started")
        base = tmp_path / "home" / "buildbot"
        cfg = client.read_yaml(base / "master" / "stackbench.yaml")
        assert _listening(cfg["www_port"]) == {"0100007F"}  # 127.0.0.1 only
        assert _listening(cfg["pb_port"]) == {"0100007F"}
        for secret in (base / "master" / "secrets.yaml", base / "worker-local" / "buildbot.tac"):
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        master = client.default_master()
        workers = master.get("workers")["workers"]
        assert [w["name"] for w in workers] == ["local"]
        assert services.start().endswith("worker local)")  # idempotent
        # up --workers 3 on the running master: two more workers, each its own process
        assert services.start(workers=3).endswith("3 workers)")
        client.wait_for_worker(master, "local-3")
        connected = [w["name"] for w in master.get("workers")["workers"] if w["connected_to"]]
        assert set(connected) >= {"local", "local-3"}
        pids = {
            (base / f"worker-{n}" / "twistd.pid").read_text()
            for n in ("local", "local-2", "local-3")
        }
        assert len(pids) == 3
        assert services.start().endswith("3 workers)")  # later ups start all three
    finally:
        assert services.stop() == "buildbot: stopped"
    assert not services.running(base / "master")
    for name in ("local", "local-2", "local-3"):
        assert not services.running(base / f"worker-{name}")
    assert services.stop() == "buildbot: not running"


def test_job_lists_split_on_commas_outside_brackets_only():
    from stackbench.jobs.executors.buildbot.steps import split_list

    spec = "vm-scalability[test=anon-w-seq,mem_fraction=0.05]"
    assert split_list(f"{spec} thpscale,stress-highalloc") == [spec, "thpscale", "stress-highalloc"]
    assert split_list(["a ", "", "b"]) == ["a", "b"]
    assert split_list(None) == [] and split_list("") == []


def test_the_masters_sqlite_state_keeps_its_connections_and_skips_the_fsync(tmp_path):
    """Buildbot's own engine factory, given the URL master.cfg gives it: pooled connections
    (not one per query) that commit without an fsync each."""
    from buildbot.db import enginestrategy
    from sqlalchemy.pool import NullPool

    from stackbench.jobs.executors.buildbot import state_db

    for _reconfig in range(2):  # master.cfg runs again on a reconfig
        db_url = state_db.url("sqlite:///state.sqlite")
    engine = enginestrategy.create_engine(db_url, basedir=str(tmp_path))
    try:
        assert not isinstance(engine.pool, NullPool)
        assert engine.url.database == str(tmp_path / "state.sqlite")
        assert "plugin" not in engine.url.query
        with engine.connect() as conn:
            assert conn.exec_driver_sql("pragma synchronous").scalar() == 1  # NORMAL, not FULL
            first = conn.connection.dbapi_connection
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection is first  # the same file handle again
    finally:
        engine.dispose()
    assert state_db.url("postgresql://bb@db/bb") == "postgresql://bb@db/bb"
    assert state_db.url("sqlite://") == "sqlite://"  # in memory: Buildbot's own pool
