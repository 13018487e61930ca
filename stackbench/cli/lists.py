"""stackbench lists: mailing lists as sources (the watcher ``stackbench up`` starts)."""

from __future__ import annotations

import argparse
import logging
import signal

NAME = "lists"
HELP = "read declared mailing lists' archives and make series of what is posted"
DESCRIPTION = """\
A list is a YAML file in kernels/lists/ (or a folder named by $STACKBENCH_LISTS): its
public-inbox archive (a URL such as https://lore.kernel.org/linux-mm, or a local v2 inbox),
filters (addressed list, subject tag, paths touched), the tree to test on, where reports go.

  stackbench lists show              each list: last fetch, error, series made, skipped
  stackbench lists fetch [NAME ...]  read what is new now (every enabled list by default)
  stackbench lists watch             the service: fetch each list on its timer, with
                                     backoff while its archive cannot be reached"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("show", help="each list's state")
    f = sub.add_parser("fetch", help="read what is new now")
    f.add_argument("names", nargs="*", metavar="NAME")
    sub.add_parser("watch", help="fetch on a timer until SIGTERM")


def run(args: argparse.Namespace) -> int:
    from stackbench.errors import NotFoundError
    from stackbench.jobs.lists import list_watch
    from stackbench.resultsdb import db, lists_q

    eng = db.engine()
    if args.action == "watch":
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", force=True)
        logging.getLogger("stackbench").setLevel(logging.INFO)
        stopped: list[int] = []
        signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
        list_watch.run(eng, stop=lambda: bool(stopped))
        return 0
    if args.action == "fetch":
        known = {x.name: x for x in list_watch.declared(eng)}
        for n in args.names:
            if n not in known:
                names = ", ".join(known) or "none"
                raise NotFoundError(f"no mailing list named {n!r} (known: {names})")
        chosen = [known[n] for n in args.names] or [x for x in known.values() if x.enabled]
        if not chosen:
            print("no enabled list (kernels/lists/*.yaml, $STACKBENCH_LISTS)")
        failed = 0
        for lst in chosen:
            rep = list_watch.fetch(eng, lst)
            print(rep.line())
            failed += bool(rep.error)
        return 1 if failed else 0
    declared = {x.name: x for x in list_watch.declared(eng)}
    with db.session(eng) as s:
        rows = {r.name: r for r in lists_q.all_lists(s)}
        counts = {r.name: lists_q.counts(s, r.id) for r in rows.values()}
    for name in sorted(set(declared) | set(rows)):
        row, lst = rows.get(name), declared.get(name)
        state = "enabled" if lst and lst.enabled else "disabled" if lst else "no longer declared"
        last = (
            row.last_fetch_at.isoformat(timespec="seconds")
            if row and row.last_fetch_at
            else "never"
        )
        c = counts.get(name, {})
        print(f"{name}: {state}; archive {lst.archive if lst else row.archive}; last fetch {last}; "
              f"{c.get('cover', 0) + c.get('patch', 0)} series mail(s), {c.get('skipped', 0)} skipped")  # fmt: skip
        if row and row.last_error:
            print(f"  error: {row.last_error} (try {row.failures}, next {row.next_fetch_at})")
    print(_watcher_line())
    return 0


def _watcher_line() -> str:
    """The watcher of 'stackbench up' as its supervisor sees it."""
    from stackbench import services
    from stackbench.cli.status import since

    rows = {r["name"]: r for r in services.status() or []}
    w = rows.get("lists")
    if w is None:
        return "watcher: not running under 'stackbench up' here"
    state = "up" if w["up"] else f"DOWN ({w['state']})"
    return f"watcher: {state} since {since(w['since'])}, restarted {w['restarts']} times"
