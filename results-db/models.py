"""The results schema (DESIGN.md "Data model"), made by the migrations in ``migrations/``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), server_default=func.now())


_NULL_JSON = JSONB(none_as_null=True)  # None is SQL NULL: the readers ask IS NULL


def _meta() -> Any:
    return mapped_column(JSONB, nullable=False, server_default="{}", default=dict)


def _same_date(a: str, b: str) -> bool:
    """Two ISO 8601 dates (git's and the mail's) name the same instant."""
    if a == b:
        return True
    try:
        return datetime.fromisoformat(a) == datetime.fromisoformat(b)
    except (TypeError, ValueError):
        return False


class Tree(Base):
    __tablename__ = "tree"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    url: Mapped[str] = mapped_column(Text, default="")
    default_base: Mapped[str] = mapped_column(String(200), default="")
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()


class Series(Base):
    """A submitted patch stack. state: new, applying, applied, apply-failed, building,
    running, done, failed."""

    __tablename__ = "series"
    id: Mapped[int] = mapped_column(primary_key=True)
    tree_id: Mapped[int | None] = mapped_column(ForeignKey("tree.id"))
    title: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
    submitter: Mapped[str] = mapped_column(Text, default="")
    submitter_email: Mapped[str] = mapped_column(Text, default="")
    cover_letter: Mapped[str] = mapped_column(Text, default="")
    message_id: Mapped[str | None] = mapped_column(Text)
    in_reply_to: Mapped[str | None] = mapped_column(Text)
    base_ref: Mapped[str] = mapped_column(Text, default="")
    base_commit: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32), default="new", index=True)
    error: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(String(32), default="mbox")
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("app_user.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True)
    # came by git push: the intake repository and head its commits are fetched from
    push_repo: Mapped[str | None] = mapped_column(Text)
    push_head: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = _meta()
    # the submitted mails as sent (up to the parser's size limit): read only to apply them
    mbox: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )
    patches: Mapped[list[Patch]] = relationship(
        back_populates="series", order_by="Patch.idx", cascade="all, delete-orphan"
    )
    tree: Mapped[Tree | None] = relationship()


class Patch(Base):
    """One patch of a series and, once applied, its commit. state: pending, applied,
    apply-failed, skipped."""

    __tablename__ = "patch"
    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id", ondelete="CASCADE"))
    idx: Mapped[int] = mapped_column(Integer)
    total: Mapped[int] = mapped_column(Integer)
    subject: Mapped[str] = mapped_column(Text, default="")
    author: Mapped[str] = mapped_column(Text, default="")
    author_email: Mapped[str] = mapped_column(Text, default="")
    date: Mapped[str] = mapped_column(Text, default="")
    message_id: Mapped[str | None] = mapped_column(Text)
    in_reply_to: Mapped[str | None] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text, default="")
    diff: Mapped[str] = mapped_column(Text, default="")
    commit_sha: Mapped[str | None] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(32), default="pending")
    error: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[dict[str, Any]] = _meta()
    # what the applied commit carries (git am reads in-body From:/Subject:/Date: lines)
    commit_author: Mapped[str | None] = mapped_column(Text)
    commit_author_email: Mapped[str | None] = mapped_column(Text)
    commit_date: Mapped[str | None] = mapped_column(Text)
    commit_subject: Mapped[str | None] = mapped_column(Text)
    series: Mapped[Series] = relationship(back_populates="patches")
    __table_args__ = (UniqueConstraint("series_id", "idx"),)

    def shown(self) -> dict[str, Any]:
        """Author, subject and date as the commit has them (the mail's until it is
        applied), and under ``mail`` the mail's header values where they differ."""
        author = self.commit_author if self.commit_author is not None else self.author
        email = (
            self.commit_author_email if self.commit_author_email is not None else self.author_email
        )
        subject = self.commit_subject if self.commit_subject is not None else self.subject
        date = self.commit_date if self.commit_date is not None else self.date
        mail: dict[str, str] = {}
        if email.lower() != self.author_email.lower() or author != self.author:
            mail["author"], mail["author_email"] = self.author, self.author_email
        if subject != self.subject:
            mail["subject"] = self.subject
        if not _same_date(date, self.date):
            mail["date"] = self.date
        return {
            "author": author, "author_email": email, "subject": subject, "date": date,
            "mail": mail,
        }  # fmt: skip


