"""The services ``stackbench up`` starts and ``stackbench down`` stops, listed (not a
command: the leading underscore keeps it out of the command list)."""

from __future__ import annotations

from stackbench.services import Service


def listed() -> list[Service]:
    """Every service, in start order: the dispatcher hands series to the Buildbot master
    and the list watcher makes series, so ``down`` (in reverse) stops those two first."""
    from stackbench.jobs.driver import dispatcher_service
    from stackbench.jobs.executors import services as buildbot
    from stackbench.web import services as web

    return [
        ("buildbot", buildbot.start, buildbot.stop),
        ("web", web.start, web.stop),
        ("dispatcher", dispatcher_service.start, dispatcher_service.stop),
        ("lists", dispatcher_service.start_lists, dispatcher_service.stop_lists),
    ]
