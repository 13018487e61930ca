"""The ``git push`` door: what the intake repository's hooks do with a push
(stackbench.patches.intake owns the refs and the hooks; ``stackbench intake-push`` is the
hooks' command). Each pushed ``refs/for/<tree>/<base>`` goes through the one intake
(stackbench.jobs.driver.intake.take): the pre-receive hook only checks, the post-receive
hook stores each range as a series and keeps its commits under the series' ref."""

from __future__ import annotations

from pathlib import Path

from stackbench import config, gitcmd
from stackbench.jobs.driver import intake
from stackbench.patches import intake as push_refs
from stackbench.resultsdb import accounts_q, db


def _submission(repo: Path, ref: str, new: str, options: dict[str, str], owner_id: int | None
                ) -> intake.Submission:  # fmt: skip
    return intake.Submission(
        source="push",
        pushed=intake.Pushed(repo=repo, ref=ref, new=new),
        options=options,
        owner_id=owner_id,
    )


def check(repo: Path, updates: list[tuple[str, str, str]], options: dict[str, str]) -> None:
    """pre-receive: refuse the whole push when any of its refs or ranges is no series; the
    push options (``-o runs=5``) are the submission's options, checked with the rest."""
    # refs first: a push to a foreign ref is refused without touching the database
    for _old, _new, ref in updates:
        push_refs.parse_push_ref(ref)
    with db.session() as s:
        for _old, new, ref in updates:
            intake.take(s, _submission(repo, ref, new, options, None), check_only=True)


def register(
    repo: Path, updates: list[tuple[str, str, str]], options: dict[str, str], user: str | None
) -> list[str]:
    """post-receive: store each pushed range as a series (owned by the pushing account when
    it is one), keep its commits under ``refs/stackbench/series/<ID>`` and free its
    ``refs/for/`` ref; the lines to tell the pusher."""
    done: list[tuple[int, str, str, int, str]] = []
    with db.session() as s:
        row = accounts_q.user_named(s, user) if user else None
        owner_id = row.id if row is not None else None
        for _old, new, ref in updates:
            taken = intake.take(s, _submission(repo, ref, new, options, owner_id))
            assert taken.series is not None
            x = taken.series
            done.append((x.id, ref, new, len(taken.parsed.patches), x.title))
    lines = []
    url = config.server_url()
    for series_id, ref, new, count, title in done:
        gitcmd.update_ref(repo, push_refs.SERIES_REF.format(id=series_id), new)
        gitcmd.delete_ref(repo, ref)
        base = push_refs.parse_push_ref(ref)[1]
        lines.append(f"stackbench: series {series_id}: {count} patch(es) on {base}: {title}")
        if url:
            lines.append(f"stackbench: {url.rstrip('/')}/series/{series_id}")
    return lines