class KernelBuild(Base):
    """A kernel: built here, or known from imported results. ``commit`` is a sha (or an
    mmtests run name for imports); ``name`` is what tables show. status: pending, building,
    built, build-failed, imported."""

    __tablename__ = "kernel_build"
    id: Mapped[int] = mapped_column(primary_key=True)
    tree_id: Mapped[int | None] = mapped_column(ForeignKey("tree.id"))
    commit: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str] = mapped_column(Text, default="")
    config_name: Mapped[str] = mapped_column(String(200), default="")
    config_hash: Mapped[str] = mapped_column(String(64), default="")
    compiler: Mapped[str] = mapped_column(String(100), default="")
    status: Mapped[str] = mapped_column(String(32), default="pending")
    log: Mapped[str] = mapped_column(Text, default="")
    artifact_path: Mapped[str] = mapped_column(Text, default="")
    duration_s: Mapped[float | None] = mapped_column(Double)
    series_id: Mapped[int | None] = mapped_column(ForeignKey("series.id", ondelete="SET NULL"))
    patch_id: Mapped[int | None] = mapped_column(ForeignKey("patch.id", ondelete="SET NULL"))
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("commit", "config_hash", "compiler"),)


class Machine(Base):
    __tablename__ = "machine"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(32), default="qemu")  # qemu | baremetal | import
    cpus: Mapped[int | None] = mapped_column(Integer)
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    nodes: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), default="idle")
    last_seen: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    meta: Mapped[dict[str, Any]] = _meta()


class Job(Base):
    """A benchmark with its parameters. ``params_key`` is the canonical parameter string
    (LKP's path_params style) that identifies the job together with suite and version."""

    __tablename__ = "job"
    id: Mapped[int] = mapped_column(primary_key=True)
    suite: Mapped[str] = mapped_column(String(100))
    test: Mapped[str] = mapped_column(String(200), default="")
    params: Mapped[dict[str, Any]] = _meta()
    params_key: Mapped[str] = mapped_column(Text)
    suite_version: Mapped[str] = mapped_column(String(100), default="")
    runner: Mapped[str] = mapped_column(String(100), default="")
    __table_args__ = (UniqueConstraint("suite", "params_key", "suite_version", "runner"),)


class Run(Base):
    """One execution of a job on a kernel and machine. status: queued, running, done,
    crashed, timeout, failed, lost."""

    __tablename__ = "run"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"))
    build_id: Mapped[int] = mapped_column(ForeignKey("kernel_build.id"))
    machine_id: Mapped[int | None] = mapped_column(ForeignKey("machine.id"))
    iteration: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(32), default="done", index=True)
    source: Mapped[str] = mapped_column(String(64), default="")
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    duration_s: Mapped[float | None] = mapped_column(Double)
    error: Mapped[str] = mapped_column(Text, default="")
    sysstate: Mapped[dict[str, Any]] = _meta()
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()
    # the boot this run came from (its runs share its noise: the statistics' unit is the
    # boot) and the plan's round (every kernel once, shuffled); NULL for imports
    boot_id: Mapped[str | None] = mapped_column(String(128))
    boot_round: Mapped[int | None] = mapped_column(Integer)
    # the series whose plan booted it (NULL: an import, a run of no series)
    series_id: Mapped[int | None] = mapped_column(ForeignKey("series.id", ondelete="SET NULL"))
    __table_args__ = (
        Index("ix_run_series", "series_id"),
        Index("ix_run_job_build", "job_id", "build_id"),
        Index("ix_run_build", "build_id"),
        Index("ix_run_boot", "boot_id"),
    )


class RunLog(Base):
    """Raw outputs of a run (benchmark output, console, monitors), kept for re-parsing."""

    __tablename__ = "run_log"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(Text)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    __table_args__ = (UniqueConstraint("run_id", "name"),)


class Metric(Base):
    __tablename__ = "metric"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    unit: Mapped[str] = mapped_column(String(32), default="")
    higher_is_better: Mapped[bool | None] = mapped_column(Boolean)
    kind: Mapped[str] = mapped_column(String(32), default="")  # throughput, latency, count...


