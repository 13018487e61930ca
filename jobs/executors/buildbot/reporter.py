"""The master's reporter: it tells stackbench when a build starts or ends.

A service of the master NOTIFYs the dispatcher's channel of stackbench's
PostgreSQL database (``build <buildid> started|finished``), so the dispatcher takes up a
series the moment its kernel is built or its round of boots ends instead of at its next
(slow, fallback) poll. The database is the one ``notify_url`` names in the master's
configuration, else stackbench's own (``$STACKBENCH_DATABASE_URL``, or the embedded cluster
of ``stackbench up`` when it exists); a master with none says so once and sends nothing.
A NOTIFY that fails is logged and dropped: the dispatcher's poll still finds the build.
"""

from __future__ import annotations

from typing import Any

from stackbench.jobs.executors.buildbot.config import BuildbotConfig

CHANNEL = "stackbench_series"  # jobs.driver.lifecycle.CHANNEL: the master does not import lifecycle


def database_url(cfg: BuildbotConfig) -> str:
    """The stackbench database the master notifies; "" when it knows none."""
    from stackbench import config

    if cfg.notify_url:
        return cfg.notify_url
    if config.database_url():
        return config.database_url()
    from stackbench.resultsdb.embedded import Cluster

    return Cluster().url() if Cluster().exists else ""


def payload(key: tuple[str, ...], build: dict[str, Any]) -> str:
    """``build <id> started|finished`` of the master's build event ``key`` (``("builds",
    id, "new"|"finished")``)."""
    return f"build {build['buildid']} {'finished' if key[-1] == 'finished' else 'started'}"


def make(cfg: BuildbotConfig) -> list[Any]:
    """The master's ``services``: the notifier, when the master knows a database."""
    url = database_url(cfg)
    if not url:
        return []
    return [_notifier_class()(url=url.replace("postgresql+psycopg://", "postgresql://", 1))]


# a build's start and end, as the master's message queue names them
EVENTS = (("builds", None, "new"), ("builds", None, "finished"))


def _notifier_class() -> type:
    # defined on first use: the master imports Buildbot, stackbench's other commands do not
    from buildbot.util import service
    from twisted.internet import defer, threads
    from twisted.python import log

    class StackbenchNotifier(service.BuildbotService):
        """NOTIFY stackbench's dispatcher of every build's start and end.

        It listens to the master's message queue itself rather than being a reporter with a
        generator: a generator formats a message for each build (its details read back from
        the master's database), 0.15-0.4 s of the dispatcher's wake-up on the build host,
        and the NOTIFY needs the build's id alone."""

        name = "stackbench-notifier"

        def checkConfig(self, url: str) -> None:
            pass

        @defer.inlineCallbacks
        def reconfigService(self, url: str) -> Any:
            if getattr(self, "url", None) != url:
                self._conn: Any = None  # the next NOTIFY connects to the new database
            self.url = url
            if getattr(self, "_consumers", None) is None:
                # one NOTIFY at a time, in the order of the events
                self._sending = defer.DeferredLock()
                self._consumers = []
                for key in EVENTS:
                    c = yield self.master.mq.startConsuming(self._event, key)
                    self._consumers.append(c)

        def _event(self, key: tuple[str, ...], build: dict[str, Any]) -> None:
            # psycopg blocks: in a thread, never on the reactor that runs every build
            d = self._sending.run(threads.deferToThread, self._notify, payload(key, build))
            d.addErrback(lambda f: log.msg(f"stackbench notifier: {f.getErrorMessage()}"))

        def _notify(self, message: str) -> None:
            import psycopg

            for attempt in (1, 2):  # a connection the database dropped is opened again once
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                    self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, message))
                    return
                except psycopg.OperationalError:
                    self._conn = None
                    if attempt == 2:
                        raise

        @defer.inlineCallbacks
        def stopService(self) -> Any:
            for c in self._consumers or []:
                yield c.stopConsuming()
            self._consumers = None
            yield self._sending.acquire()  # the last NOTIFY sent
            self._sending.release()
            if self._conn is not None:
                self._conn.close()
            yield super().stopService()

    return StackbenchNotifier
