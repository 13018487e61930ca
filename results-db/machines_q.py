"""Machine rows: the workers runs are stored under, listed and kept by administrators."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from stackbench.resultsdb.models import Machine, Run


def get(s: Session, machine_id: int) -> Machine | None:
    return s.get(Machine, machine_id)


def listing(s: Session) -> list[Machine]:
    """Every machine, by name."""
    return list(s.scalars(select(Machine).order_by(Machine.name)))


def add(
    s: Session,
    name: str,
    *,
    kind: str,
    cpus: int | None = None,
    memory_mb: int | None = None,
    nodes: int | None = None,
) -> Machine:
    """A new machine; a name in use fails when the session flushes or commits."""
    row = Machine(name=name, kind=kind, cpus=cpus, memory_mb=memory_mb, nodes=nodes)
    s.add(row)
    return row


def delete(s: Session, row: Machine) -> None:
    s.delete(row)


def first_of_build(s: Session, build_id: int) -> Machine | None:
    """A machine that ran the kernel (the first the database finds)."""
    return s.scalars(
        select(Machine).join(Run, Run.machine_id == Machine.id).where(Run.build_id == build_id)
    ).first()
