"""stackbench mail: queue report mails and deliver the outbox."""

from __future__ import annotations

import argparse

NAME = "mail"
HELP = "queue report mails and deliver the mail outbox over SMTP"
DESCRIPTION = """\
Mails go through a database outbox: a queued mail is delivered once, retried with backoff
while the SMTP server is unreachable, and never lost.

  stackbench mail series ID          queue the series report (threaded under its cover letter)
  stackbench mail regression ID      queue the regression report (0-day robot shape)
  stackbench mail send [--dry-run DIR]   deliver due mails (DIR: write .eml files instead)
  stackbench mail list               show the outbox

SMTP settings: STACKBENCH_SMTP_HOST, _PORT, _STARTTLS=1, _USER, _PASSWORD,
STACKBENCH_MAIL_FROM, STACKBENCH_MAIL_LIST (the list address), STACKBENCH_PUBLIC_URL."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("series", help="queue a series report")
    s.add_argument("id", type=int)
    r = sub.add_parser("regression", help="queue a regression report")
    r.add_argument("id", type=int)
    d = sub.add_parser("send", help="deliver due mails")
    d.add_argument("--dry-run", metavar="DIR", help="write .eml files to DIR instead of SMTP")
    sub.add_parser("list", help="list the outbox")


def run(args: argparse.Namespace) -> int:

    from stackbench.jobs.executors import jobspecs
    from stackbench.mail import config, outbox, reports
    from stackbench.resultsdb import db

    eng = db.engine()
    if args.action == "series":
        print(f"queued mail {reports.queue(eng, reports.series_report(eng, args.id))}")
    elif args.action == "regression":
        mail = reports.regression_report(eng, args.id, job_spec=jobspecs.format_job_spec)
        print(f"queued mail {reports.queue(eng, mail)}")
    elif args.action == "send":
        cfg = config.from_env()
        if args.dry_run:
            cfg.dry_run_dir = args.dry_run
        rep = outbox.deliver(eng, cfg)
        print(f"sent {len(rep.sent)}, deferred {len(rep.deferred)}, failed {len(rep.failed)}")
        return 0 if not rep.failed else 1
    else:
        from stackbench.resultsdb import outbox_q

        with db.session(eng) as s:
            rows = outbox_q.listing(s)
        for row in rows:
            err = f"  ({row.last_error})" if row.last_error else ""
            print(f"{row.id:5d} {row.kind:10s} {row.state:8s} {row.attempts:2d} {row.subject}{err}")
    return 0
