"""The master's reporter: it tells stackbench when a build starts or ends.

A reporter in the master's services NOTIFYs the dispatcher's channel of stackbench's
PostgreSQL database (``build <buildid> started|finished``), so the dispatcher takes up a
series the moment its kernel is built or its round of boots ends instead of at its next
(slow, fallback) poll. The database is the one ``notify_url`` names in the master's
configuration, else stackbench's own (``$STACKBENCH_DATABASE_URL``, or the embedded cluster
of ``stackbench up`` when it exists); a master with none says so once and sends nothing.
A NOTIFY that fails is logged and dropped: the dispatcher's poll still finds the build.
"""

from __future__ import annotations

from typing import Any

from stackbench.jobs.buildbot.config import BuildbotConfig

CHANNEL = "stackbench_series"  # jobs.lifecycle.CHANNEL: the master does not import lifecycle


def database_url(cfg: BuildbotConfig) -> str:
    """The stackbench database the master notifies; "" when it knows none."""
    from stackbench import config

    if cfg.notify_url:
        return cfg.notify_url
    if config.database_url():
        return config.database_url()
    from stackbench.resultsdb.embedded import Cluster

    return Cluster().url() if Cluster().exists else ""


def payloads(reports: list[dict[str, Any]]) -> list[str]:
    """One ``build <id> started|finished`` per build of the reports."""
    out = []
    for report in reports:
        for build in report.get("builds") or []:
            event = "finished" if build.get("complete") else "started"
            out.append(f"build {build['buildid']} {event}")
    return out


def make(cfg: BuildbotConfig) -> list[Any]:
    """The master's ``services``: the notifier, when the master knows a database."""
    from buildbot.plugins import reporters

    url = database_url(cfg)
    if not url:
        return []
    return [
        _notifier_class()(
            url=url.replace("postgresql+psycopg://", "postgresql://", 1),
            generators=[reporters.BuildStartEndStatusGenerator()],
        )
    ]


def _notifier_class() -> type:
    # defined on first use: the master imports Buildbot, stackbench's other commands do not
    from buildbot.reporters.base import ReporterBase
    from twisted.internet import threads
    from twisted.python import log

    class StackbenchNotifier(ReporterBase):
        """NOTIFY stackbench's dispatcher of every build's start and end."""

        name = "stackbench-notifier"

        def checkConfig(self, url: str, generators: list[Any]) -> None:
            super().checkConfig(generators=generators)

        def reconfigService(self, url: str, generators: list[Any]) -> Any:
            self.url = url
            self._conn: Any = None
            return super().reconfigService(generators=generators)

        def sendMessage(self, reports: list[dict[str, Any]]) -> Any:
            # psycopg blocks: in a thread, never on the reactor that runs every build
            d = threads.deferToThread(self._notify, payloads(reports))
            d.addErrback(lambda f: log.msg(f"stackbench notifier: {f.getErrorMessage()}"))
            return d

        def _notify(self, messages: list[str]) -> None:
            import psycopg

            for attempt in (1, 2):  # a connection the database dropped is opened again once
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                    for m in messages:
                        self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, m))
                    return
                except psycopg.OperationalError:
                    self._conn = None
                    if attempt == 2:
                        raise

        def stopService(self) -> Any:
            if self._conn is not None:
                self._conn.close()
            return super().stopService()

    return StackbenchNotifier