class Sample(Base):
    """One value; ``seq`` orders the many samples of one metric in one run.

    No foreign keys here: PostgreSQL checks them row by row, which made bulk COPY four times
    slower. Samples are only written by ``ingest`` inside the transaction that creates their
    run, and :func:`stackbench.resultsdb.ingest.delete_runs` removes them with their runs."""

    __tablename__ = "sample"
    run_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    metric_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Double)


class RunSamples(Base):
    """A large run's samples again, in one row (migration 0005): metric ids and their sample
    counts as big-endian int4s, and the values in (metric, seq) order as big-endian float8s,
    each packed in a bytea.
    The tables read whole runs, and one row per run reads in milliseconds where a scan of
    ``sample`` took a quarter of a second. Written by ``ingest`` with every run it COPYs
    (``ingest.COPY_THRESHOLD`` samples or more); ``sample`` stays the table of record."""

    __tablename__ = "run_samples"
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    metric_ids: Mapped[bytes] = mapped_column(LargeBinary)
    counts: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)


class LkpColumn(Base):
    """One kernel's LKP column of one job (migration 0006, tables/lkp_columns.py): its
    stats' averages and printed cells over its complete runs, its failure stats' sums, and
    the fingerprint of the runs and table code they were made from. LKP keeps the same per
    commit in matrix.json; an ``--all`` table of any kernels is their columns side by side."""

    __tablename__ = "lkp_column"
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    build_id: Mapped[int] = mapped_column(
        ForeignKey("kernel_build.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    fingerprint: Mapped[str] = mapped_column(Text)
    runs: Mapped[int] = mapped_column(Integer)
    axes: Mapped[str] = mapped_column(Text)
    perf: Mapped[str] = mapped_column(Text)
    avgs: Mapped[str] = mapped_column(Text)
    cells: Mapped[str] = mapped_column(Text)
    fails: Mapped[str] = mapped_column(Text)
    sums: Mapped[str] = mapped_column(Text)
    origins: Mapped[str] = mapped_column(Text)


class Comparison(Base):
    """A saved comparison: its kernels and options, reachable at a permanent URL by key."""

    __tablename__ = "comparison"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    build_ids: Mapped[list[Any]] = mapped_column(JSONB)
    params: Mapped[dict[str, Any]] = _meta()
    result: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()


class KeptTable(Base):
    """A table ``stackbench compare`` printed, kept for the next same command on unchanged
    runs (migration 0009, tables/textcache.py): its UTF-8 text, stored uncompressed,
    and the build ids and fingerprint of the runs it was made from."""

    __tablename__ = "kept_table"
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    build_ids: Mapped[list[int]] = mapped_column(ARRAY(Integer))
    fingerprint: Mapped[str] = mapped_column(Text)
    options: Mapped[dict[str, Any]] = mapped_column(JSONB)
    warnings: Mapped[list[Any]] = mapped_column(JSONB, server_default="[]")
    text: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )


class TrackedBranch(Base):
    __tablename__ = "tracked_branch"
    id: Mapped[int] = mapped_column(primary_key=True)
    tree_id: Mapped[int] = mapped_column(ForeignKey("tree.id"))
    branch: Mapped[str] = mapped_column(String(200))
    jobs: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    baseline_build_id: Mapped[int | None] = mapped_column(ForeignKey("kernel_build.id"))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    runs: Mapped[int | None] = mapped_column(Integer)
    max_runs: Mapped[int | None] = mapped_column(Integer)
    bisect: Mapped[bool] = mapped_column(Boolean, default=True, server_default="true")
    meta: Mapped[dict[str, Any]] = _meta()
    __table_args__ = (UniqueConstraint("tree_id", "branch"),)


class Regression(Base):
    """A metric judged worse between two kernels. state: open, bisecting, bisected,
    inconclusive, closed."""

    __tablename__ = "regression"
    id: Mapped[int] = mapped_column(primary_key=True)
    tree_id: Mapped[int | None] = mapped_column(ForeignKey("tree.id"))
    branch: Mapped[str] = mapped_column(String(200), default="")
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"))
    metric_id: Mapped[int] = mapped_column(ForeignKey("metric.id"))
    good_build_id: Mapped[int] = mapped_column(ForeignKey("kernel_build.id"))
    bad_build_id: Mapped[int] = mapped_column(ForeignKey("kernel_build.id"))
    change_pct: Mapped[float | None] = mapped_column(Double)
    ci_low: Mapped[float | None] = mapped_column(Double)
    ci_high: Mapped[float | None] = mapped_column(Double)
    confidence: Mapped[float | None] = mapped_column(Double)
    verdict: Mapped[str] = mapped_column(String(32), default="changed")
    state: Mapped[str] = mapped_column(String(32), default="open")
    culprit: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("job_id", "metric_id", "good_build_id", "bad_build_id"),)


