"""stackbench intake-push: the git intake hook's command (see stackbench.patches.intake)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

NAME = "intake-push"
ORDER = 95
HELP = "(used by the git intake hook) register pushed commits as a series"
DESCRIPTION = """\
Run by the hooks that stackbench.patches.intake.install_hook writes into the intake
repository; reads git's hook input ('<old> <new> <ref>' lines) on stdin.

  --hook pre-receive   check only: refuse refs outside refs/for/<tree>/<base>, unknown
                       trees, deletions, merges, empty ranges and unknown push options
  --hook post-receive  register each pushed range as a series (one patch per commit),
                       keep it under refs/stackbench/series/<ID>, print its ID and URL

Push options, validated like every submission (runs 1..30, jobs with overrides):
  git push -o runs=5 -o 'jobs=thpscale,vm-scalability[test=anon-w-seq]' ..."""

PUSH_OPTIONS = ("runs", "jobs", "check-claims")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hook",
        choices=["pre-receive", "post-receive"],
        default="post-receive",
        help="which hook is running (default post-receive: register)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=None,
        help="the bare intake repository (default: $GIT_DIR, as git sets it for hooks)",
    )


def run(args: argparse.Namespace) -> int:
    from stackbench.patches import intake

    repo = args.repo or Path(os.environ.get("GIT_DIR", "."))
    repo = repo.resolve()
    updates = intake.read_hook_input(sys.stdin.read())
    options = _options(intake.read_push_options(os.environ))
    if args.hook == "pre-receive":
        _check(repo, updates, options)
        return 0
    return _register(repo, updates, options)


def _options(raw: dict[str, str]) -> dict[str, object]:
    """Push options as the submission's fields (validated with the rest by lifecycle.check):
    ``-o runs=5``, ``-o jobs=thpscale[madvise=false],vm-scalability``."""
    from stackbench.errors import InputError
    from stackbench.jobs.driver.pipeline import split_job_specs

    out: dict[str, object] = {}
    for key, value in raw.items():
        if key not in PUSH_OPTIONS:
            raise InputError(
                f"push option {key[:40]!r}", f"unknown; known: {', '.join(PUSH_OPTIONS)}"
            )
        if key == "runs":
            out["runs"] = value
        elif key == "check-claims":  # -o check-claims: the cover letter's claims measured
            out["check_claims"] = value.strip().lower() not in ("0", "false", "no", "off")
        else:
            out["jobs"] = split_job_specs(value)
    return out


def _check(repo: Path, updates: list[tuple[str, str, str]], options: dict) -> None:
    from stackbench.kernels import trees
    from stackbench.patches import intake
    from stackbench.resultsdb import db

    # refs first: a push to a foreign ref is refused without touching the database
    targets = [(intake.parse_push_ref(ref), new) for _old, new, ref in updates]
    with db.session() as session:
        for (tree, base), new in targets:
            _checked(session, tree, options)
            intake.series_from_push(repo, tree, base, new, tree_repo=trees.local_repo(tree))


def _register(repo: Path, updates: list[tuple[str, str, str]], options: dict) -> int:
    from stackbench import config, gitcmd
    from stackbench.jobs.driver import lifecycle
    from stackbench.kernels import trees
    from stackbench.patches import intake
    from stackbench.patches.apply import ApplyResult
    from stackbench.resultsdb import db

    done: list[tuple[int, str, str, int, str, str]] = []
    with db.session() as session:
        owner_id = _owner(session, os.environ.get("REMOTE_USER"))
        for _old, new, ref in updates:
            tree, base = intake.parse_push_ref(ref)
            checked = _checked(session, tree, options)
            parsed = intake.series_from_push(
                repo, tree, base, new, tree_repo=trees.local_repo(tree)
            )
            # HEAD moves: the series keeps the commit it named at the push
            checked.base = parsed.base_commit if base == "HEAD" else base
            # the pushed commits are the applied patches: nothing to git am
            result = ApplyResult(
                base_sha=parsed.base_commit or "",
                commits=[p.commit_sha or "" for p in parsed.patches],
                ok=True,
            )
            series = lifecycle.create(
                session,
                parsed,
                checked,
                source="push",
                owner_id=owner_id,
                meta={"push": {"repo": str(repo), "ref": ref, "head": new}},
                applied=result,
                check_claims=bool(options.get("check_claims")),
            )
            done.append((series.id, ref, new, len(parsed.patches), base, series.title))
    url = config.server_url()
    for series_id, ref, new, count, base, title in done:
        # keep the commits reachable under the series, and free refs/for/ for the next push
        gitcmd.update_ref(repo, intake.SERIES_REF.format(id=series_id), new)
        gitcmd.delete_ref(repo, ref)
        print(f"stackbench: series {series_id}: {count} patch(es) on {base}: {title}")
        if url:
            print(f"stackbench: {url.rstrip('/')}/series/{series_id}")
    return 0


def _checked(session, tree: str, options: dict):
    """The one validation of every front door (tree, jobs, runs); one line on failure."""
    from stackbench.jobs.driver import lifecycle

    return lifecycle.check(session, tree=tree, jobs=options.get("jobs"), runs=options.get("runs"))


def _owner(session, user: str | None) -> int | None:
    if not user:
        return None
    from stackbench.resultsdb import accounts_q

    row = accounts_q.user_named(session, user)
    return row.id if row is not None else None
