"""Report mails: rendered from the stored results, queued in the database outbox, delivered
over SMTP with retries (or written to files in dry-run mode); and the accounts that submit
series and receive those mails (accounts.py)."""