class Bisect(Base):
    """state: running, found, inconclusive, failed."""

    __tablename__ = "bisect"
    id: Mapped[int] = mapped_column(primary_key=True)
    regression_id: Mapped[int | None] = mapped_column(
        ForeignKey("regression.id", ondelete="SET NULL")
    )
    tree_id: Mapped[int | None] = mapped_column(ForeignKey("tree.id"))
    good: Mapped[str] = mapped_column(String(64))
    bad: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"))
    metric_id: Mapped[int | None] = mapped_column(ForeignKey("metric.id"))
    state: Mapped[str] = mapped_column(String(32), default="running")
    steps: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    culprit: Mapped[str | None] = mapped_column(String(64))
    confidence: Mapped[float | None] = mapped_column(Double)
    kernels_built: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MailOutbox(Base):
    """state: pending, sent, failed (gave up after retries)."""

    __tablename__ = "mail_outbox"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    message_id: Mapped[str] = mapped_column(Text, unique=True)
    to_addrs: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    subject: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    headers: Mapped[dict[str, Any]] = _meta()
    state: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = _now()
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AppUser(Base):
    __tablename__ = "app_user"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    email: Mapped[str] = mapped_column(Text, default="")
    password_hash: Mapped[str] = mapped_column(Text, default="")
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    is_worker: Mapped[bool] = mapped_column(Boolean, default=False)
    # part of every session cookie; bumped on logout and password change to end them all
    session_gen: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # report mails go only to a verified address (set by `stackbench user add --email`)
    email_verified: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    created_at: Mapped[datetime] = _now()


class LoginFailure(Base):
    """A wrong password (web login or git Basic auth), counted by the login throttle."""

    __tablename__ = "login_failure"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    remote: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    __table_args__ = (Index("ix_login_failure_created", "created_at"),)


class ApiToken(Base):
    __tablename__ = "api_token"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("app_user.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    name: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = _now()
    last_used: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Event(Base):
    """An append-only log of state changes, shown to users on series and run pages."""

    __tablename__ = "event"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    series_id: Mapped[int | None] = mapped_column(ForeignKey("series.id", ondelete="CASCADE"))
    subject: Mapped[str] = mapped_column(Text)  # e.g. "build:12", "run:40"
    state: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = _now()


class MailList(Base):
    """A declared mailing list (kernels/lists) and the watcher's fetch state."""

    __tablename__ = "mail_list"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    archive: Mapped[str] = mapped_column(Text, default="")
    # epoch number (as text) -> the last commit read in it
    cursors: Mapped[dict[str, Any]] = _meta()
    last_fetch_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_ok_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str] = mapped_column(Text, default="")
    failures: Mapped[int] = mapped_column(Integer, default=0)
    next_fetch_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    meta: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()


class ListThread(Base):
    """A series posted to a list, assembled from its mails. state: collecting, incomplete,
    series (made one: series_id), filtered, failed (reason)."""

    __tablename__ = "list_thread"
    id: Mapped[int] = mapped_column(primary_key=True)
    list_id: Mapped[int] = mapped_column(ForeignKey("mail_list.id", ondelete="CASCADE"))
    root: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
    total: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), default="collecting", index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    series_id: Mapped[int | None] = mapped_column(ForeignKey("series.id", ondelete="SET NULL"))
    first_seen: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("list_id", "root", "version", "total"),)


