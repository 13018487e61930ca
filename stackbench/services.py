"""Starting and stopping the embedded services that make up a one-machine stackbench.

Other components add their services (Buildbot master and worker, web UI) through
:data:`SERVICES`, each a pair of start/stop callables returning a status line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from stackbench import config

Service = tuple[str, Callable[[], str], Callable[[], str]]
SERVICES: list[Service] = []


def _db_up() -> str:
    from stackbench.resultsdb import db

    if config.database_url():
        db.upgrade(db.engine(migrate=False))  # 'up' is where a schema change is applied
        return "database: using STACKBENCH_DATABASE_URL"
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    started = cluster.start()
    db.upgrade(db.engine(migrate=False))
    state = "started" if started else "already running"
    return f"database: {state} ({cluster.datadir})"


def _db_down() -> str:
    if config.database_url():
        return "database: external, left running"
    from stackbench.resultsdb.embedded import Cluster

    cluster = Cluster()
    return "database: stopped" if cluster.stop() else "database: not running"


def _registered() -> list[Service]:
    # optional components register themselves on import
    import importlib
    import importlib.util

    # in start order: the dispatcher hands series to the master and stops first
    mods = (
        "stackbench.jobs.executors.services",
        "stackbench.web.services",
        "stackbench.jobs.driver.dispatcher_service",
    )
    for mod in mods:
        if importlib.util.find_spec(mod) is not None:
            importlib.import_module(mod)
    return SERVICES


def up(db_only: bool = False, workers: int = 0) -> Iterator[str]:
    """Start every service; ``workers``: at least that many local Buildbot workers."""
    yield _db_up()
    if db_only:
        return
    services = _registered()
    # the local workers post their runs to the web UI started beside them, as a lab's boxes do
    web = local_web_url() if any(name == "web" for name, _s, _t in services) else None
    for name, start, _stop in services:
        if name == "buildbot":
            yield start(workers=max(workers, 1), results_url=web)
        else:
            yield start()


def local_web_url() -> str:
    """Where a process on this host reaches the web UI that ``stackbench up`` serves (a
    wildcard bind address is reached on 127.0.0.1)."""
    host = config.get("STACKBENCH_WEB_HOST")
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{host}:{config.get_int('STACKBENCH_WEB_PORT')}"


def down() -> Iterator[str]:
    for _name, _start, stop in reversed(_registered()):
        yield stop()
    yield _db_down()