class ListMessage(Base):
    """One message read from a list's archive. kind: cover, patch, skipped (reason)."""

    __tablename__ = "list_message"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    list_id: Mapped[int] = mapped_column(ForeignKey("mail_list.id", ondelete="CASCADE"))
    message_id: Mapped[str] = mapped_column(Text)
    epoch: Mapped[int] = mapped_column(Integer)
    git_commit: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(Text, default="")
    sender: Mapped[str] = mapped_column(Text, default="")
    kind: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    thread_id: Mapped[int | None] = mapped_column(
        ForeignKey("list_thread.id", ondelete="SET NULL"), index=True
    )
    idx: Mapped[int | None] = mapped_column(Integer)
    raw: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = _now()
    # sender: the From address, lower case; a Message-ID is one sender's claim
    __table_args__ = (UniqueConstraint("list_id", "message_id", "sender"),)


class SeriesAttempt(Base):
    """One hand-over of a series to an executor, and what the dispatcher follows it by.
    executor: "" (not taken yet), in-process, buildbot, foreground. outcome: "" while open,
    then done, failed, apply-failed or superseded (handed over again before it ended)."""

    __tablename__ = "series_attempt"
    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(32), default="")
    executor: Mapped[str] = mapped_column(String(32), default="")
    submission: Mapped[str] = mapped_column(Text, default="")
    buildset: Mapped[int | None] = mapped_column(Integer)
    buildbot: Mapped[str] = mapped_column(Text, default="")
    since_build: Mapped[int] = mapped_column(Integer, default=0)
    first_run: Mapped[int] = mapped_column(BigInteger, default=0)
    kernels: Mapped[int] = mapped_column(Integer, default=0)
    benchmarks: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[str] = mapped_column(String(32), default="")  # k/N of the state's word
    started: Mapped[datetime] = _now()
    ended: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str] = mapped_column(String(32), default="")
    # the plan, checked once at the intake (None: the default; a later attempt starts with
    # the one before's), and what the dispatcher acts on: a report due at the end
    # (report_mail: the one queued, or why none), a host fault, a pushed tree fetched
    jobs: Mapped[list[Any] | None] = mapped_column(_NULL_JSON)
    runs: Mapped[int | None] = mapped_column(Integer)
    max_boots: Mapped[int | None] = mapped_column(Integer)
    adaptive: Mapped[bool | None] = mapped_column(Boolean)
    cpus: Mapped[int | None] = mapped_column(Integer)
    mem_mb: Mapped[int | None] = mapped_column(Integer)
    accel: Mapped[str | None] = mapped_column(String(8))
    check_claims: Mapped[bool] = mapped_column(Boolean, default=False)
    report_due: Mapped[bool] = mapped_column(Boolean, default=False)
    report_mail: Mapped[dict[str, Any] | None] = mapped_column(_NULL_JSON)
    host_fault: Mapped[dict[str, Any] | None] = mapped_column(_NULL_JSON)
    fetched: Mapped[bool | None] = mapped_column(Boolean)
    batches: Mapped[list[SeriesBatch]] = relationship(
        order_by="SeriesBatch.id", cascade="all, delete-orphan"
    )
    __table_args__ = (UniqueConstraint("series_id", "number"),)


class SeriesBatch(Base):
    """One plan of rounds handed over at once (the first rounds, then each adaptive look):
    its key, buildset, boots, the plan's record, and the counts after it (``have`` rounds
    looked at, ``stored`` boots the look found, ``offsets``: iterations taken per job)."""

    __tablename__ = "series_batch"
    id: Mapped[int] = mapped_column(primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("series_attempt.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(Text)
    buildset: Mapped[int | None] = mapped_column(Integer)
    boots: Mapped[int] = mapped_column(Integer, default=0)
    have: Mapped[int | None] = mapped_column(Integer)
    stored: Mapped[int | None] = mapped_column(Integer)
    offsets: Mapped[dict[str, Any]] = _meta()
    plan: Mapped[dict[str, Any]] = _meta()
    created_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("attempt_id", "key"),)


class SeriesRound(Base):
    """One try of a round of a batch on one worker. state: planned, running, done, failed,
    lost (its worker went away: the round runs again as the next try)."""

    __tablename__ = "series_round"
    id: Mapped[int] = mapped_column(primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("series_batch.id", ondelete="CASCADE"))
    round: Mapped[int] = mapped_column(Integer)
    try_: Mapped[int] = mapped_column("try", Integer, default=1)
    worker: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(32), default="planned")
    buildid: Mapped[int | None] = mapped_column(Integer)
    __table_args__ = (UniqueConstraint("batch_id", "round", "try"),)
